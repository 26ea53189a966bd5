"""DCUtR (direct connection upgrade through relay) under our guards, with its attempts counted.

py-libp2p 0.8.1's ``DCUtRProtocol`` does the work: every 2 s it looks for peers reached only through
a relay, first dials their known direct addresses (a "unilateral upgrade"), else runs the
CONNECT/SYNC exchange over the relayed connection and both sides dial each other at once (TCP
simultaneous open, dialing from the listen port). A relayed connection stays until a direct one is
verified, then closes after a grace period. What is replaced here, and why:

- the responder (``_handle_dcutr_stream``): the library waits 30 s for each message, accepts any
  number of sessions from one peer and logs garbage at ERROR; here a session is read within
  ``read_timeout``, at most one per peer per ``min_interval`` and ``max_sessions`` at once,
  only from a peer we reach through a relay, and garbage costs penalty points;
- the addresses we send (``_get_observed_addrs``): the library predicts "NAT's IP : our listen port"
  from identify's observed addresses, which our host does not collect (build.py turns identify's
  address discovery off), so it sent only our private listen address, which nobody behind another
  NAT can dial (found in the network lab: every hole punch failed). Here the NAT's IP comes from
  dial-back (reach.Reachability.external_ips, agreed by several servers), with each TCP listen port:
  hole punch dials leave from the listen port, and a NAT that keeps ports (Linux masquerade does
  where it can) maps it to the same port outside. Our listen addresses follow (same LAN);
- the addresses a peer sends (``_decode_observed_addrs``): the library accepts any multiaddr and
  dials them all, three rounds each. A peer on a relayed link could point our dials at any host. Here
  at most ``max_addrs`` IP addresses with a TCP (or QUIC) port are kept, never unspecified,
  multicast or relay addresses: the dial targets are bounded, and the exchange is rate-limited.

Counters (HostStats.holepunch): ``attempts`` and ``successes`` of DCUtR exchanges (either side),
``direct_dials``/``direct_successes`` for the unilateral upgrade, ``refused_<reason>``.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

import trio
from libp2p.abc import INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import MAX_HOLE_PUNCH_ATTEMPTS, DCUtRProtocol, read_dcutr_msg
from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch
from libp2p.relay.circuit_v2.utils import write_delimited_msg
from multiaddr import Multiaddr

from .budget import PenaltyBox
from .guard import reset_quietly
from .stats import HostStats

logger = logging.getLogger(__name__)


def dialable(addr: Multiaddr) -> bool:
    """An IP address with a TCP or QUIC port, not unspecified, multicast or a relay address."""
    text = str(addr)
    if "/p2p-circuit" in text or not ("/tcp/" in text or "/quic" in text):
        return False
    for proto in ("ip4", "ip6"):
        try:
            ip = ipaddress.ip_address(addr.value_for_protocol(proto))
        except Exception:
            continue
        return not (ip.is_unspecified or ip.is_multicast or (ip.version == 4 and str(ip) == "255.255.255.255"))
    return False


class GuardedDCUtR(DCUtRProtocol):
    def __init__(self, host: Any, stats: HostStats, penalties: PenaltyBox, *, read_timeout: float = 5.0,
                 min_interval: float = 10.0, max_sessions: int = 4, max_addrs: int = 8,
                 external_ips: Callable[[], list[str]] = lambda: []) -> None:
        super().__init__(host, read_timeout=int(read_timeout), write_timeout=int(read_timeout),
                         dial_timeout=int(read_timeout))
        self._stats = stats
        self._penalties = penalties
        self.min_interval = min_interval
        self.max_sessions = max_sessions
        self.max_addrs = max_addrs
        self._last_session: dict[ID, float] = {}
        self._sessions = 0
        self._external_ips = external_ips
        self.auto_drive = True  # tests turn it off to run one exchange by hand

    async def _auto_drive_loop(self) -> None:
        """The library's loop (every 2 s, hole punch each peer reached only through a relay), with a switch."""
        while True:
            await trio.sleep(2.0)
            if not self.auto_drive:
                continue
            for peer_id in list(self.host.get_network().connections):
                if peer_id in self._in_progress or peer_id in self._direct_connections:
                    continue
                if self._hole_punch_attempts.get(peer_id, 0) >= MAX_HOLE_PUNCH_ATTEMPTS:
                    continue
                conns = self.host.get_network().get_connections(peer_id)
                if conns and all(any("/p2p-circuit" in str(a) for a in (c.get_transport_addresses() or []))
                                 for c in conns):
                    await self.initiate_hole_punch(peer_id)

    # ---- what we tell a peer to dial ----------------------------------------------------------------

    async def _get_observed_addrs(self) -> list[bytes]:
        listen = []
        for addr in self.host.get_addrs():
            text = str(addr).split("/p2p/")[0]
            if "/p2p-circuit" not in text and text not in listen:
                listen.append(text)
        predicted = []
        for ip in self._external_ips():
            family = "ip6" if ":" in ip else "ip4"
            for text in listen:
                parts = text.split("/")
                if "tcp" in parts and parts[1] == family:
                    predicted.append(f"/{family}/{ip}/tcp/{parts[parts.index('tcp') + 1]}")
        out = list(dict.fromkeys(predicted + listen))[: self.max_addrs]
        return [Multiaddr(a).to_bytes() for a in out]

    # ---- what a peer may make us dial ----------------------------------------------------------------

    def _decode_observed_addrs(self, addr_bytes: list[bytes]) -> list[Multiaddr]:
        out: list[Multiaddr] = []
        for raw in addr_bytes:
            try:
                addr = Multiaddr(bytes(raw))
            except Exception:
                continue
            if dialable(addr) and str(addr) not in {str(a) for a in out}:
                out.append(addr)
            if len(out) >= self.max_addrs:
                break
        return out

    # ---- initiator ------------------------------------------------------------------------------------

    async def _try_unilateral_upgrade(self, peer_id: ID) -> bool:
        self._stats.holepunch["direct_dials"] += 1
        ok = await super()._try_unilateral_upgrade(peer_id)
        if ok:
            self._stats.holepunch["direct_successes"] += 1
        return ok

    async def _initiate_hole_punch_locked(self, peer_id: ID) -> bool:
        before = self._hole_punch_attempts.get(peer_id, 0)
        ok = await super()._initiate_hole_punch_locked(peer_id)
        if self._hole_punch_attempts.get(peer_id, 0) > before:  # the CONNECT/SYNC exchange ran
            self._stats.holepunch["attempts"] += 1
            if ok:
                self._stats.holepunch["successes"] += 1
        return ok

    # ---- responder ------------------------------------------------------------------------------------

    def _admit(self, peer_id: ID) -> str | None:
        now = trio.current_time()
        if len(self._last_session) > 4096:
            self._last_session = {p: t for p, t in self._last_session.items() if now - t < self.min_interval}
        last = self._last_session.get(peer_id)
        if last is not None and now - last < self.min_interval:
            return "rate"
        if self._sessions >= self.max_sessions:
            return "busy"
        self._last_session[peer_id] = now
        return None

    async def _handle_dcutr_stream(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        peer = str(peer_id)
        if self._penalties.is_blocked(peer):
            await reset_quietly(stream)
            return
        if await self._have_direct_connection(peer_id):
            self._stats.holepunch["refused_direct"] += 1  # nothing to upgrade
            await reset_quietly(stream)
            return
        refused = self._admit(peer_id)
        if refused is not None:
            self._stats.holepunch[f"refused_{refused}"] += 1
            if refused == "rate":
                self._penalties.charge(peer, "holepunch_flood")
            await reset_quietly(stream)
            return
        self._sessions += 1
        self._in_progress.add(peer_id)
        try:
            await self._respond(stream, peer_id, peer)
        finally:
            self._sessions -= 1
            self._in_progress.discard(peer_id)
            await reset_quietly(stream)

    async def _respond(self, stream: INetStream, peer_id: ID, peer: str) -> None:
        try:
            with trio.fail_after(self.read_timeout):
                connect = await read_dcutr_msg(stream, HolePunch)
            if connect.type != HolePunch.CONNECT:
                raise ValueError(f"expected CONNECT, got {connect.type}")
            addrs = self._decode_observed_addrs(list(connect.ObsAddrs))
            reply = HolePunch(type=HolePunch.CONNECT)
            reply.ObsAddrs.extend(await self._get_observed_addrs())
            with trio.fail_after(self.write_timeout):
                await write_delimited_msg(stream, reply)
            with trio.fail_after(self.read_timeout):
                sync = await read_dcutr_msg(stream, HolePunch)
            if sync.type != HolePunch.SYNC:
                raise ValueError(f"expected SYNC, got {sync.type}")
        except trio.TooSlowError:
            self._stats.holepunch["refused_timeout"] += 1
            return
        except Exception as exc:  # bad varint, > 4 KiB, not protobuf, wrong order, reset
            self._stats.holepunch["refused_garbage"] += 1
            self._penalties.charge(peer, "holepunch_garbage")
            logger.debug("DCUtR garbage from %s: %r", peer, exc)
            return
        if addrs:
            self.host.get_peerstore().add_addrs(peer_id, addrs, 600)
        self._stats.holepunch["attempts"] += 1
        if await self._perform_hole_punch(peer_id, addrs):
            self._stats.holepunch["successes"] += 1

    def snapshot(self) -> dict[str, int]:
        keys = ("attempts", "successes", "direct_dials", "direct_successes")
        return {k: self._stats.holepunch.get(k, 0) for k in keys}
