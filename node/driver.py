"""Carries a `PeerCore`'s effects out on a libp2p `Host`, and feeds the core what the host sees.

The core is synchronous and fast; everything that waits (publishing under backpressure, dialling,
requests) runs as a task in the node's nursery and reports back as a new input. The core is only
ever called from the trio thread, so it needs no locks.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import trio

from node.p2p import DialError, MessageTooLarge, RequestError
from node.p2p.reqresp import Reply
from swarm import jobs, protocols, shardwire
from swarm.io import (Ban, CheckShards, CommandResult, Dial, DialFailed, Disconnect, DropBlobs, Emit, JobFinished,
                      KeepShards, LocalCommand, MessageReceived, MessageVerdict, PeerConnected, PeerDisconnected,
                      Publish, RequestReceived, Respond, RespondShard, ResponseReceived, RunJob, SendRequest,
                      ShardSent, ShardsPresent, StoreBlob, StoreShard, StreamAbuse, Subscribe, Tick, Unsubscribe)
from swarm.stats import REQUEST_BOUNDS, Buckets
from trainer.fsutil import DISK_ERRNOS, is_disk_error

PUBLISH_QUEUE = 1024
REPLY_TIMEOUT = 30.0


@dataclass
class _Slot:
    """Where an answer the core gives later (a Respond, a CommandResult) is parked for its waiter."""

    event: trio.Event = field(default_factory=trio.Event)
    value: Any = None
    owes_sent: bool = False  # a RespondShard: the core is told ShardSent once the answer is written


class CoreDriver:
    def __init__(self, core, host, nursery: trio.Nursery, log, blobs=None, records=None, shards=None) -> None:
        self.core = core
        self.host = host
        self.nursery = nursery
        self.log = log
        self.blobs = blobs  # node.blobstore.BlobStore: where StoreBlob effects land and blobs are served from
        self.records = records  # node.records.Records: the durable log of what this peer did
        self.shards = shards  # node.shardstore.ShardDir: weight shards, stored, served and resumed from
        self.uplink = None  # node.uplink.Uplink: shard answers leave at an emulated upload rate (off: None)
        self.disk = None  # node.diskwatch.DiskWatch: while the data dir takes no writes, no work that writes is taken
        self.counters: Counter = Counter()
        self.request_seconds: dict[str, Buckets] = {}  # protocol -> how long our requests took (metrics)
        self.banned: set[str] = set()
        self._publish_send, self._publish_recv = trio.open_memory_channel(PUBLISH_QUEUE)
        self._wakeup = trio.Event()
        self._replies: dict[int, _Slot] = {}
        self._commands: dict[int, _Slot] = {}
        self._next_id = 1
        self.job_runner = None  # node.jobrunner.JobRunner for the roles' blocking work (set by run_node)
        # a trainer's second job process, for verify jobs only: its checks of the next step's batches
        # run beside the train job instead of queueing behind it (node/runtime.py says when)
        self.check_runner = None

    @staticmethod
    def now() -> float:
        return time.time()

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # ---------------------------------------------------------------- feeding the core

    def feed(self, inp) -> list:
        effects = self.core.handle(self.now(), inp)
        for effect in effects:
            self._carry_out(effect)
        self._wakeup.set()
        return effects

    def validate(self, topic: str, data: bytes, forwarder: str) -> bool:
        """The gossipsub validator: the core decides, and acts on what it accepts, in one call."""
        for effect in self.feed(MessageReceived(topic, data, forwarder, self.host.network_of(forwarder))):
            if isinstance(effect, MessageVerdict):
                return effect.accepted
        return False

    def on_peer_event(self, peer: str, connected: bool) -> None:
        if connected and peer in self.banned:
            self.nursery.start_soon(self.host.disconnect, peer)
            return
        self.feed(PeerConnected(peer, tuple(self.host.peer_addrs(peer))) if connected else PeerDisconnected(peer))

    def on_penalty(self, peer: str, reason: str) -> None:
        """The host refused a peer's stream (node/p2p/budget.py): the ledger decides about a ban."""
        self.feed(StreamAbuse(peer, reason))

    async def handle_request(self, protocol: str, peer: str, data: bytes) -> bytes:
        rid = self._new_id()
        slot = self._replies[rid] = _Slot()
        try:
            self.feed(RequestReceived(peer, protocol, rid, data))
            with trio.fail_after(REPLY_TIMEOUT):
                await slot.event.wait()
        finally:
            self._replies.pop(rid, None)
        respond: Respond = slot.value
        owes_sent = slot.owes_sent  # the exchange holds an upload slot for this answer until ShardSent
        try:
            data = respond.data
            if protocol == protocols.SHARD:
                data = shardwire.encode_answer(respond.data, respond.error)
                if respond.error is not None:
                    return data  # in band: "busy" and "not-found" must reach the asker
                if self.uplink is not None:
                    await self.uplink.send(len(data))  # an emulated per-peer uplink (node/uplink.py)
            if respond.error is not None:
                raise RequestError(respond.error)  # the adapter resets the stream; the asker sees a failure
            if owes_sent:
                owes_sent = False  # handed on: the adapter calls done() once the bytes are written
                return Reply(data, lambda: self.feed(ShardSent(rid)))
            return data
        finally:
            if owes_sent:
                self.feed(ShardSent(rid))

    async def command(self, name: str, args: dict) -> CommandResult:
        cid = self._new_id()
        slot = self._commands[cid] = _Slot()
        try:
            self.feed(LocalCommand(cid, name, args))
            with trio.fail_after(REPLY_TIMEOUT):
                await slot.event.wait()
        finally:
            self._commands.pop(cid, None)
        return slot.value

    # ---------------------------------------------------------------- effects

    def _carry_out(self, effect) -> None:
        handler = self.EFFECT_HANDLERS.get(type(effect))
        if handler is None:
            raise TypeError(f"node/driver.py has no handler for effect {type(effect).__name__}")
        handler(self, effect)

    def _publish(self, effect: Publish) -> None:
        try:
            self._publish_send.send_nowait((effect.topic, effect.data))
        except trio.WouldBlock:
            self.counters["publish-queue-full"] += 1

    def _subscribe(self, effect: Subscribe) -> None:
        self.nursery.start_soon(self.host.subscribe, effect.topic)

    def _unsubscribe(self, effect: Unsubscribe) -> None:
        self.nursery.start_soon(self.host.unsubscribe, effect.topic)

    def _send_request(self, effect: SendRequest) -> None:
        self.nursery.start_soon(self._request, effect)

    def _respond(self, effect: Respond) -> None:
        slot = self._replies.get(effect.request_id)
        if slot is not None:
            slot.value = effect
            slot.event.set()

    def _command_result(self, effect: CommandResult) -> None:
        slot = self._commands.get(effect.command_id)
        if slot is not None:
            slot.value = effect
            slot.event.set()

    def _dial_effect(self, effect: Dial) -> None:
        self.nursery.start_soon(self._dial, effect)

    def _ban(self, effect: Ban) -> None:
        self.banned.add(effect.peer)
        self.log("ban", peer=effect.peer, reason=effect.reason)
        self.nursery.start_soon(self.host.disconnect, effect.peer)

    def _disconnect(self, effect: Disconnect) -> None:
        self.nursery.start_soon(self.host.disconnect, effect.peer)

    def _run_job(self, effect: RunJob) -> None:
        runner = self.check_runner if effect.kind == jobs.VERIFY and self.check_runner else self.job_runner
        if effect.kind != jobs.VERIFY and self.disk is not None and not self.disk.ok:  # checks write nothing
            self.counters["job-refused-disk"] += 1
            error = f"disk {self.disk.state}: {self.disk.reason}; no job that writes runs until it takes writes again"
            self.nursery.start_soon(self._feed_later, JobFinished(effect.job_id, False, None, error))
        elif runner is None:
            self.counters["job-without-runner"] += 1
        else:
            runner.submit(effect)

    def _read_piece(self, shard: bytes, offset: int, length: int, digest: bytes) -> bytes | None:
        return None if self.shards is None else self.shards.get_piece(shard, digest, offset, length)

    def _respond_shard(self, effect: RespondShard) -> None:
        slot = self._replies.get(effect.request_id)
        if slot is None:  # the asker's handler gave up waiting: nothing will be written
            self.nursery.start_soon(self._feed_later, ShardSent(effect.request_id))
            return
        data, error = shardwire.piece_answer(effect, self._read_piece)
        slot.value = Respond(effect.request_id, data, error)  # framed by handle_request
        self.counters["pieces-served" if error is None else "pieces-missing"] += 1
        slot.owes_sent = True  # handle_request tells the core once the answer is written
        slot.event.set()

    def _store_shard(self, effect: StoreShard) -> None:
        if self.disk is not None and not self.disk.ok:
            self.counters["shard-not-stored-disk"] += 1
            return
        try:
            if self.shards is None or not self.shards.put(effect.digest, effect.data):
                self.counters["shard-not-stored"] += 1
        except OSError as exc:
            self.counters["shard-not-stored-disk"] += 1
            self.write_failed(exc, "shard")

    def _check_shards(self, effect: CheckShards) -> None:
        present = self.shards.present(effect.digests) if self.shards is not None else frozenset()
        self.nursery.start_soon(self._feed_later, ShardsPresent(effect.root, present))

    def _keep_shards(self, effect: KeepShards) -> None:
        if self.shards is not None:
            self.nursery.start_soon(trio.to_thread.run_sync, self.shards.gc, effect.keep)

    def _drop_blobs(self, effect: DropBlobs) -> None:
        if self.blobs is not None:
            self.nursery.start_soon(trio.to_thread.run_sync, self.blobs.drop, effect.digests)

    def _store_blob(self, effect: StoreBlob) -> None:
        if self.disk is not None and not self.disk.ok:
            self.counters["blob-not-stored-disk"] += 1
            return
        try:
            if self.blobs is None or self.blobs.put(effect.data, expected=effect.digest) is None:
                self.counters["blob-not-stored"] += 1
        except OSError as exc:
            self.counters["blob-not-stored-disk"] += 1
            self.write_failed(exc, "blob")

    # ---------------------------------------------------------------- the disk

    def write_failed(self, exc: OSError, what: str) -> None:
        """A write of ours failed (nothing was left half-written: trainer/fsutil.py); full or read-only
        disks change the watch's state, anything else is logged."""
        if self.disk is not None and is_disk_error(exc):
            self.disk_changed(self.disk.refused(exc))
        else:
            self.log("write-failed", what=what, error=str(exc))

    def disk_changed(self, state: str | None) -> None:
        if state is not None:
            self.log(f"disk-{state}", data_dir=self.disk.data_dir, reason=self.disk.reason or "writes succeed again",
                     free_mb=None if self.disk.free is None else self.disk.free >> 20)

    def job_finished(self, done: JobFinished) -> None:
        """A job's answer (node/jobrunner.py); one the job process's disk refused tells the watch first."""
        code = next((e for e in DISK_ERRNOS if f"[Errno {e}]" in done.error), None) if not done.ok else None
        if code is not None and self.disk is not None:
            self.disk_changed(self.disk.refused(OSError(code, done.error[:200])))
        self.feed(done)

    def _emit(self, effect: Emit) -> None:
        self.log(effect.event, **effect.fields)
        if self.records is not None:
            self.records.append(self.now(), effect.event, effect.fields)

    def _verdict(self, effect: MessageVerdict) -> None:
        pass  # `validate` reads it from feed's result: gossipsub forwards what the core accepts

    EFFECT_HANDLERS = {
        MessageVerdict: _verdict, Publish: _publish, Subscribe: _subscribe, Unsubscribe: _unsubscribe,
        SendRequest: _send_request, Respond: _respond, CommandResult: _command_result, Dial: _dial_effect,
        Ban: _ban, Disconnect: _disconnect, RunJob: _run_job, RespondShard: _respond_shard,
        StoreShard: _store_shard, CheckShards: _check_shards, KeepShards: _keep_shards, DropBlobs: _drop_blobs,
        StoreBlob: _store_blob, Emit: _emit,
    }
    """Effect class -> handler(driver, effect), built once; an effect missing here is an error, never dropped."""

    async def _feed_later(self, inp) -> None:
        self.feed(inp)  # an answer the core asked for, fed after its current effects are carried out

    async def _request(self, req: SendRequest) -> None:
        started = trio.current_time()
        try:
            try:
                data = await self.host.request(req.peer, req.protocol, req.data, timeout=req.timeout)
            finally:
                hist = self.request_seconds.get(req.protocol)
                if hist is None:  # our own protocols only: a handful of histograms
                    hist = self.request_seconds[req.protocol] = Buckets(REQUEST_BOUNDS)
                hist.observe(trio.current_time() - started)
            if req.protocol == protocols.SHARD:
                data, error = shardwire.decode_answer(data)
                if error is not None:
                    self.feed(ResponseReceived(req.peer, req.protocol, req.request_id, error=error))
                    return
            self.feed(ResponseReceived(req.peer, req.protocol, req.request_id, data,
                                       from_net=self.host.network_of(req.peer)))
        except RequestError as exc:
            self.feed(ResponseReceived(req.peer, req.protocol, req.request_id, error=str(exc)))

    async def _dial(self, dial: Dial) -> None:
        for addr in dial.addrs:
            if not addr.endswith(dial.peer):
                addr = f"{addr}/p2p/{dial.peer}"
            try:
                await self.host.connect(addr)
                return
            except DialError as exc:
                error = str(exc)
        else:
            error = "no address"
        self.feed(DialFailed(dial.peer, error))

    # ---------------------------------------------------------------- long-running tasks

    async def publisher(self) -> None:
        """Publishes in order; `host.publish` applies rate limiting and backpressure."""
        async for topic, data in self._publish_recv:
            try:
                await self.host.publish(topic, data)
            except MessageTooLarge as exc:
                self.counters["publish-too-large"] += 1
                self.log("publish-refused", topic=topic, error=str(exc))

    async def timer_loop(self) -> None:
        """Wakes the core at `next_deadline()`, or earlier when an input changed its timers."""
        while True:
            deadline = self.core.next_deadline()
            delay = 3600.0 if deadline is None else deadline - self.now()
            if delay <= 0:
                self.feed(Tick(self.host.take_link_activity()))
                await trio.sleep(0)
                continue
            self._wakeup = trio.Event()
            with trio.move_on_after(min(delay, 1.0)):
                await self._wakeup.wait()
