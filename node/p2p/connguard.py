"""Enforce conngate's rules on a running py-libp2p host: at the listener, and when a peer is established.

Why our own and not py-libp2p 0.8.1's resource manager (``libp2p/rcmgr``, which ``new_host``
installs by default and which stays installed): it cannot stop the lockout. (1) The lockout happens
*before* it is asked: ``Swarm._handle_inbound_connection`` takes one of its own ``max_connections -
min_connections`` (250) inbound slots per accepted socket, refuses the newcomer once they are gone,
and only then calls the manager. (2) The manager's admission only ever refuses the newcomer; it
cannot evict an older socket that is doing nothing, so with one source address (an attacker behind
the same NAT or host as honest peers) its per-CIDR bound locks honest dialers out just the same.
(3) It has no notion of a handshake deadline per socket (the Swarm's ``inbound_upgrade_timeout`` is
10 s and starts after the slot is taken), and its reservation (an allowlist) is fixed at construction
and keyed by peer ids that are unknown before the handshake. So the rules run in front of the
Swarm's handler, which wraps the listener's handler (``TransportManager.add_listen_addr``), and in a
notifee once the peer id is known.

A socket reaches the Swarm only once its remote has sent something: a silent one costs an fd and a
sleeping task, never the Swarm's slot, handler and upgrade work. Evicting or timing out a handshake
closes its *socket*; it never cancels the Swarm's handler task.
The handler then fails its read and runs its normal cleanup, which releases the Swarm's slot and the
resource manager's count (cancelling it instead skips that cleanup at its first await and leaks both).
After a handshake succeeds the handler only waits for the Swarm to stop, holding its slot: that wait
is cancelled when the connection closes (`disconnected`), which gives the slot back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import trio
from libp2p.abc import INetConn, INetwork
from libp2p.rcmgr import Direction
from multiaddr import Multiaddr

from .budget import PenaltyBox
from .conngate import CONN_FLOOD, Conn, ConnGate, ConnLimits, pick_trim
from .events import ConnectionNotifee
from .stats import HostStats
from .subnet import subnet_of

logger = logging.getLogger(__name__)

KnownFn = Callable[[str], bool]


async def first_bytes(sock: Any) -> bool:
    """Wait until the remote sends something (or closes); False if we closed it first (evicted or
    past its deadline). A multistream-select dialer speaks first, so an honest peer passes at once."""
    raw = getattr(getattr(sock, "stream", None), "socket", None)  # TrioTCPStream -> SocketStream -> socket
    if raw is None:
        return True
    try:
        await trio.lowlevel.wait_readable(raw)
    except (trio.ClosedResourceError, OSError):
        return False
    return True


async def close_quietly(closer: Any) -> None:
    with trio.CancelScope(shield=True):
        try:
            await closer.close()
        except Exception:
            pass


def remote_key(obj: Any) -> tuple[str, int] | None:
    """(ip, port) of a socket or connection: one TCP connection to our listener, both before and after
    the handshake."""
    try:
        addr = obj.get_remote_address()
    except Exception:
        return None
    return (str(addr[0]), int(addr[1])) if addr else None


class ConnGuard(ConnectionNotifee):
    """Pending-handshake admission at the listener, established-connection limits in ``connected``."""

    def __init__(self, limits: ConnLimits, stats: HostStats, penalties: PenaltyBox) -> None:
        self.gate = ConnGate(limits)
        self.limits = limits
        self._stats = stats
        self._penalties = penalties
        self._is_known: KnownFn = lambda peer: False
        self._sockets: dict[Hashable, Any] = {}  # pending key -> accepted socket
        self._since: dict[INetConn, float] = {}  # established connections -> when
        # The Swarm's handler of each accepted socket, by its key, and the key of each established
        # inbound connection: once that connection closes, its handler is let go (`disconnected`).
        self._handlers: dict[Hashable, trio.CancelScope] = {}
        self._inbound_keys: dict[INetConn, Hashable] = {}

    def set_known(self, fn: KnownFn) -> None:
        """fn(peer_id) -> True for peers that get the reserved slots and are never trimmed."""
        self._is_known = fn

    def install(self, network: Any) -> None:
        """Put the gate in front of every listener the network opens, and watch established peers."""
        manager = network.transport_manager
        add_listen_addr = manager.add_listen_addr

        def gated_add_listen_addr(maddr: Multiaddr, handler: Any) -> Any:
            return add_listen_addr(maddr, self.wrap(handler))

        manager.add_listen_addr = gated_add_listen_addr
        network.register_notifee(self)

    # ---- before the handshake -----------------------------------------------------------------

    def wrap(self, handler: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
        async def gated(sock: Any) -> None:
            key = remote_key(sock)
            if key is None:  # not a socket with an address (never for TCP): nothing to key limits on
                await handler(sock)
                return
            admission = self.gate.admit(key, key[0], trio.current_time())
            for old in admission.evict:
                self._stats.connections_refused[f"evicted_{admission.reason}"] += 1
                old_sock = self._sockets.pop(old, None)
                if old_sock is not None:
                    trio.lowlevel.spawn_system_task(close_quietly, old_sock)
            if not admission.admitted:
                self._stats.connections_refused[admission.reason] += 1
                await close_quietly(sock)
                return
            self._sockets[key] = sock
            handled = self._handlers[key] = trio.CancelScope()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._deadline, key, sock)
                    try:
                        if await first_bytes(sock):
                            self.gate.heard(key)
                            with handled:
                                await handler(sock)
                    finally:
                        nursery.cancel_scope.cancel()
            finally:
                self._sockets.pop(key, None)
                if self._handlers.get(key) is handled:
                    del self._handlers[key]
                self.gate.done(key)

        return gated

    async def _deadline(self, key: Hashable, sock: Any) -> None:
        await trio.sleep_until(self.gate.deadline(key))
        if self.gate.done(key):  # still handshaking: close the socket, the Swarm cleans up after it
            self._stats.connections_refused["handshake_timeout"] += 1
            self._sockets.pop(key, None)
            await close_quietly(sock)

    # ---- once the peer is known ---------------------------------------------------------------

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._since[conn] = trio.current_time()
        key = remote_key(conn.muxed_conn)
        if key is not None:
            self.gate.done(key)
        if getattr(conn, "direction", None) != Direction.INBOUND or key is None:
            return
        self._inbound_keys[conn] = key
        peer = str(conn.muxed_conn.peer_id)
        known = self._safe_known(peer)
        inbound = [c for c in network.get_connections() if getattr(c, "direction", None) == Direction.INBOUND]
        ips = [(remote_key(c.muxed_conn) or ("",))[0] for c in inbound]
        net = subnet_of(key[0])
        verdict = self.gate.check_established(
            known=known, total=len(network.get_connections()),
            from_ip=ips.count(key[0]), from_subnet=sum(1 for ip in ips if ip and subnet_of(ip) == net),
            of_peer=sum(1 for c in inbound if c.muxed_conn.peer_id == conn.muxed_conn.peer_id))
        if verdict is None:
            return
        if verdict == "full" and known:
            victim = pick_trim(Conn(c, str(c.muxed_conn.peer_id), self._since.get(c, 0.0), self._protected(c))
                               for c in network.get_connections() if c is not conn)
            if victim is not None:
                self._stats.connections_refused["trimmed"] += 1
                trio.lowlevel.spawn_system_task(close_quietly, victim.key)
                return
        self._stats.connections_refused[verdict] += 1
        if verdict == CONN_FLOOD:
            self._penalties.charge(peer, CONN_FLOOD)
        trio.lowlevel.spawn_system_task(close_quietly, conn)

    def _protected(self, conn: INetConn) -> bool:
        return getattr(conn, "direction", None) != Direction.INBOUND or self._safe_known(str(conn.muxed_conn.peer_id))

    def _safe_known(self, peer: str) -> bool:
        try:
            return bool(self._is_known(peer))
        except Exception as exc:  # noqa: BLE001 - a node bug must not break admission
            logger.warning("known-peer callback raised: %r", exc)
            return False

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._since.pop(conn, None)
        key = self._inbound_keys.pop(conn, None)
        handler = self._handlers.pop(key, None) if key is not None else None
        if handler is not None:
            # py-libp2p 0.8.1 bug: once an inbound handshake succeeds, Swarm's handler waits for the
            # whole Swarm to stop (`manager.wait_finished()`) while holding one of its 250 inbound
            # slots, so every connection a node ever accepted kept one and the 251st dialer was
            # refused. Its connection is closed now; cancelling the wait lets the handler's `finally`
            # give the slot back (and frees its socket objects). The handshake is long over, so no
            # cleanup of its is skipped.
            handler.cancel()
