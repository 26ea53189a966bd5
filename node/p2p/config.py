"""Host settings and the errors the adapter raises.

The defaults encode what DESIGN.md measured for py-libp2p 0.8.1: gossip payloads stay well under the
~1 MiB point where ``publish()`` silently drops, bulk bytes go over request streams instead, and our own
token bucket replaces py-libp2p's per-topic spam cap (10 msg/s) which is far too low for a swarm.
"""

from __future__ import annotations

from dataclasses import dataclass

from .conngate import ConnLimits
from .reach import ReachConfig
from .relaygate import RelayLimits


@dataclass(frozen=True)
class HostConfig:
    seed: bytes  # 32-byte Ed25519 seed: the same key signs gossip envelopes and is the libp2p identity
    listen_host: str = "127.0.0.1"
    port: int = 0  # 0 = the OS picks
    max_gossip_bytes: int = 900_000  # publish() drops silently above ~1 MiB: refuse with MessageTooLarge
    max_request_bytes: int = 64 << 20  # cap on one inbound request frame and the default response cap
    publish_rate: float = 200.0  # token bucket: messages/s; publish() waits for a token (backpressure)
    publish_burst: int = 50
    heartbeat_interval: float = 1.0  # gossipsub heartbeat
    gossip_degree: int = 6  # D; Dlo and Dhi below
    gossip_degree_low: int = 4
    gossip_degree_high: int = 12
    # Bounded send queue: py-libp2p keeps a 32-slot queue per peer and drops on full. publish() waits
    # while any peer's queue holds this many RPCs, up to send_queue_wait seconds, then publishes anyway
    # (counted as "send_queue_full") so one stuck peer cannot stall the whole node.
    send_queue_high_water: int = 24
    send_queue_wait: float = 2.0
    request_read_timeout: float = 30.0  # inbound: the longest any request frame may take to arrive
    request_idle_timeout: float = 5.0  # inbound: a request stream must start its frame within this
    min_request_rate: float = 256 * 1024  # bytes/s: a frame's read deadline is idle + length / rate
    request_handler_timeout: float = 60.0  # inbound: handler + response write
    max_inbound_requests: int = 32  # concurrent inbound request handlers across all peers
    max_inbound_requests_per_peer: int = 4  # ... and for one peer: one peer cannot take every slot
    max_inbound_requests_per_subnet: int = 24  # ... and for the peers of one network (/24, IPv6 /48)
    # What each request really needs, so a peer cannot make us buffer up to the 64 MiB response cap
    # for a 32-byte question. The swarm's protocols (swarm/protocols.py): sync asks for at most 32
    # task ids, blob names one 32-byte hash, shard a 32-byte root and a 4-byte index. Other protocols
    # get max_request_bytes unless set_request_handler is given a cap.
    request_caps: tuple[tuple[str, int], ...] = (
        ("/swarm/sync/1", 16 << 10),
        ("/swarm/blob/1", 64),
        ("/swarm/shard/2", 64),
    )
    # Stream-level abuse is charged per peer (budget.PENALTY_POINTS) and reported by Host.on_penalty;
    # the node's reputation ledger decides bans. A number here also makes the host block a peer by
    # itself once its points reach it (a host without a ledger, or a backstop); None: report only.
    penalty_block_points: float | None = None
    penalty_block_seconds: float = 300.0
    dial_timeout_default: float = 5.0
    # Inbound connections: handshake deadline, pending and established bounds per source address and
    # in total, slots reserved for known peers (conngate.py says why each one exists).
    conn_limits: ConnLimits = ConnLimits()
    # Peers behind NATs (node/p2p/nat.py): dial-back reachability, relay client, DCUtR. Off for a bare
    # host (unit tests of other parts); the node turns it on.
    nat: bool = False
    reach: ReachConfig = ReachConfig()
    relay_service: bool = False  # serve circuit relay v2 (hop) under relay_limits: a public peer's job
    relay_limits: RelayLimits = RelayLimits()
    announce_addrs: tuple[str, ...] = ()  # advertise these instead of the listen addresses (port forwarding)
    quic: bool = False  # also listen on QUIC (udp, same port number when port != 0): see docs/benchmarks.md

    def __post_init__(self) -> None:
        if not isinstance(self.seed, (bytes, bytearray)) or len(self.seed) != 32:
            raise ValueError("HostConfig.seed must be exactly 32 bytes")
        if not 0 < self.max_gossip_bytes <= 1_000_000:
            raise ValueError("max_gossip_bytes must be in (0, 1_000_000]: py-libp2p drops ~1 MiB RPCs")
        if self.publish_rate <= 0 or self.publish_burst < 1:
            raise ValueError("publish_rate must be > 0 and publish_burst >= 1")
        if not self.gossip_degree_low <= self.gossip_degree <= self.gossip_degree_high:
            raise ValueError("need gossip_degree_low <= gossip_degree <= gossip_degree_high")
        if not 1 <= self.max_inbound_requests_per_peer <= self.max_inbound_requests_per_subnet \
                <= self.max_inbound_requests:
            raise ValueError("need 1 <= max_inbound_requests_per_peer <= max_inbound_requests_per_subnet "
                             "<= max_inbound_requests")
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be > 0")


    def request_cap(self, protocol: str) -> int:
        """The largest inbound request accepted on ``protocol``."""
        return min(dict(self.request_caps).get(protocol, self.max_request_bytes), self.max_request_bytes)


class P2PError(Exception):
    """Base class for errors raised by the host adapter."""


class DialError(P2PError):
    """A connect() failed; the message says to what and why."""


class RequestError(P2PError):
    """A request() failed. ``reason`` is a short machine-readable tag (timeout, reset, too_large, ...)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class MessageTooLarge(P2PError):
    """publish() refused a payload above HostConfig.max_gossip_bytes (bulk bytes belong on streams)."""
