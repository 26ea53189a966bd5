"""Peer-level connect/disconnect events from py-libp2p's per-connection notifee callbacks.

The Swarm notifies per *connection* (a peer can have up to 3, e.g. after a simultaneous dial), but the
node cares about *peers*: report ``connected`` on the first live connection and ``disconnected`` only
when the last one is gone. Swarm removes a connection from its table before notifying, so at
``disconnected`` time ``get_connections(peer)`` already reflects the loss.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from libp2p.abc import INetConn, INetStream, INetwork, INotifee
from multiaddr import Multiaddr

from .stats import HostStats

logger = logging.getLogger(__name__)

PeerEventFn = Callable[[str, bool], None]


def _live(conn: INetConn) -> bool:
    if getattr(conn, "is_closed", False):
        return False
    muxed = getattr(conn, "muxed_conn", None)
    return muxed is None or not getattr(muxed, "is_closed", False)


class ConnectionNotifee(INotifee):
    """The stream and listener events no notifee of ours uses, answered once here."""

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None


class PeerEvents(ConnectionNotifee):
    """Tracks which peers are connected and calls the registered callbacks on transitions."""

    def __init__(self, self_id: str, stats: HostStats) -> None:
        self._self_id = self_id
        self._stats = stats
        self._callbacks: list[PeerEventFn] = []
        self.connected_peers: set[str] = set()

    def add_callback(self, fn: PeerEventFn) -> None:
        self._callbacks.append(fn)

    def _emit(self, peer_id: str, connected: bool) -> None:
        for fn in list(self._callbacks):
            try:
                fn(peer_id, connected)
            except Exception as exc:  # noqa: BLE001 - a node bug must not break connection bookkeeping
                self._stats.peer_event_errors += 1
                logger.warning("on_peer_event callback raised: %r", exc)

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        peer_id = str(conn.muxed_conn.peer_id)
        if peer_id == self._self_id or peer_id in self.connected_peers:
            return
        self.connected_peers.add(peer_id)
        self._emit(peer_id, True)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id
        peer_id = str(peer)
        if peer_id not in self.connected_peers:
            return
        if any(_live(c) and c is not conn for c in network.get_connections(peer)):
            return  # another connection to this peer is still up
        self.connected_peers.discard(peer_id)
        self._emit(peer_id, False)
