"""Peers behind NATs: reachability, relay service and client, hole punching, started with the host.

    async with open_nat(host, parts): ...   # inside open_host, once the host listens

Every node answers dial-back requests, accepts circuits from relays it reserved on and runs DCUtR;
a node with ``relay_service`` also serves circuits (hop) under relaygate's limits; a node whose
reachability turns *private* reserves on relays (autorelay.py) and advertises its circuit addresses.
Every handler registered here is wrapped by guard.guard_stream_handler like the host's own.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
from libp2p.tools.anyio_service import background_trio_service

from .autorelay import AutoRelay
from .guard import guard_all_handlers
from .holepunch import GuardedDCUtR
from .reach import PROTOCOL as DIALBACK, REQUEST_CAP, DialBackServer, Reachability
from .relay import GuardedRelay

AddrsFn = Callable[[list[str]], None]


class Nat:
    """The parts, for Host's status and address methods."""

    def __init__(self, host: Any, parts: Any) -> None:
        config = host.config
        self.reach = Reachability(config.reach)
        self.relay = GuardedRelay(parts.host, config.relay_limits, host.stats, parts.penalties,
                                  hop=config.relay_service)
        self.dcutr = GuardedDCUtR(parts.host, host.stats, parts.penalties, external_ips=self.reach.external_ips)
        self.autorelay = AutoRelay(host, host.stats, lambda: self.reach.status == "private")
        self.relay.accept_stop_from = self.autorelay.holds
        self.server = DialBackServer(parts.host, config.reach, host.stats, parts.penalties)
        self._addr_listeners: list[AddrsFn] = []
        self._host = host

    def on_addrs_changed(self, fn: AddrsFn) -> None:
        self._addr_listeners.append(fn)

    def _announce(self) -> None:
        addrs = self._host.advertised_addrs()
        for fn in list(self._addr_listeners):
            fn(addrs)

    def snapshot(self) -> dict[str, Any]:
        return {**self.reach.snapshot(),
                "relays": sorted(self.autorelay.held),
                "relayed_addrs": self.autorelay.circuit_addrs(),
                "relay_service": ({"enabled": True, **self.relay.gate.snapshot()} if self.relay.hop_enabled
                                  else {"enabled": False}),
                "hole_punch": self.dcutr.snapshot()}


@asynccontextmanager
async def open_nat(host: Any, parts: Any) -> AsyncIterator[Nat]:
    # py-libp2p's relay and DCUtR log every refused or failed exchange at ERROR/WARNING (a peer's
    # garbage included); HostStats.relay and .holepunch count them instead.
    for name in ("libp2p.relay.circuit_v2.protocol", "libp2p.relay.circuit_v2.dcutr"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    nat = Nat(host, parts)
    host.set_request_handler(DIALBACK, nat.server.handle, max_request_bytes=REQUEST_CAP)
    host.on_peer_event(lambda peer, connected: None if connected else nat.relay.peer_gone(peer))
    nat.autorelay.on_change(nat._announce)
    async with background_trio_service(nat.relay), background_trio_service(nat.dcutr):
        guard_all_handlers(parts.host, host.stats)  # hop, stop and DCUtR: registered just now
        async with trio.open_nursery() as nursery:
            if host.config.reach.enabled:
                nursery.start_soon(nat.reach.run, host, lambda status: nat._announce())
                nursery.start_soon(nat.autorelay.run)
            try:
                yield nat
            finally:
                nursery.cancel_scope.cancel()
