"""Circuit relay v2 on our host: the hop side (a public peer's `--relay-service`) and the stop side
(a NATed peer accepting circuits from the relays it reserved on), under relaygate's limits.

Built on py-libp2p 0.8.1's ``CircuitV2Protocol`` (its RESERVE answer, voucher signing, CONNECT
forwarding and STOP upgrade are reused), with these entry points replaced:

- ``_handle_hop_stream``: the library loops reading messages on one stream for 30 s each and answers
  garbage with a status on a stream it keeps; here one message per stream (what go/rust clients
  send, and what the library's own client does), read within ``hop_read_timeout`` under relaygate's
  per-peer stream bound, and garbage costs the sender penalty points (budget.PENALTY_POINTS);
- RESERVE: relaygate's admission first (reservations per address, rate, total), and never for a
  peer id other than the connection's (see relaygate for the library's spoofable RESERVE);
- CONNECT: relaygate's circuit bounds, then the library's forwarding under a hard deadline
  (``circuit_seconds``), our ``_relay_data`` counting bytes per reservation;
- ``_handle_stop_stream``: accepted only from relays this node holds a reservation on (the spec's
  rule; anyone else could otherwise make us run handshakes over their streams at will).

Relayed connections (``/p2p-circuit`` in their transport addresses) may not RESERVE or CONNECT.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.abc import INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, StopMessage
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode, to_proto_status
from libp2p.relay.circuit_v2.resources import RelayLimits as LibRelayLimits
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from libp2p.tools.constants import MAX_READ_LEN

from .budget import PenaltyBox
from .guard import reset_quietly
from .relaygate import RelayGate, RelayLimits
from .stats import HostStats

logger = logging.getLogger(__name__)

REFUSAL_STATUS = {
    "reserve_rate": StatusCode.RESERVATION_REFUSED,
    "reservations_full": StatusCode.RESERVATION_REFUSED,
    "reservations_per_ip": StatusCode.RESERVATION_REFUSED,
    "no_reservation": StatusCode.NO_RESERVATION,
    "spoofed_peer": StatusCode.PERMISSION_DENIED,
    "relayed": StatusCode.PERMISSION_DENIED,
}  # anything else: RESOURCE_LIMIT_EXCEEDED


def is_relayed(stream: Any) -> bool:
    try:
        addrs = stream.muxed_conn.get_transport_addresses() or []
    except Exception:
        return False
    return any("/p2p-circuit" in str(a) for a in addrs)


def remote_ip(stream: Any) -> str:
    try:
        addr = stream.get_remote_address()
    except Exception:
        addr = None
    return str(addr[0]) if addr else "?"


def library_limits(limits: RelayLimits) -> LibRelayLimits:
    """The library's own caps, set from ours so they agree (they stay as a backstop)."""
    return LibRelayLimits(duration=limits.circuit_seconds, data=limits.circuit_bytes,
                          max_circuit_conns=limits.max_circuits_per_peer, max_reservations=limits.max_reservations,
                          reservation_ttl=limits.reservation_ttl)


