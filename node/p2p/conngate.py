"""Admission rules for inbound connections: who may hold a socket of ours, and for how long (no I/O here).

Why: 300 silent TCP connections from one address used to lock every new peer out. py-libp2p's Swarm
takes one of its 250 inbound slots per accepted socket *before* the handshake and refuses new sockets
once they are gone, so sockets that never speak hold every slot until the library's 10 s upgrade
timeout, and an attacker who keeps 300 open keeps the door shut. The rules here replace "refuse the
newcomer" with "evict the connection that is doing least", in two stages:

- **Unfinished handshakes** (``admit``): at most ``max_pending`` in all, ``max_pending_per_subnet``
  from one source network (subnet.py: a /24 or an IPv6 /48) and ``max_pending_per_ip`` from one
  address. A newcomer over a bound evicts a pending connection from the same address (or network, or
  the busiest network): one that has sent nothing yet first, oldest first; then one that has sent
  bytes but is older than ``grace`` (an honest Noise+yamux handshake takes a few round trips). The
  network bound is below the total so that an attacker with many addresses of one network (40
  loopback addresses opening 300 talking sockets a second refused half of the honest dials before
  it) always leaves room for dialers from elsewhere.
  Only when every candidate is young and talking is the newcomer refused. Every pending connection
  also has a ``deadline``. An attacker and an honest dialer behind the same address are told apart
  by behaviour: the dialer speaks at once (multistream-select), a silent socket never does
  (connguard marks a socket ``heard`` once it is readable, before libp2p's handshake reads it).
- **Established connections** (``check_established``), once the peer id is known: ``max_conns``
  in all, of which ``reserved_known`` are only for peers the node already knows (the gossip mesh,
  its address book, peers it dialed), ``max_conns_per_ip`` from one address and
  ``max_conns_per_subnet`` from one network for unknown peers, and
  ``max_conns_per_peer`` inbound connections of one peer. A known peer that finds the table full
  makes room by trimming an unprotected connection (``pick_trim``): never a mesh, task or known peer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from .subnet import subnet_of

# Penalty reasons the connection guard charges (budget.PENALTY_POINTS has their points).
CONN_FLOOD = "conn_flood"  # a peer opened more inbound connections than max_conns_per_peer


@dataclass(frozen=True)
class ConnLimits:
    handshake_timeout: float = 5.0  # Noise + yamux must finish within this, or the socket is closed
    grace: float = 1.0  # a talking handshake younger than this is not evicted for a newcomer
    max_pending: int = 64  # unfinished inbound handshakes, all sources
    max_pending_per_subnet: int = 48  # ... from one source network (/24, IPv6 /48)
    max_pending_per_ip: int = 16  # ... from one source address
    max_conns: int = 160  # established connections, all peers (py-libp2p's own inbound cap is 250)
    reserved_known: int = 32  # of max_conns, kept for peers the node already knows
    max_conns_per_ip: int = 64  # established connections of unknown peers from one address
    max_conns_per_subnet: int = 96  # ... from one network: fresh ids on many addresses leave room for others
    max_conns_per_peer: int = 2  # inbound connections of one peer (a simultaneous dial makes two)

    def __post_init__(self) -> None:
        if self.handshake_timeout <= 0 or self.grace < 0:
            raise ValueError("handshake_timeout must be > 0 and grace >= 0")
        if not 1 <= self.max_pending_per_ip <= self.max_pending_per_subnet <= self.max_pending:
            raise ValueError("need 1 <= max_pending_per_ip <= max_pending_per_subnet <= max_pending")
        if not 0 <= self.reserved_known < self.max_conns:
            raise ValueError("need 0 <= reserved_known < max_conns")
        if not 1 <= self.max_conns_per_ip <= self.max_conns_per_subnet or self.max_conns_per_peer < 1:
            raise ValueError("need 1 <= max_conns_per_ip <= max_conns_per_subnet and max_conns_per_peer >= 1")


@dataclass
class Pending:
    ip: str
    since: float
    subnet: str
    heard: bool = False  # the remote has sent at least one byte


@dataclass(frozen=True)
class Admission:
    admitted: bool
    evict: tuple[Hashable, ...] = ()  # pending connections the caller must close now
    reason: str = ""  # why the newcomer was refused, or why the evicted ones were


@dataclass(frozen=True)
class Conn:
    """An established connection as pick_trim sees it."""

    key: Hashable
    peer: str
    since: float
    protected: bool  # mesh, task or known peer, or one we dialed: never trimmed


class ConnGate:
    """The pending-handshake table and the decisions on it; the caller owns sockets and the clock."""

    def __init__(self, limits: ConnLimits) -> None:
        self.limits = limits
        self.pending: dict[Hashable, Pending] = {}

    def deadline(self, key: Hashable) -> float:
        entry = self.pending.get(key)
        return float("inf") if entry is None else entry.since + self.limits.handshake_timeout

    def admit(self, key: Hashable, ip: str, now: float) -> Admission:
        """A socket from ``ip`` was accepted: admit it, evicting a pending one if a bound is reached."""
        net = subnet_of(ip)
        from_ip = [k for k, p in self.pending.items() if p.ip == ip]
        from_net = [k for k, p in self.pending.items() if p.subnet == net]
        if len(from_ip) >= self.limits.max_pending_per_ip:
            candidates, reason = from_ip, "pending_per_ip"
        elif len(from_net) >= self.limits.max_pending_per_subnet:
            candidates, reason = from_net, "pending_per_subnet"
        elif len(self.pending) >= self.limits.max_pending:
            busiest = Counter(p.subnet for p in self.pending.values()).most_common(1)[0][0]
            candidates, reason = [k for k, p in self.pending.items() if p.subnet == busiest], "pending_full"
        else:
            self.pending[key] = Pending(ip, now, net)
            return Admission(True)
        victim = self._pick_evictee(candidates, now)
        if victim is None:
            return Admission(False, reason=reason)
        del self.pending[victim]
        self.pending[key] = Pending(ip, now, net)
        return Admission(True, (victim,), reason)

    def _pick_evictee(self, keys: Iterable[Hashable], now: float) -> Hashable | None:
        silent = [k for k in keys if not self.pending[k].heard]
        if silent:
            return min(silent, key=lambda k: self.pending[k].since)
        stale = [k for k in keys if now - self.pending[k].since >= self.limits.grace]
        return min(stale, key=lambda k: self.pending[k].since) if stale else None

    def heard(self, key: Hashable) -> None:
        entry = self.pending.get(key)
        if entry is not None:
            entry.heard = True

    def done(self, key: Hashable) -> bool:
        """The handshake finished (or the socket closed): forget it. True if it was pending."""
        return self.pending.pop(key, None) is not None

    def check_established(self, *, known: bool, total: int, from_ip: int, of_peer: int,
                          from_subnet: int = 0) -> str | None:
        """None to keep a just-established inbound connection, else why not. Counts include it.

        'full' for a known peer means: make room with pick_trim, refuse only if nothing can go."""
        limits = self.limits
        if of_peer > limits.max_conns_per_peer:
            return CONN_FLOOD
        if known:
            return "full" if total > limits.max_conns else None
        if from_ip > limits.max_conns_per_ip:
            return "ip_full"
        if from_subnet > limits.max_conns_per_subnet:
            return "subnet_full"
        return "full" if total > limits.max_conns - limits.reserved_known else None


def pick_trim(conns: Iterable[Conn]) -> Conn | None:
    """The connection to close for a known peer: the newest unprotected one (long-lived ones have
    shown they are useful; the newest unknown ones are the likeliest to be a flood)."""
    candidates = [c for c in conns if not c.protected]
    return max(candidates, key=lambda c: c.since) if candidates else None
