"""The relay client: reserve slots on relays, keep them, dial peers through them.

Why not py-libp2p 0.8.1's ``CircuitV2Transport``: its ``dial`` makes a reservation on every relay it
dials *through* (``enable_client``), so each dialer would take one of a relay's scarce slots; it
reports a refusal only as "status code N" after logging it at ERROR; and it cannot be registered
with the Swarm's transport manager, because ``Swarm._dial_addr_single_attempt`` expects a raw or
muxed connection while ``dial`` returns an already upgraded one. The two exchanges it needs are a
few lines each (``reserve``, ``dial_via_relay``); the wire format stays the library's protobufs.

``AutoRelay`` runs on every node: while reachability says *private* it keeps ``want`` reservations
on connected peers that offer the hop protocol (learned through peer exchange and identify), refreshes
them before they expire, and replaces a relay whose connection dies; its circuit addresses go first
in what the node advertises. When the node is public it drops them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.connection_types import ConnectionType
from libp2p.custom_types import TProtocol
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from multiaddr import Multiaddr

from .guard import reset_quietly
from .stats import HostStats

logger = logging.getLogger(__name__)


class RelayRefused(Exception):
    """A relay answered with a status other than OK; ``reason`` is the status name."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"relay refused: {reason}")


def status_name(code: int) -> str:
    try:
        return StatusCode(code).name
    except ValueError:
        return f"status_{code}"


async def _exchange(lhost: Any, relay: ID, msg: HopMessage, timeout: float) -> tuple[Any, HopMessage]:
    stream = await lhost.new_stream(relay, [TProtocol(HOP)])
    try:
        with trio.fail_after(timeout):
            await write_delimited_msg(stream, msg)
            resp = await read_delimited_msg(stream, HopMessage)
    except BaseException:
        await reset_quietly(stream)
        raise
    code = resp.status if resp.HasField("status") else StatusCode.OK
    if resp.type != HopMessage.STATUS or code != StatusCode.OK:
        await reset_quietly(stream)
        raise RelayRefused(status_name(code) if resp.type == HopMessage.STATUS else "unexpected_message")
    return stream, resp


async def reserve(lhost: Any, relay: ID, timeout: float = 5.0) -> float:
    """RESERVE on ``relay`` (connected); returns the reservation's expiry (Unix time). Raises on refusal."""
    stream, resp = await _exchange(lhost, relay, HopMessage(type=HopMessage.RESERVE), timeout)
    await reset_quietly(stream)
    return float(resp.reservation.expire) if resp.HasField("reservation") else time.time()


async def dial_via_relay(lhost: Any, circuit: str, timeout: float = 10.0) -> None:
    """Open a connection to the peer at ``<relay addr>/p2p/<relay>/p2p-circuit/p2p/<target>``: connect
    to the relay, CONNECT, then Noise + yamux over the circuit (the Swarm registers it as RELAYED)."""
    relay_part, _, target_part = circuit.partition("/p2p-circuit")
    target = ID.from_base58(target_part.rsplit("/p2p/", 1)[1])
    relay = ID.from_base58(relay_part.rsplit("/p2p/", 1)[1])
    with trio.fail_after(timeout):
        if not lhost.get_network().get_connections(relay):
            from libp2p.peer.peerinfo import info_from_p2p_addr
            await lhost.connect(info_from_p2p_addr(Multiaddr(relay_part)))
        msg = HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=target.to_bytes()))
        stream, _ = await _exchange(lhost, relay, msg, timeout)
        ma = Multiaddr(f"/p2p/{relay}/p2p-circuit/p2p/{target}")
        raw = RawConnection(stream=stream, initiator=True, connection_type=ConnectionType.RELAYED, addresses=[ma])
        try:
            await lhost.upgrade_outbound_connection(raw, target)
        except BaseException:
            await reset_quietly(stream)
            raise


@dataclass
class Held:
    expires: float
    addrs: tuple[str, ...]


class AutoRelay:
    """Keeps reservations while the node is private; see the module docstring."""

    def __init__(self, host: Any, stats: HostStats, is_private: Callable[[], bool], *, want: int = 2,
                 interval: float = 2.0, retry_after: float = 60.0) -> None:
        self._host = host  # node.p2p.host.Host
        self._stats = stats
        self._is_private = is_private
        self.want = want
        self.interval = interval
        self.retry_after = retry_after
        self.held: dict[str, Held] = {}
        self._failed: dict[str, float] = {}  # relay candidate -> not before (monotonic)
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def holds(self, peer: str) -> bool:
        return peer in self.held

    def circuit_addrs(self) -> list[str]:
        return [a for held in self.held.values() for a in held.addrs]

    def _changed(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a node bug must not stop relay upkeep
                logger.warning("relay address listener raised: %r", exc)

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except Exception as exc:  # noqa: BLE001 - one bad round must not end the loop
                logger.debug("autorelay round failed: %r", exc)
            await trio.sleep(self.interval)

    async def step(self) -> None:
        connected = set(self._host.connected_peers())
        lost = [p for p in self.held if p not in connected]
        for peer in lost:
            del self.held[peer]
            self._stats.relay["client_relay_lost"] += 1
        if not self._is_private():
            if self.held:
                self.held.clear()
                self._changed()
            elif lost:
                self._changed()
            return
        changed = bool(lost)
        now = time.time()
        for peer, held in list(self.held.items()):
            if held.expires - now < 60:
                changed |= await self._try(peer, refresh=True)
        if len(self.held) < self.want:
            for peer in self._candidates(connected):
                changed |= await self._try(peer, refresh=False)
                if len(self.held) >= self.want:
                    break
        if changed:
            self._changed()

    def _candidates(self, connected: set[str]) -> list[str]:
        clock = trio.current_time()
        out = []
        for peer in sorted(connected):
            if peer in self.held or self._failed.get(peer, 0.0) > clock or self._host.relayed_only(peer):
                continue
            if self._host.offers(peer, HOP):
                out.append(peer)
        return out

    async def _try(self, peer: str, *, refresh: bool) -> bool:
        try:
            expires = await reserve(self._host.lhost, ID.from_base58(peer))
        except Exception as exc:  # RelayRefused, a reset, a timeout
            reason = exc.reason if isinstance(exc, RelayRefused) else type(exc).__name__
            self._stats.relay[f"client_reserve_failed_{reason}"] += 1
            self._failed[peer] = trio.current_time() + self.retry_after
            logger.info("relay reservation on %s failed: %s", peer, reason)
            return self.held.pop(peer, None) is not None
        addrs = tuple(f"{a}/p2p-circuit/p2p/{self._host.peer_id}" for a in self._host.direct_addrs(peer))
        self.held[peer] = Held(expires, addrs[:2])
        self._stats.relay["client_refreshed" if refresh else "client_reserved"] += 1
        return not refresh
