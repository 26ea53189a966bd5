"""Keep garbage from the network from killing the host.

py-libp2p 0.8.1 runs each inbound stream handler inside the connection's nursery, which lives in the
Swarm service; an exception escaping a handler propagates up and cancels the Swarm (the whole host).
Pubsub is worse: its own stream handler only catches StreamError/ParseError/IncompleteReadError, so a
protobuf DecodeError from a malformed RPC escapes, and a message whose signing key does not parse makes
``signature_validator`` re-raise inside ``push_msg``, a task of the Pubsub service, which then cancels
the Pubsub service and with it ``open_host``. This module wraps every one of those entry points.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from libp2p.abc import INetStream
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub

from .budget import PenaltyBox
from .stats import HostStats

logger = logging.getLogger(__name__)

StreamHandler = Callable[[INetStream], Awaitable[None]]


async def reset_quietly(stream: INetStream) -> None:
    """Reset a stream, ignoring every error (the stream may already be dead)."""
    with trio.CancelScope(shield=True):
        try:
            await stream.reset()
        except Exception:
            pass


def guard_stream_handler(protocol: str, handler: StreamHandler, stats: HostStats) -> StreamHandler:
    """Wrap an inbound stream handler: any Exception is counted under ``protocol`` and resets the stream.

    Cancellation (trio.Cancelled, a BaseException) still propagates, so shutdown stays structured.
    """
    if getattr(handler, "__swarm_guarded__", False):
        return handler

    async def guarded(stream: INetStream) -> None:
        try:
            await handler(stream)
        except Exception as exc:  # noqa: BLE001 - the point is to contain anything the peer can cause
            stats.guarded_errors[protocol] += 1
            logger.debug("guarded %s handler error: %r", protocol, exc)
            await reset_quietly(stream)

    guarded.__swarm_guarded__ = True  # type: ignore[attr-defined]
    guarded.__wrapped__ = handler  # type: ignore[attr-defined]
    return guarded


def guard_all_handlers(host: Any, stats: HostStats) -> None:
    """Wrap every handler currently registered with the host's multistream-select (identify, ping, ...)."""
    handlers = host.get_mux().handlers
    for protocol, handler in list(handlers.items()):
        if protocol is None or handler is None:
            continue
        handlers[protocol] = guard_stream_handler(str(protocol), handler, stats)


def batch_yamux_window_updates() -> None:
    """Have yamux return read credit once per message instead of once per read.

    py-libp2p 0.8.1 defaults `PY_YAMUX_RELEASE_ON_READ` to on, which sends a WINDOW_UPDATE frame for
    every `read()` on a stream. Pubsub reads each message's varint prefix a byte at a time and then its
    body, so every message received sent three frames back, each Noise-encrypted and written to the
    socket on its own. With it off, the library's hysteresis holds back the credit of reads that leave
    the window at least half full (the prefix bytes) and returns it with the next update: one frame a
    message. A gossip message then costs the receiver 15-20% less CPU, and 100 msg/s on 6 local
    processes goes from about 0.8 to 0.96-0.98 delivered (docs/benchmarks.md). The variable is read at
    each call, so setting it before any stream opens covers the whole process; an operator's own
    setting wins."""
    os.environ.setdefault("PY_YAMUX_RELEASE_ON_READ", "0")


class OneLineRecords(logging.Filter):
    """py-libp2p logs a 7-line block at ERROR each time a stream cannot be opened, which a peer without
    gossipsub causes on every connection: the block becomes its first two lines, joined. A peer that
    does not speak `/swarm/ping/1` (a plain libp2p peer) is expected, and handled (swarm/links.py:
    its link is not pinged again): its block is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "protocols not supported" in message and "'/swarm/ping/1'" in message:
            return False
        if "\n" in message:
            record.msg, record.args = " ".join(line.strip() for line in message.splitlines()[:2]), ()
        return True


class DialBackProbes(logging.Filter):
    """py-libp2p logs "fail to upgrade mux" at ERROR for every inbound connection that closes after its
    Noise handshake, and our own reachability probe is exactly that: a dial-back server proves it
    reaches us with a fresh connection it closes once Noise is done (node/p2p/reach.py), so a node
    still learning its reachability logged one such line every ten seconds. Nothing is lost with the
    connection (a peer that wants one redials, and its existing connection is untouched): dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("fail to upgrade mux")


def one_line_stream_failures() -> None:
    """Install `OneLineRecords` on py-libp2p's host logger and `DialBackProbes` on its swarm's (once
    per process)."""
    for name, kind in (("libp2p.host.basic_host", OneLineRecords), ("libp2p.network.swarm", DialBackProbes)):
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())


class NoValidationCache:
    """Stands in for py-libp2p's ValidationCache, which remembers *failed* validations by message id
    for 5 minutes and fails every later copy with that id unchecked. Our validator's verdict depends
    on more than the bytes (who forwarded it, rate limits, what the node knows yet), so a cached
    failure lets whoever sends a bad copy first silence the genuine one. Successes need no cache:
    an accepted message is in the seen-cache and never validated again."""

    def get(self, msg_id: bytes) -> None:
        return None

    def put(self, msg_id: bytes, result: Any) -> None:
        return None

    def clear_expired(self) -> None:
        return None


