"""One entry of the peer table (swarm/membership.py): what we know of a peer and how we last heard it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gossip.messages import PeerAddrs
from gossip.release import Announced

ALIVE, GONE, KNOWN = "alive", "gone", "known"  # KNOWN: an address we heard of, never a heartbeat


@dataclass(slots=True)  # one per (peer, peer) pair: a 1,000-peer simulation holds a million
class PeerInfo:
    peer_id: str
    state: str = KNOWN
    roles: tuple[str, ...] = ()
    agent: str = ""
    addrs: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    versions: dict[str, int] = field(default_factory=dict)
    last_seq: int = -1
    gossip_seq: int = -1  # the newest seq of its gossiped heartbeats (last_seq: of any, links' too)
    last_seen: float | None = None
    interval: float = 0.0  # the peer's declared heartbeat interval
    swarm: int = 0  # the swarm size the peer declared (StatusHeartbeat.peers; 0: it had no estimate)
    latency: float | None = None
    clock_offset: float | None = None  # our clock minus its heartbeat's send time: delay plus clock skew
    connected: bool = False
    dial_failures: int = 0
    next_dial: float = 0.0
    announced: Announced | None = None  # what its last heartbeat said it speaks (gossip/release.py)
    linked_once: bool = False  # we held a link to it (vouched for: its connection passed our address limits)
    exchange_entry: PeerAddrs | None = None  # how our peer exchange names it (built once per addresses)

    def as_dict(self, now: float, heard_on_link: float | None = None) -> dict:
        """`last_seen_ago` counts from whichever is later: our last heartbeat from it, or (a linked peer)
        the last thing its link carried."""
        seen = self.last_seen if heard_on_link is None or self.last_seen is None else max(self.last_seen, heard_on_link)
        return {
            "peer_id": self.peer_id, "state": self.state, "connected": self.connected,
            "roles": list(self.roles), "agent": self.agent, "addrs": list(self.addrs),
            "tasks": list(self.tasks), "versions": dict(sorted(self.versions.items())),
            "last_seen_ago": None if seen is None else round(now - seen, 3),
            "latency_ms": None if self.latency is None else round(self.latency * 1000, 2),
            "clock_offset_ms": None if self.clock_offset is None else round(self.clock_offset * 1000, 2),
            "proto": None if self.announced is None else str(self.announced),
        }
