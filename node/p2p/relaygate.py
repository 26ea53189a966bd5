"""Admission rules for the relay service (circuit relay v2 hop): who may reserve, who may open a
circuit, how long and how much (no I/O here; node/p2p/relay.py enforces them on the wire).

Why our own rules in front of py-libp2p 0.8.1's ``RelayResourceManager`` (circuit_v2/resources.py):
what it enforces is kept as a backstop (the total of reservations, concurrent circuits to one
reserved peer, bytes per circuit), but it leaves a public relay open to being used as a free proxy
or locked up by one peer:

- RESERVE takes the peer id from the message when present (``_handle_reserve``): any peer can
  reserve for made-up ids and fill ``max_reservations`` with slots nobody uses (they count until
  they expire). Here a reservation is always for the connection's own peer; a different id is refused.
- nothing bounds reservations per source address, circuits in total or per source peer, or bytes
  per reservation (its data cap is per circuit: a reserved peer could open circuit after circuit);
- the duration cap is checked only when a byte arrives (``_relay_data``), so an idle circuit outlives
  it; relay.py puts a hard deadline on the whole circuit instead;
- nothing bounds how many hop streams one peer holds open (each waits 30 s for its message).

Every refusal has a reason (counted in HostStats.relay as ``refused_<reason>``) and a circuit v2
status code the client sees: RESERVATION_REFUSED, RESOURCE_LIMIT_EXCEEDED or NO_RESERVATION.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .subnet import subnet_of


@dataclass(frozen=True)
class RelayLimits:
    max_reservations: int = 32  # reservations held at once, all peers
    max_reservations_per_ip: int = 4  # ... from one source address (peers behind one NAT share it)
    max_reservations_per_subnet: int = 16  # ... from one network (/24, IPv6 /48): many addresses, one owner
    reservation_ttl: int = 900  # seconds a reservation lasts; clients refresh it before then
    min_reserve_interval: float = 5.0  # seconds between two RESERVE of one peer (refreshes included)
    max_circuits: int = 64  # circuits open at once through this relay
    max_circuits_per_peer: int = 4  # ... to one reserved peer, and (separately) opened by one source peer
    circuit_seconds: int = 120  # a circuit is closed this long after it opened, idle or not
    circuit_bytes: int = 64 << 20  # bytes one circuit carries (both directions together)
    reservation_bytes: int = 256 << 20  # bytes all circuits to one reserved peer carry per reservation_ttl
    max_hop_streams_per_peer: int = 2  # hop streams one peer may have open at once (each is one request)
    hop_read_timeout: float = 5.0  # a hop stream must deliver its message within this

    def __post_init__(self) -> None:
        if not 1 <= self.max_reservations_per_ip <= self.max_reservations_per_subnet <= self.max_reservations:
            raise ValueError("need 1 <= max_reservations_per_ip <= max_reservations_per_subnet <= max_reservations")
        if not 1 <= self.max_circuits_per_peer <= self.max_circuits:
            raise ValueError("need 1 <= max_circuits_per_peer <= max_circuits")
        if min(self.reservation_ttl, self.circuit_seconds, self.circuit_bytes, self.reservation_bytes,
               self.max_hop_streams_per_peer) < 1:
            raise ValueError("relay limits must be >= 1")
        if self.min_reserve_interval < 0 or self.hop_read_timeout <= 0:
            raise ValueError("min_reserve_interval must be >= 0 and hop_read_timeout > 0")


@dataclass
class Slot:
    ip: str
    expires: float
    window_start: float
    bytes_used: int = 0


@dataclass
class RelayGate:
    """The relay's tables and decisions on them; the caller owns streams and the clock."""

    limits: RelayLimits
    slots: dict[str, Slot] = field(default_factory=dict)  # reserved peer -> its reservation
    last_reserve: dict[str, float] = field(default_factory=dict)
    circuits_to: Counter[str] = field(default_factory=Counter)  # reserved peer -> open circuits
    circuits_from: Counter[str] = field(default_factory=Counter)  # source peer -> open circuits
    hop_streams: Counter[str] = field(default_factory=Counter)

    # ---- hop streams ----------------------------------------------------------------------------

    def open_stream(self, peer: str) -> str | None:
        if self.hop_streams[peer] >= self.limits.max_hop_streams_per_peer:
            return "hop_streams"
        self.hop_streams[peer] += 1
        return None

    def close_stream(self, peer: str) -> None:
        self.hop_streams[peer] -= 1
        if self.hop_streams[peer] <= 0:
            del self.hop_streams[peer]

    # ---- reservations -----------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        for peer in [p for p, s in self.slots.items() if s.expires <= now]:
            del self.slots[peer]
        if len(self.last_reserve) > 4 * self.limits.max_reservations:  # bounded: old entries go
            cutoff = now - self.limits.min_reserve_interval
            self.last_reserve = {p: t for p, t in self.last_reserve.items() if t > cutoff}

    def admit_reservation(self, peer: str, ip: str, now: float) -> str | None:
        """None to accept (or refresh) ``peer``'s reservation from ``ip``, else why not."""
        self.expire(now)
        last = self.last_reserve.get(peer)
        if last is not None and now - last < self.limits.min_reserve_interval:
            return "reserve_rate"
        if peer not in self.slots:
            if len(self.slots) >= self.limits.max_reservations:
                return "reservations_full"
            if sum(1 for s in self.slots.values() if s.ip == ip) >= self.limits.max_reservations_per_ip:
                return "reservations_per_ip"
            net = subnet_of(ip)
            if sum(1 for s in self.slots.values() if subnet_of(s.ip) == net) >= self.limits.max_reservations_per_subnet:
                return "reservations_per_subnet"
        return None

    def reserved(self, peer: str, ip: str, now: float) -> None:
        """Record an accepted reservation (a refresh keeps the byte window: no reset by re-reserving)."""
        self.last_reserve[peer] = now
        slot = self.slots.get(peer)
        if slot is None:
            self.slots[peer] = Slot(ip, now + self.limits.reservation_ttl, now)
        else:
            slot.expires = now + self.limits.reservation_ttl

    def drop(self, peer: str) -> bool:
        """The reserved peer disconnected: its slot is free (a reservation needs a live connection)."""
        return self.slots.pop(peer, None) is not None

    # ---- circuits -----------------------------------------------------------------------------------

    def admit_circuit(self, source: str, target: str, now: float) -> str | None:
        self.expire(now)
        slot = self.slots.get(target)
        if slot is None:
            return "no_reservation"
        if sum(self.circuits_to.values()) >= self.limits.max_circuits:
            return "circuits_full"
        if self.circuits_to[target] >= self.limits.max_circuits_per_peer:
            return "circuits_per_reservation"
        if self.circuits_from[source] >= self.limits.max_circuits_per_peer:
            return "circuits_per_source"
        self._roll_window(slot, now)
        if slot.bytes_used >= self.limits.reservation_bytes:
            return "reservation_bytes"
        return None

    def circuit_opened(self, source: str, target: str) -> None:
        self.circuits_to[target] += 1
        self.circuits_from[source] += 1

    def circuit_closed(self, source: str, target: str) -> None:
        for table, peer in ((self.circuits_to, target), (self.circuits_from, source)):
            table[peer] -= 1
            if table[peer] <= 0:
                del table[peer]

    def carry(self, target: str, n: int, now: float) -> bool:
        """Count ``n`` bytes relayed to or from ``target``; False once its reservation's budget is spent."""
        slot = self.slots.get(target)
        if slot is None:
            return True  # the reservation ended (disconnect/expiry); the circuit's own caps still hold
        self._roll_window(slot, now)
        slot.bytes_used += n
        return slot.bytes_used <= self.limits.reservation_bytes

    def _roll_window(self, slot: Slot, now: float) -> None:
        if now - slot.window_start >= self.limits.reservation_ttl:
            slot.window_start, slot.bytes_used = now, 0

    def snapshot(self) -> dict[str, int]:
        return {"reservations": len(self.slots), "circuits": sum(self.circuits_to.values()),
                "hop_streams": sum(self.hop_streams.values())}
