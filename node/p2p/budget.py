"""Per-peer budgets for what a remote peer can make us hold, and the penalty box that makes abuse cost.

Why per peer: with one global pool of request slots a single peer that opens streams and sends
nothing holds every slot, and every honest peer's sync, blob and shard requests fail. Each peer gets
``per_peer`` slots out of ``total``, so one peer can fill at most its own share; and because peer ids
are free, the peers of one source network together get at most ``per_subnet``.

Why penalties live here as well as in the core: the adapter is the only layer that sees stream-level
abuse (idle streams, oversized or truncated frames, meshsub garbage); the core only sees messages.
The box reports each charge to callbacks (the node feeds them to its reputation ledger, which owns
bans) and, when given ``block_points``, also blocks a peer whose points reach it for ``block_seconds``:
a host with no ledger above it still cuts off a peer that keeps abusing streams.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import trio

from .stats import HostStats

logger = logging.getLogger(__name__)

PenaltyFn = Callable[[str, str], None]  # (peer_id, reason)

# Points per abuse. A peer that trips one by accident (a request cut off by a reset link) stays far
# from the block mark; a peer that repeats any of them is blocked within a handful.
PENALTY_POINTS: dict[str, float] = {
    "request_too_large": 25.0,  # announced a frame above the protocol's cap (2^31-length frames)
    "request_bad_varint": 25.0,
    "request_truncated": 10.0,  # closed mid-frame
    "request_idle": 10.0,  # opened a request stream and sent nothing within the idle deadline
    "request_slow": 10.0,  # started a frame but did not finish it within the read deadline
    "request_flood": 5.0,  # asked for more concurrent slots than its share
    "pubsub_garbage": 25.0,  # a meshsub frame that does not parse
    "conn_flood": 10.0,  # more inbound connections at once than conn_limits.max_conns_per_peer
    "relay_garbage": 25.0,  # a hop/stop message that does not parse, or of the wrong type (relay.py)
    "relay_spoof": 25.0,  # RESERVE for a peer id other than the connection's
    "relay_idle": 10.0,  # a hop stream without its message within hop_read_timeout
    "relay_flood": 5.0,  # more hop streams at once than max_hop_streams_per_peer
    "holepunch_garbage": 25.0,  # a DCUtR message that does not parse, or out of order (holepunch.py)
    "holepunch_flood": 5.0,
    "dialback_garbage": 25.0,  # a /swarm/dialback/1 request that is not {"ports": [int]} (reach.py)  # DCUtR sessions faster than one per holepunch interval
}
DEFAULT_POINTS = 10.0


class PenaltyBox:
    """Decaying per-peer penalty points; above ``block_points`` the peer is blocked for a while.

    Points decay linearly at ``decay_per_s`` so rare accidents are forgotten. The table is bounded:
    past ``capacity`` entries the lowest-scored unblocked peer is forgotten (fresh keys cannot grow it).
    """

    def __init__(self, stats: HostStats, block_points: float | None = 100.0, block_seconds: float = 300.0,
                 decay_per_s: float = 1.0, capacity: int = 4096,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self._stats = stats
        self.block_points = block_points
        self.block_seconds = block_seconds
        self.decay_per_s = decay_per_s
        self.capacity = capacity
        self._clock = clock
        self._points: dict[str, tuple[float, float]] = {}  # peer -> (points, as of time)
        self._blocked_until: dict[str, float] = {}
        self.block_reasons: dict[str, str] = {}
        self._callbacks: list[PenaltyFn] = []
        self._block_callbacks: list[PenaltyFn] = []

    def add_callback(self, fn: PenaltyFn) -> None:
        """fn(peer, reason) on every charge: the node's hook into its reputation ledger."""
        self._callbacks.append(fn)

    def on_block(self, fn: PenaltyFn) -> None:
        """fn(peer, reason) when a peer gets blocked: the host disconnects it."""
        self._block_callbacks.append(fn)

    def points(self, peer: str) -> float:
        value, since = self._points.get(peer, (0.0, 0.0))
        return max(0.0, value - (self._clock() - since) * self.decay_per_s)

    def _notify(self, callbacks: list[PenaltyFn], peer: str, reason: str) -> None:
        for fn in list(callbacks):
            try:
                fn(peer, reason)
            except Exception as exc:  # noqa: BLE001 - a node bug must not stop the accounting
                self._stats.peer_event_errors += 1
                logger.warning("penalty callback raised: %r", exc)

    def charge(self, peer: str, reason: str) -> bool:
        """Count one abuse; True if it just got the peer blocked."""
        self._stats.penalties[reason] += 1
        self._notify(self._callbacks, peer, reason)
        if peer not in self._points and len(self._points) >= self.capacity:
            self._forget_one()
        total = self.points(peer) + PENALTY_POINTS.get(reason, DEFAULT_POINTS)
        self._points[peer] = (total, self._clock())
        if self.block_points is not None and total >= self.block_points and not self.is_blocked(peer):
            self._blocked_until[peer] = self._clock() + self.block_seconds
            self.block_reasons[peer] = reason
            self._stats.blocked[reason] += 1
            logger.info("blocking %s for %.0fs: %s", peer, self.block_seconds, reason)
            self._notify(self._block_callbacks, peer, reason)
            return True
        return False

    def is_blocked(self, peer: str) -> bool:
        until = self._blocked_until.get(peer)
        if until is None:
            return False
        if self._clock() >= until:
            del self._blocked_until[peer]
            self.block_reasons.pop(peer, None)
            self._points.pop(peer, None)
            return False
        return True

    def _forget_one(self) -> None:
        candidates = [(self.points(p), p) for p in self._points if p not in self._blocked_until]
        victim = min(candidates)[1] if candidates else next(iter(self._points))
        del self._points[victim]


class RequestSlots:
    """Concurrent inbound request slots: at most ``per_peer`` for one peer, ``per_subnet`` for the peers of
    one source network (subnet.py), ``total`` for all. Peer ids are free, so the per-peer share alone let
    eight fresh ids on one host hold all 32 slots with slow requests; the network's share keeps
    ``total - per_subnet`` slots for everyone else."""

    def __init__(self, total: int, per_peer: int, per_subnet: int | None = None) -> None:
        per_subnet = total if per_subnet is None else per_subnet
        if total < 1 or per_peer < 1 or not per_peer <= per_subnet <= total:
            raise ValueError("request slots: need 1 <= per_peer <= per_subnet <= total")
        self.total = total
        self.per_peer = per_peer
        self.per_subnet = per_subnet
        self._held: Counter[str] = Counter()
        self._held_by_subnet: Counter[str] = Counter()

    def in_use(self) -> int:
        return sum(self._held.values())

    def try_acquire(self, peer: str, subnet: str) -> str | None:
        """None when a slot was taken; else why not: 'peer_busy' (its share is used), 'subnet_busy' (its
        network's is) or 'busy'. Only 'peer_busy' is the peer's own doing."""
        if self._held[peer] >= self.per_peer:
            return "peer_busy"
        if self._held_by_subnet[subnet] >= self.per_subnet:
            return "subnet_busy"
        if self.in_use() >= self.total:
            return "busy"
        self._held[peer] += 1
        self._held_by_subnet[subnet] += 1
        return None

    def release(self, peer: str, subnet: str) -> None:
        for held, key in ((self._held, peer), (self._held_by_subnet, subnet)):
            held[key] -= 1
            if held[key] <= 0:
                del held[key]