class GuardedRelay(CircuitV2Protocol):
    """Hop (when ``hop``) and stop handlers under relaygate's limits; see the module docstring."""

    def __init__(self, host: Any, limits: RelayLimits, stats: HostStats, penalties: PenaltyBox, *, hop: bool) -> None:
        # Only a relay registers the hop protocol: identify then tells clients which peers are relays.
        super().__init__(host, limits=library_limits(limits), allow_hop=hop)
        self.relay_limits = limits
        self.hop_enabled = hop
        self.gate = RelayGate(limits)
        self._stats = stats
        self._penalties = penalties
        self._owner: dict[int, str] = {}  # id(stream) of an open circuit -> the reserved peer it reaches
        self.accept_stop_from: Callable[[str], bool] = lambda peer: False

    # ---- bookkeeping ------------------------------------------------------------------------------

    def _refuse(self, reason: str) -> StatusCode:
        self._stats.relay[f"refused_{reason}"] += 1
        return REFUSAL_STATUS.get(reason, StatusCode.RESOURCE_LIMIT_EXCEEDED)

    async def _status(self, stream: INetStream, code: StatusCode) -> None:
        with trio.move_on_after(self.relay_limits.hop_read_timeout):
            try:
                await write_delimited_msg(stream, HopMessage(type=HopMessage.STATUS, status=to_proto_status(code)))
                await stream.close()
                return
            except Exception:
                pass
        await reset_quietly(stream)

    def peer_gone(self, peer: str) -> None:
        """The peer's last connection closed: its reservation ends (spec: it needs a live connection)."""
        if self.gate.drop(peer):
            self._stats.relay["reservations_ended"] += 1
            try:
                self.resource_manager._reservations.pop(ID.from_base58(peer), None)  # library table
            except Exception:
                pass

    # ---- hop --------------------------------------------------------------------------------------

    async def _handle_hop_stream(self, stream: INetStream) -> None:
        peer = str(stream.muxed_conn.peer_id)
        if self._penalties.is_blocked(peer):
            await reset_quietly(stream)
            return
        if is_relayed(stream):
            await self._status(stream, self._refuse("relayed"))
            return
        refused = self.gate.open_stream(peer)
        if refused is not None:
            self._penalties.charge(peer, "relay_flood")
            self._refuse(refused)
            await reset_quietly(stream)
            return
        try:  # the slot bounds streams still waiting for their message; circuits have bounds of their own
            msg = None
            with trio.move_on_after(self.relay_limits.hop_read_timeout):
                try:
                    msg = await read_delimited_msg(stream, HopMessage)
                except Exception as exc:  # bad varint, > 64 KiB, not protobuf, EOF
                    logger.debug("hop garbage from %s: %r", peer, exc)
                    self._penalties.charge(peer, "relay_garbage")
                    await self._status(stream, self._refuse("malformed"))
                    return
        finally:
            self.gate.close_stream(peer)
        if msg is None:
            self._penalties.charge(peer, "relay_idle")
            self._refuse("idle")
            await reset_quietly(stream)
        elif msg.type == HopMessage.RESERVE:
            await self._reserve(stream, msg, peer)
        elif msg.type == HopMessage.CONNECT:
            await self._connect(stream, msg, peer)
        else:
            self._penalties.charge(peer, "relay_garbage")
            await self._status(stream, StatusCode.UNEXPECTED_MESSAGE)

    async def _reserve(self, stream: INetStream, msg: HopMessage, peer: str) -> None:
        if msg.HasField("peer") and msg.peer.id and bytes(msg.peer.id) != stream.muxed_conn.peer_id.to_bytes():
            self._penalties.charge(peer, "relay_spoof")
            await self._status(stream, self._refuse("spoofed_peer"))
            return
        ip, now = remote_ip(stream), trio.current_time()
        refused = self.gate.admit_reservation(peer, ip, now)
        if refused is not None:
            await self._status(stream, self._refuse(refused))
            return
        msg.ClearField("peer")  # the library then reserves for the connection's peer, never a claimed one
        refresh = peer in self.gate.slots
        self.gate.reserved(peer, ip, now)  # held before the await: concurrent RESERVEs see it
        await self._handle_reserve(stream, msg)
        if self.resource_manager.get_reservation(stream.muxed_conn.peer_id) is not None:
            self._stats.relay["reservations_refreshed" if refresh else "reservations_accepted"] += 1
        elif not refresh:
            self.gate.drop(peer)
        with trio.move_on_after(self.relay_limits.hop_read_timeout):
            try:
                await stream.close()
                return
            except Exception:
                pass
        await reset_quietly(stream)

    async def _connect(self, stream: INetStream, msg: HopMessage, source: str) -> None:
        try:
            target = str(ID(bytes(msg.peer.id)))
            ID.from_base58(target)
        except Exception:
            self._penalties.charge(source, "relay_garbage")
            await self._status(stream, self._refuse("malformed"))
            return
        refused = self.gate.admit_circuit(source, target, trio.current_time())
        if refused is not None:
            await self._status(stream, self._refuse(refused))
            return
        self.gate.circuit_opened(source, target)
        self._owner[id(stream)] = target
        self._stats.relay["circuits_opened"] += 1
        try:
            # Hard deadline: the library checks its duration cap only when a byte arrives.
            with trio.move_on_after(self.relay_limits.circuit_seconds) as scope:
                msg.ClearField("reservation")  # our gate checked the reservation; vouchers are advisory
                await self._handle_connect(stream, msg)
            if scope.cancelled_caught:
                self._stats.relay["circuits_expired"] += 1
        finally:
            self._owner.pop(id(stream), None)
            for key in (source, target):  # the library's table of open circuits (it keys by peer)
                self._active_relays.pop(ID.from_base58(key), None)
            self.gate.circuit_closed(source, target)
            await reset_quietly(stream)

    async def _relay_data(self, src_stream: INetStream, dst_stream: INetStream, peer_id: ID,
                          deadline: float | None = None, circuit_data_limit: list[int] | None = None) -> None:
        """One direction of a circuit: the library's loop plus bytes per reservation; either direction
        ending (EOF, error, a cap) resets both streams, so the circuit ends as one."""
        owner = self._owner.get(id(src_stream)) or self._owner.get(id(dst_stream)) or str(peer_id)
        reason = "closed"
        try:
            if deadline is not None:
                remaining = deadline - time.monotonic()
            else:
                remaining = float(self.relay_limits.circuit_seconds)
            with trio.move_on_after(max(0.0, remaining)):
                while True:
                    data = await src_stream.read(MAX_READ_LEN)
                    if not data:
                        break
                    if circuit_data_limit is not None:
                        if len(data) > circuit_data_limit[0]:
                            reason = "circuit_bytes"
                            break
                        circuit_data_limit[0] -= len(data)
                    if not self.gate.carry(owner, len(data), trio.current_time()):
                        reason = "reservation_bytes"
                        break
                    self._stats.relay["bytes_relayed"] += len(data)
                    await dst_stream.write(data)
        except Exception as exc:  # a reset or closed stream on either side ends the circuit
            logger.debug("circuit to %s ended: %r", owner, exc)
        if reason != "closed":
            self._stats.relay[f"circuits_cut_{reason}"] += 1
        await reset_quietly(src_stream)
        await reset_quietly(dst_stream)

    # ---- stop -------------------------------------------------------------------------------------

    async def _handle_stop_stream(self, stream: INetStream) -> None:
        relay = str(stream.muxed_conn.peer_id)
        if self._penalties.is_blocked(relay) or not self.accept_stop_from(relay):
            self._stats.relay["refused_stop_unsolicited"] += 1
            await self._stop_status(stream, StatusCode.PERMISSION_DENIED)
            return
        msg = None
        with trio.move_on_after(self.relay_limits.hop_read_timeout):
            try:
                msg = await read_delimited_msg(stream, StopMessage)
            except Exception as exc:
                logger.debug("stop garbage from %s: %r", relay, exc)
        if msg is None or msg.type != StopMessage.CONNECT:
            self._penalties.charge(relay, "relay_garbage")
            await self._stop_status(stream, StatusCode.MALFORMED_MESSAGE)
            return
        try:
            ID(bytes(msg.peer.id)).to_base58()
        except Exception:
            self._penalties.charge(relay, "relay_garbage")
            await self._stop_status(stream, StatusCode.MALFORMED_MESSAGE)
            return
        await self._send_stop_status(stream, StatusCode.OK, "ok")
        self._stats.relay["circuits_accepted"] += 1
        # Noise + yamux over the stream, authenticated against the remote's own key (the peer id in
        # the STOP message only names the circuit address).
        await self.handle_incoming_connection(stream, bytes(msg.peer.id))

    async def _stop_status(self, stream: INetStream, code: StatusCode) -> None:
        with trio.move_on_after(self.relay_limits.hop_read_timeout):
            try:
                await write_delimited_msg(stream, StopMessage(type=StopMessage.STATUS, status=to_proto_status(code)))
            except Exception:
                pass
        await reset_quietly(stream)
