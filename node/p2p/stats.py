"""Counters the host keeps, so the node/TUI can see drops and attacks instead of guessing.

Plain counters only (no locks needed: trio runs one task at a time).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

DIAL_PEERS_KEPT = 256


@dataclass
class HostStats:
    published: int = 0  # our own messages handed to gossipsub
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> count (ours and inbound)
    received: int = 0  # new inbound messages given to the validator
    accepted: int = 0
    rejected: int = 0
    validator_errors: int = 0  # validator raised: counted as reject
    guarded_errors: Counter[str] = field(default_factory=Counter)  # protocol -> handler exceptions caught
    requests_served: int = 0
    requests_failed: Counter[str] = field(default_factory=Counter)  # reason -> count (inbound)
    requests_sent: int = 0
    request_errors: Counter[str] = field(default_factory=Counter)  # reason -> count (outbound)
    bytes_in: Counter[str] = field(default_factory=Counter)  # peer id -> request/response + gossip payload bytes
    bytes_out: Counter[str] = field(default_factory=Counter)
    peer_event_errors: int = 0  # on_peer_event callbacks that raised
    publish_wait_seconds: float = 0.0  # time publish() spent blocked on rate limit or send queues
    penalties: Counter[str] = field(default_factory=Counter)  # abuse reason -> charges (budget.PenaltyBox)
    blocked: Counter[str] = field(default_factory=Counter)  # reason -> peers blocked for it
    connections_refused: Counter[str] = field(default_factory=Counter)  # reason -> inbound sockets refused
    relay: Counter[str] = field(default_factory=Counter)  # relay service and client events (relay.py, autorelay.py)
    holepunch: Counter[str] = field(default_factory=Counter)  # DCUtR attempts, successes, refusals (holepunch.py)
    dials: Counter[str] = field(default_factory=Counter)  # our outbound dials: ok, failed, relayed_ok, relayed_failed
    dial_failures: Counter[str] = field(default_factory=Counter)  # peer -> our failed dials to it (bounded)

    def dial_failed(self, peer: str) -> None:
        """Count a failed dial to ``peer`` (proof that unreachable addresses are retried with backoff,
        not endlessly); the table keeps the DIAL_PEERS_KEPT peers with the most failures."""
        self.dial_failures[peer] += 1
        if len(self.dial_failures) > DIAL_PEERS_KEPT:
            del self.dial_failures[min(self.dial_failures, key=self.dial_failures.__getitem__)]

    def snapshot(self) -> dict[str, Any]:
        """A JSON-friendly copy for status endpoints."""
        return {
            "published": self.published,
            "dropped": dict(self.dropped),
            "received": self.received,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "validator_errors": self.validator_errors,
            "guarded_errors": dict(self.guarded_errors),
            "requests_served": self.requests_served,
            "requests_failed": dict(self.requests_failed),
            "requests_sent": self.requests_sent,
            "request_errors": dict(self.request_errors),
            "bytes_in": dict(self.bytes_in),
            "bytes_out": dict(self.bytes_out),
            "peer_event_errors": self.peer_event_errors,
            "publish_wait_seconds": round(self.publish_wait_seconds, 3),
            "penalties": dict(self.penalties),
            "blocked": dict(self.blocked),
            "connections_refused": dict(self.connections_refused),
            "relay": dict(self.relay),
            "holepunch": dict(self.holepunch),
            "dials": dict(self.dials),
            "dial_failures": dict(self.dial_failures),
        }
