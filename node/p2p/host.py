"""The guarded host: the only py-libp2p surface the rest of the node sees.

Everything runs under trio structured concurrency: ``open_host`` starts pubsub and the gossipsub router
*before* ``host.run()`` (py-libp2p's pubsub notifee hands new peers over a zero-capacity channel, so a
connection that arrives before Pubsub runs stalls its own setup), and tears all of it down on exit.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from .autorelay import RelayRefused, dial_via_relay
from .build import Parts, build
from .config import DialError, HostConfig, MessageTooLarge, RequestError
from .connguard import remote_key
from .events import PeerEventFn, PeerEvents
from .budget import RequestSlots
from .guard import guard_all_handlers, guard_stream_handler
from .nat import Nat, open_nat
from .ratelimit import TokenBucket
from .reqresp import RequestHandlerFn, make_request_handler, send_request
from .stats import HostStats
from .subnet import subnet_of

logger = logging.getLogger(__name__)

ValidatorFn = Callable[[str, bytes, str], bool]

_QUEUE_POLL_S = 0.005
_DIALED_KEEP = 1024


class Host:
    """A running libp2p node: gossip (publish/validate), request/response streams, peer events."""

    def __init__(self, config: HostConfig, parts: Parts, stats: HostStats) -> None:
        self.config = config
        self.stats = stats
        self._host = parts.host
        self._pubsub = parts.pubsub
        self._router = parts.router
        self.peer_id: str = str(parts.host.get_id())
        self._self_id = parts.host.get_id()
        self._validator: ValidatorFn | None = None
        self._bucket = TokenBucket(config.publish_rate, config.publish_burst)
        self._slots = RequestSlots(config.max_inbound_requests, config.max_inbound_requests_per_peer,
                                   config.max_inbound_requests_per_subnet)
        self.penalties = parts.penalties
        self.penalties.on_block(self._drop_blocked)
        self._slow_peers: set[ID] = set()  # full send queue outlasted send_queue_wait; see publish()
        self._events = PeerEvents(self.peer_id, stats)
        parts.host.get_network().register_notifee(self._events)
        self._events.add_callback(self._refuse_blocked)
        self._known_fn: Callable[[], Iterable[str]] = lambda: ()
        self._dialed: dict[str, None] = {}  # peers we dialed, oldest first (bounded: _DIALED_KEEP)
        parts.conn_guard.set_known(self.is_known)
        self.nat: Nat | None = None  # set by open_host when config.nat

    @property
    def lhost(self) -> Any:
        """The py-libp2p host, for the adapter's own modules (nat.py and its parts)."""
        return self._host

    # ---- addresses and connections -------------------------------------------------------------

    def listen_addrs(self) -> list[str]:
        return [str(a) for a in self._host.get_addrs()]

    async def connect(self, multiaddr: str, timeout: float = 5.0) -> str:
        if "/p2p-circuit" in multiaddr:
            return await self._connect_relayed(multiaddr, timeout)
        try:
            info = info_from_p2p_addr(Multiaddr(multiaddr))
        except Exception as exc:
            raise DialError(f"bad multiaddr {multiaddr!r} (need .../p2p/<peer id>): {exc}") from exc
        if info.peer_id == self._self_id:
            raise DialError(f"refusing to dial our own peer id via {multiaddr}")
        peer = str(info.peer_id)
        try:
            with trio.fail_after(timeout):
                await self._host.connect(info)
        except trio.TooSlowError:
            self._dial_failed(peer)
            raise DialError(f"timed out after {timeout}s dialing {multiaddr}") from None
        except Exception as exc:  # SwarmException, OpenConnectionError, ExceptionGroup of those, ...
            self._dial_failed(peer)
            raise DialError(f"could not connect to {multiaddr}: {_describe(exc)}") from exc
        self.stats.dials["ok"] += 1
        self._dialed.pop(peer, None)
        self._dialed[peer] = None
        if len(self._dialed) > _DIALED_KEEP:
            del self._dialed[next(iter(self._dialed))]
        return peer

    async def _connect_relayed(self, multiaddr: str, timeout: float) -> str:
        """Through a relay (autorelay.dial_via_relay); DCUtR then tries to make it direct."""
        try:
            peer = multiaddr.rsplit("/p2p/", 1)[1]
            ID.from_base58(peer)
        except Exception as exc:
            raise DialError(f"bad circuit address {multiaddr!r} (need .../p2p-circuit/p2p/<peer id>)") from exc
        if peer == self.peer_id:
            raise DialError(f"refusing to dial our own peer id via {multiaddr}")
        if self.connected(peer):
            return peer
        try:
            await dial_via_relay(self._host, multiaddr, timeout=max(timeout, 10.0))
        except RelayRefused as exc:
            self.stats.relay[f"client_dial_refused_{exc.reason}"] += 1
            self._dial_failed(peer, "relayed_failed")
            raise DialError(f"relay refused the circuit to {peer}: {exc.reason}") from None
        except trio.TooSlowError:
            self._dial_failed(peer, "relayed_failed")
            raise DialError(f"timed out dialing {multiaddr}") from None
        except Exception as exc:
            self._dial_failed(peer, "relayed_failed")
            raise DialError(f"could not connect through relay {multiaddr}: {_describe(exc)}") from exc
        self.stats.relay["client_circuits_dialed"] += 1
        self.stats.dials["relayed_ok"] += 1
        self._dialed.pop(peer, None)
        self._dialed[peer] = None
        return peer

    def _dial_failed(self, peer: str, kind: str = "failed") -> None:
        self.stats.dials[kind] += 1
        self.stats.dial_failed(peer)

    def connected(self, peer_id: str) -> bool:
        try:
            return bool(self._host.get_network().get_connections(ID.from_base58(peer_id)))
        except Exception:
            return False

    def network_of(self, peer_id: str) -> str:
        """The source network (subnet.py) of our first connection to the peer; "" when not connected.
        A relayed peer's is its relay's: what is costly to fake there is the relay's address."""
        try:
            conns = self._host.get_network().get_connections(ID.from_base58(peer_id))
        except Exception:  # noqa: BLE001 - not a peer id
            return ""
        key = remote_key(conns[0].muxed_conn) if conns else None
        return subnet_of(key[0]) if key else ""

    def relayed_only(self, peer_id: str) -> bool:
        """True when every connection to the peer goes through a relay."""
        try:
            conns = self._host.get_network().get_connections(ID.from_base58(peer_id))
        except Exception:
            return False
        return bool(conns) and all(any("/p2p-circuit" in str(a) for a in (c.get_transport_addresses() or []))
                                   for c in conns)

    def offers(self, peer_id: str, protocol: str, unknown: bool = False) -> bool:
        """Whether identify says the peer speaks ``protocol`` (``unknown`` when identify has not said)."""
        try:
            protocols = self._host.get_peerstore().get_protocols(ID.from_base58(peer_id))
        except Exception:
            return unknown
        return protocol in protocols if protocols else unknown

    def direct_addrs(self, peer_id: str) -> list[str]:
        """A peer's known addresses that are not circuits, as .../p2p/<peer id>."""
        return [a for a in self.peer_addrs(peer_id) if "/p2p-circuit" not in a and "/0.0.0.0/" not in a]

    def direct_listen_addrs(self) -> list[str]:
        return [a for a in self.listen_addrs() if "/p2p-circuit" not in a]

    def advertised_addrs(self) -> list[str]:
        """What to tell other peers: a private node's circuit addresses first (its own are not dialable
        from outside; DCUtR upgrades a circuit once connected), then its own."""
        direct = self.direct_listen_addrs()
        if self.nat is None or self.nat.reach.status != "private":
            return direct
        return self.nat.autorelay.circuit_addrs() + direct

    def on_addrs_changed(self, fn: Callable[[list[str]], None]) -> None:
        """fn(advertised_addrs()) when reachability or the relay reservations change them."""
        if self.nat is not None:
            self.nat.on_addrs_changed(fn)

    def reachability(self) -> dict[str, Any]:
        """For `status --json`: reachability, its evidence, relays, relay service, hole punching."""
        return {"status": "disabled"} if self.nat is None else self.nat.snapshot()

    async def disconnect(self, peer_id: str) -> None:
        try:
            peer = ID.from_base58(peer_id)
        except Exception:
            return
        try:
            await self._host.disconnect(peer)
        except Exception as exc:  # closing an already-dead connection must not raise into the node
            logger.debug("disconnect %s: %r", peer_id, exc)

    def connected_peers(self) -> list[str]:
        return [str(p) for p in self._host.get_connected_peers()]

    def peer_addrs(self, peer_id: str) -> list[str]:
        """Known addresses of a peer as dialable multiaddrs ending in /p2p/<peer_id>, deduplicated.

        The peerstore mixes forms (the dialed address without /p2p, identify's signed record with it)."""
        try:
            raw = self._host.get_peerstore().addrs(ID.from_base58(peer_id))
        except Exception:
            return []
        suffix = f"/p2p/{peer_id}"
        out: list[str] = []
        for addr in raw:
            text = str(addr)
            if not text.endswith(suffix):
                text += suffix
            if text not in out:
                out.append(text)
        return out

    def set_known_peers(self, fn: Callable[[], Iterable[str]]) -> None:
        """fn() -> the peer ids the node values (its address book, its task peers). With the gossip mesh
        and the peers we dialed they are "known": inbound connections keep HostConfig.conn_limits'
        reserved slots for them, and trimming never closes them."""
        self._known_fn = fn

    def is_known(self, peer_id: str) -> bool:
        if peer_id in self._dialed or any(str(p) == peer_id for mesh in self._router.mesh.values() for p in mesh):
            return True
        return peer_id in set(self._known_fn())

    def on_penalty(self, fn: Callable[[str, str], None]) -> None:
        """fn(peer_id, reason) each time a peer abuses a stream-level budget (budget.PENALTY_POINTS):
        the node charges it to the peer's reputation. The host blocks repeat abusers by itself."""
        self.penalties.add_callback(fn)

    def _drop_blocked(self, peer_id: str, reason: str) -> None:
        trio.lowlevel.spawn_system_task(self.disconnect, peer_id)

    def _refuse_blocked(self, peer_id: str, connected: bool) -> None:
        if connected and self.penalties.is_blocked(peer_id):
            self.stats.connections_refused["blocked"] += 1
            trio.lowlevel.spawn_system_task(self.disconnect, peer_id)

    def on_peer_event(self, fn: PeerEventFn) -> None:
        """fn(peer_id, connected) on the first connection to a peer and after its last one closes."""
        self._events.add_callback(fn)

    # ---- gossip ------------------------------------------------------------------------------

    def set_validator(self, fn: ValidatorFn) -> None:
        """fn(topic, data, forwarder) -> accept, called once per new inbound message on every subscribed
        topic before it is forwarded. Rejected (or raising) means: not delivered, not forwarded.
        Our own publishes are not passed to fn (the node already knows what it sent)."""
        self._validator = fn

    def _topic_validator(self, topic: str) -> Callable[[ID, Any], bool]:
        def validate(forwarder: ID, msg: Any) -> bool:
            if forwarder == self._self_id:
                return True
            fwd = str(forwarder)
            data = bytes(msg.data)
            self.stats.received += 1
            self.stats.bytes_in[fwd] += len(data)
            fn = self._validator
            if fn is None:
                ok = True
            else:
                try:
                    ok = bool(fn(topic, data, fwd))
                except Exception as exc:  # noqa: BLE001 - validator bugs count as reject, never propagate
                    self.stats.validator_errors += 1
                    logger.warning("validator raised on %s from %s: %r", topic, fwd, exc)
                    ok = False
            if ok:
                self.stats.accepted += 1
            else:
                self.stats.rejected += 1
            return ok

        return validate

    async def subscribe(self, topic: str) -> None:
        if topic in self._pubsub.topic_ids:
            return
        self._pubsub.set_topic_validator(topic, self._topic_validator(topic), False)
        await self._pubsub.subscribe(topic)

    async def unsubscribe(self, topic: str) -> None:
        await self._pubsub.unsubscribe(topic)
        self._pubsub.remove_topic_validator(topic)

    def subscribed_topics(self) -> list[str]:
        return list(self._pubsub.topic_ids)

    async def publish(self, topic: str, data: bytes) -> None:
        """Refuse oversize payloads, wait for a rate token, wait while send queues are near full."""
        if len(data) > self.config.max_gossip_bytes:
            self.stats.dropped["too_large"] += 1
            raise MessageTooLarge(f"{len(data)} bytes > max_gossip_bytes={self.config.max_gossip_bytes}")
        start = trio.current_time()
        await self._bucket.acquire()
        await self._wait_for_send_queues()
        self.stats.publish_wait_seconds += trio.current_time() - start
        await self._pubsub.publish(topic, bytes(data))
        self.stats.published += 1

    async def _wait_for_send_queues(self) -> None:
        # py-libp2p's per-peer RpcQueue (32 slots) drops on full; waiting here turns that into
        # backpressure. A peer still full after send_queue_wait is marked slow and not waited for
        # again until its queue drains below half the mark, so a trickle-reading peer costs one wait,
        # not one per message (it gets libp2p's drops instead, counted in stats).
        high = self.config.send_queue_high_water
        deadline = trio.current_time() + self.config.send_queue_wait
        while True:
            queues = dict(self._pubsub.peer_queues)
            self._slow_peers = {p for p in self._slow_peers if p in queues and len(queues[p]) >= high // 2}
            full = [p for p, q in queues.items() if len(q) >= high and p not in self._slow_peers]
            if not full:
                return
            if trio.current_time() >= deadline:
                self._slow_peers.update(full)
                self.stats.dropped["send_queue_stalled"] += 1
                return
            await trio.sleep(_QUEUE_POLL_S)

    # ---- request / response ------------------------------------------------------------------

    def set_request_handler(self, protocol: str, fn: RequestHandlerFn, max_request_bytes: int | None = None) -> None:
        """fn(peer_id, request) -> response bytes for inbound streams on ``protocol``; requests above
        ``max_request_bytes`` (default: HostConfig.request_cap(protocol)) are refused unread."""
        handler = make_request_handler(protocol, fn, self.config, self.stats, self._slots, self.penalties,
                                       max_request_bytes)
        self._host.set_stream_handler(TProtocol(protocol), guard_stream_handler(protocol, handler, self.stats))

    async def request(
        self,
        peer_id: str,
        protocol: str,
        data: bytes,
        timeout: float = 10.0,
        max_response_bytes: int | None = None,
    ) -> bytes:
        if len(data) > self.config.max_request_bytes:
            self.stats.request_errors["too_large"] += 1
            raise RequestError("too_large", f"request of {len(data)} bytes > max_request_bytes")
        cap = self.config.max_request_bytes if max_response_bytes is None else max_response_bytes
        return await send_request(self._host, peer_id, protocol, bytes(data), timeout, cap, self.stats)

    # ---- for tests and diagnostics -----------------------------------------------------------

    def take_link_activity(self) -> tuple[tuple[str, float], ...]:
        """(peer, when) for each peer that sent us a gossip frame since the last call (`Tick.heard`)."""
        activity = self._pubsub.link_activity
        if not activity:
            return ()
        self._pubsub.link_activity = {}
        return tuple((str(peer), when) for peer, when in activity.items())

    def mesh_peers(self, topic: str) -> list[str]:
        return [str(p) for p in self._router.mesh.get(topic, set())]

    def topic_peers(self, topic: str) -> list[str]:
        return [str(p) for p in self._pubsub.peer_topics.get(topic, set())]

    async def _raw_stream(self, peer_id: str, protocol: str) -> INetStream:
        """Open a negotiated stream (tests use it to send garbage on a protocol)."""
        return await self._host.new_stream(ID.from_base58(peer_id), [TProtocol(protocol)])


def _describe(exc: BaseException) -> str:
    """One line for an exception or the leaves of an exception group (libp2p dials raise groups)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({cause})"
    return text


def _single_leaf(group: BaseExceptionGroup) -> BaseException | None:
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        else:
            leaves.append(e)

    walk(group)
    return leaves[0] if len(leaves) == 1 else None


async def _close_connections(lhost: Any, timeout: float = 2.0) -> None:
    """Close every connection explicitly, shielded, before the services are stopped.

    py-libp2p bug: Swarm.run closes live connections in a ``finally`` that runs under the
    cancellation that stops the service, so the first ``await conn.close()`` raises Cancelled and the
    sockets are never closed; remote peers then keep us as "connected" indefinitely.
    """
    network = lhost.get_network()
    with trio.CancelScope(shield=True), trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:
            for conns in list(network.connections.values()):
                for conn in list(conns):
                    nursery.start_soon(_close_quietly, conn)


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close()
    except Exception as exc:
        logger.debug("closing connection on shutdown: %r", exc)


@asynccontextmanager
async def open_host(config: HostConfig) -> AsyncIterator[Host]:
    """Start a host listening on config.listen_host:config.port; stop everything on exit."""
    stats = HostStats()
    parts = build(config, stats)
    host = Host(config, parts, stats)
    guard_all_handlers(parts.host, stats)  # identify, ping, pubsub: everything registered so far
    try:
        async with background_trio_service(parts.pubsub), background_trio_service(parts.router):
            async with parts.host.run(listen_addrs=parts.listen_addrs):
                try:
                    if config.nat:
                        async with open_nat(host, parts) as host.nat:
                            yield host
                    else:
                        yield host
                finally:
                    await _close_connections(parts.host)
    except BaseExceptionGroup as group:
        # py-libp2p yields inside its own nurseries, so under trio's strict exception groups an error
        # from the caller's body arrives wrapped; hand a lone exception back unwrapped so callers can
        # `except RequestError` as usual. Real multi-failures stay groups.
        leaf = _single_leaf(group)
        if leaf is None:
            raise
        raise leaf from None