class GuardedPubsub(Pubsub):
    """Pubsub whose inbound entry points cannot crash the service.

    ``stream_handler`` is what Pubsub.__init__ registers for every router protocol, so overriding it
    here guards the pubsub streams. ``push_msg`` runs as a Pubsub service task for each inbound message.
    """

    def __init__(self, *args: Any, guard_stats: HostStats, penalties: PenaltyBox, **kwargs: Any) -> None:
        self._guard_stats = guard_stats
        self._penalties = penalties
        super().__init__(*args, **kwargs)
        self.validation_cache = NoValidationCache()  # type: ignore[assignment]
        # peer -> when it last sent us a gossip frame (a message, a duplicate too, or control): what the
        # core is not handed otherwise, taken with each Tick (`Host.take_link_activity`, swarm/links.py)
        self.link_activity: dict[Any, float] = {}

    async def stream_handler(self, stream: INetStream) -> None:
        peer = str(stream.muxed_conn.peer_id)
        if self._penalties.is_blocked(peer):
            await reset_quietly(stream)
            return
        try:
            await super().stream_handler(stream)
        except Exception as exc:  # noqa: BLE001
            # py-libp2p bug: Pubsub.stream_handler lets protobuf DecodeError (and router.handle_rpc
            # errors) escape into the Swarm's connection nursery, which kills the host.
            protocol = str(stream.get_protocol() or "pubsub")
            self._guard_stats.guarded_errors[protocol] += 1
            logger.debug("guarded pubsub stream error: %r", exc)
            self._penalties.charge(peer, "pubsub_garbage")
            await reset_quietly(stream)
            try:
                self._handle_dead_peer(stream.muxed_conn.peer_id)
            except Exception:
                pass

    async def push_msg(self, msg_forwarder: Any, msg: Any) -> None:
        if msg_forwarder == self.my_id:
            # Our own publish: let errors reach the caller of publish().
            await super().push_msg(msg_forwarder, msg)
            return
        self.link_activity[msg_forwarder] = time.time()
        try:
            if self._is_msg_seen(msg):
                # Dropped before validation, as py-libp2p does, but counted: a gossip echo from a mesh
                # peer, or a replay inside the seen-cache's window.
                self._guard_stats.dropped["duplicate"] += 1
                return
            await super().push_msg(msg_forwarder, msg)
        except Exception as exc:  # noqa: BLE001
            # py-libp2p bug: signature_validator re-raises when msg.key does not deserialize, and any
            # exception in this service task cancels the whole Pubsub service.
            self._guard_stats.guarded_errors["pubsub/push_msg"] += 1
            logger.debug("guarded push_msg error from %s: %r", msg_forwarder, exc)

    def notify_subscriptions(self, publish_message: Any) -> None:
        """Deliver nothing to subscription queues.

        The node consumes messages inside the validator (called once per new message, before
        forwarding), so the per-topic queues would only fill up: py-libp2p's are 32 deep and log a
        warning per dropped message once full. Not filling them is the cheapest way to drain them.
        """
        return None


class _NoDeliveryLog(dict):
    """What py-libp2p 0.8.1's `recent_message_deliveries` becomes: a list per topic that keeps nothing.

    `GossipSub.publish` appends a timestamp to it for every message it sends or forwards, and only its
    adaptive-gossip health check (every 30 s, and only with adaptive gossip and a scorer, neither of
    which we run) ever trims it: left alone it grows by one float per message for the node's life,
    about 40,000 an hour on a trainer (bench/soak.py)."""

    def __missing__(self, topic: str) -> list:
        return _Discarding()


class _Discarding(list):
    def append(self, item: Any) -> None:
        pass


class GuardedGossipSub(GossipSub):
    """GossipSub whose heartbeat survives an exception in one round (it is a daemon task: if it exits,
    the router service is cancelled), and whose per-message delivery log keeps nothing (_NoDeliveryLog)."""

    def __init__(self, *args: Any, guard_stats: HostStats, **kwargs: Any) -> None:
        self._guard_stats = guard_stats
        super().__init__(*args, **kwargs)
        if not self.adaptive_gossip_enabled:  # its only reader, the health check, never runs
            self.recent_message_deliveries = _NoDeliveryLog()

    async def heartbeat(self) -> None:
        while True:
            try:
                await super().heartbeat()  # loops forever unless a round raises
            except Exception as exc:  # noqa: BLE001
                self._guard_stats.guarded_errors["gossipsub/heartbeat"] += 1
                logger.warning("gossipsub heartbeat round failed, restarting: %r", exc)
                await trio.sleep(self.heartbeat_interval)

    async def handle_rpc(self, rpc: Any, sender_peer_id: Any) -> None:
        self.pubsub.link_activity[sender_peer_id] = time.time()  # a control frame (IHAVE, ...) says the peer runs
        await super().handle_rpc(rpc, sender_peer_id)

    def _handle_dropped_rpc(self, peer_id: Any, rpc: Any, reason: str) -> None:
        # py-libp2p drops silently (debug log) when a peer's 32-slot send queue is full or an RPC is
        # oversized; count it so overload is visible in stats.
        if len(rpc.publish):
            self._guard_stats.dropped[f"libp2p_{reason}"] += len(rpc.publish)
        super()._handle_dropped_rpc(peer_id, rpc, reason)
