"""Several `PeerCore`s wired together in memory: no sockets, no clock, flood gossip.

Like h11's ConnectionPair: effects of one core become inputs of others. Gossip is relayed only
after the receiving core accepts it (as gossipsub does with validators), with a per-peer seen set
standing in for gossipsub's own message cache.
"""

from __future__ import annotations

import hashlib
from collections import deque

from gossip.identity import Identity
from swarm.core import CoreConfig, PeerCore
from swarm import protocols, shardwire
from swarm.io import (Ban, CheckShards, CommandResult, Dial, DialFailed, Disconnect, DropBlobs, Emit, JobFinished, KeepShards,
                      LocalCommand, MessageReceived, MessageVerdict, PeerConnected, PeerDisconnected, Publish, RequestReceived,
                      Respond, RespondShard, ResponseReceived, RunJob, SendRequest, ShardSent, ShardsPresent,
                      Started, StoreBlob, StoreShard, Subscribe, Tick, Unsubscribe)
from tests.samples import T0, task


FAKE_SHARD = 256
# One piece a shard: MemoryNet delivers every answer after the same delay whatever its size, so
# smaller pieces would only add round trips; tests that exercise pieces monkeypatch it (64: four a shard).
FAKE_PIECE = FAKE_SHARD


def fake_packed_version(version: int, blob: bytes, stats=None):
    """A job result for a fake packed version (INIT/TRAIN): the weights blob padded to three shards,
    a full manifest over them. Returns (ok, VersionResult, error, blobs and shards produced)."""
    from swarm import jobs

    def h(data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=32).digest()
    unit = blob + b"#" * 8
    payload = (unit * (2 * FAKE_SHARD // len(unit) + 1))[:2 * FAKE_SHARD + 40]
    shards = [payload[i:i + FAKE_SHARD] for i in range(0, len(payload), FAKE_SHARD)]
    manifest = {"parent_root": b"", "encoding": "full", "dtype": "bf16", "root": h(b"root" + payload),
                "shard_size": FAKE_SHARD, "raw_size": len(payload), "compressed_size": len(payload),
                "shard_hashes": tuple(h(s) for s in shards), "tensors": (), "piece_size": FAKE_PIECE,
                "piece_hashes": tuple(h(payload[i:i + FAKE_PIECE]) for i in range(0, len(payload), FAKE_PIECE))}
    produced = {h(blob): blob, **{h(s): s for s in shards}}
    return True, jobs.VersionResult(version, h(blob), len(blob), stats or {}, manifest), "", produced


def fake_unpack(store: dict[bytes, bytes], job):
    """What an unpack job does with a fake packed version: every shard from the store, hash-checked."""
    from swarm import jobs

    m = job.payload.manifest
    shards = [store.get(d) for d in m.shard_hashes]
    if any(s is None or hashlib.blake2b(s, digest_size=32).digest() != d for s, d in zip(shards, m.shard_hashes)):
        return False, None, "shard missing or corrupt", {}
    blob = b"".join(shards).split(b"#", 1)[0]
    digest = hashlib.blake2b(blob, digest_size=32).digest()
    return True, jobs.VersionResult(job.payload.version, digest, len(blob)), "", {digest: blob}


class MemoryNet:
    def __init__(self, cores: list[PeerCore], now: float) -> None:
        self.cores = {c.peer_id: c for c in cores}
        self.now = now
        self.subs: dict[str, set[str]] = {p: set() for p in self.cores}
        self.links: set[frozenset] = set()
        self.down: set[str] = set()
        self.gossip_seen: dict[str, set[bytes]] = {p: set() for p in self.cores}
        self.events: list[tuple[str, Emit]] = []
        self.command_results: list[tuple[str, CommandResult]] = []
        self.verdicts: list[tuple[str, MessageVerdict]] = []
        self._pending: deque = deque()
        self._requests: dict[tuple[str, int], tuple[str, int, str]] = {}  # (server, server_rid) -> (client, rid, proto)
        self._server_rid = 0
        self.blobs: dict[str, dict[bytes, bytes]] = {p: {} for p in self.cores}
        self.shards: dict[str, dict[bytes, bytes]] = {p: {} for p in self.cores}  # survive a stop/start (disk)
        self.serve_hook = None  # optional fn(server, digest, data) -> bytes | None: what a server really sends
        self.check_reads = True  # a piece read from a stored shard is re-hashed (node/shardstore.py); off: a
        # runtime that serves whatever its disk holds, so only the asker's checks stand in the way
        self.jobs = None  # optional executor: fn(peer, RunJob) -> (ok, result, error, blobs produced)
        self.jobs_run: list[tuple[str, RunJob]] = []
        self.dropped_blobs: list[tuple[str, bytes]] = []
        self.cut: set[frozenset] = set()  # pairs that cannot dial each other (a partition)
        self.job_seconds = 0.5  # jobs take virtual time, as real ones do
        self._delayed: list[tuple[float, int, str, object]] = []
        self.frozen: dict[str, list] = {}  # peer -> inputs queued while it is not running (`freeze`)

    def addr(self, peer: str) -> str:
        return f"/mem/{peer}"

    def start(self, peer: str | None = None) -> None:
        for p in [peer] if peer else sorted(self.cores):
            self.down.discard(p)
            self.deliver(p, Started((self.addr(p),)))

    def connect(self, a: str, b: str) -> None:
        if frozenset((a, b)) in self.links:
            return
        self.links.add(frozenset((a, b)))
        self.deliver(a, PeerConnected(b, (self.addr(b),)))
        self.deliver(b, PeerConnected(a, (self.addr(a),)))

    def disconnect(self, a: str, b: str) -> None:
        if frozenset((a, b)) in self.links:
            self.links.discard(frozenset((a, b)))
            self.deliver(a, PeerDisconnected(b))
            self.deliver(b, PeerDisconnected(a))

    def stop(self, peer: str, silent: bool = False) -> None:
        """Take a peer down; `silent` keeps its links (a SIGSTOPped process), else they drop."""
        self.down.add(peer)
        if not silent:
            for link in sorted(self.links, key=sorted):
                if peer in link:
                    (other,) = link - {peer}
                    self.disconnect(peer, other)

    def freeze(self, peer: str) -> None:
        """The peer stops running but keeps its links (an overloaded or suspended machine): what is sent
        to it queues, as in its sockets, and its timers do not fire."""
        self.frozen.setdefault(peer, [])

    def thaw(self, peer: str) -> None:
        """It runs again: its overdue timers first (a runtime may wake either way; this is the order that
        tests a stalled peer's judgement), then everything that queued, in order."""
        backlog = self.frozen.pop(peer)
        self.deliver(peer, Tick())
        for inp in backlog:
            self.deliver(peer, inp)

    def neighbours(self, peer: str) -> list[str]:
        return sorted(next(iter(link - {peer})) for link in self.links if peer in link)

    def deliver(self, peer: str, inp) -> list:
        if peer in self.down:
            return []
        if peer in self.frozen:
            self.frozen[peer].append(inp)
            return []
        effects = self.cores[peer].handle(self.now, inp)
        for effect in effects:
            self._carry_out(peer, inp, effect)
        self._drain()
        return effects

    def inject(self, to: str, topic: str, data: bytes, from_peer: str, from_net: str = "") -> list:
        """Hand `to` a gossip message as if `from_peer` (of source network `from_net`) forwarded it."""
        return self.deliver(to, MessageReceived(topic, data, from_peer, from_net))

    def _drain(self) -> None:
        while self._pending:
            peer, inp = self._pending.popleft()
            if peer in self.down:
                continue
            if peer in self.frozen:
                self.frozen[peer].append(inp)
                continue
            for effect in self.cores[peer].handle(self.now, inp):
                self._carry_out(peer, inp, effect)

    def _gossip(self, sender: str, topic: str, data: bytes) -> None:
        key = hashlib.blake2b(data, digest_size=16).digest()
        self.gossip_seen[sender].add(key)
        for other in self.neighbours(sender):
            if topic in self.subs[other] and key not in self.gossip_seen[other] and other not in self.down:
                self.gossip_seen[other].add(key)
                self._pending.append((other, MessageReceived(topic, data, sender)))

    def _carry_out(self, peer: str, inp, effect) -> None:
        handler = self.EFFECT_HANDLERS.get(type(effect))
        if handler is None:
            raise TypeError(f"MemoryNet has no handler for effect {type(effect).__name__}")
        handler(self, peer, inp, effect)

    def _publish(self, peer: str, inp, effect: Publish) -> None:
        self._gossip(peer, effect.topic, effect.data)

    def _verdict(self, peer: str, inp, effect: MessageVerdict) -> None:
        self.verdicts.append((peer, effect))
        if effect.accepted and isinstance(inp, MessageReceived):
            self._gossip(peer, inp.topic, inp.data)

    def _subscribe(self, peer: str, inp, effect: Subscribe) -> None:
        self.subs[peer].add(effect.topic)

    def _unsubscribe(self, peer: str, inp, effect: Unsubscribe) -> None:
        self.subs[peer].discard(effect.topic)

    def partition(self, side: set[str]) -> list[tuple[str, str]]:
        """Cut `side` off from the rest: its links across drop and dials across fail until `heal`."""
        across = [tuple(sorted(link)) for link in sorted(self.links, key=sorted) if len(link & side) == 1]
        self.cut = {frozenset((a, b)) for a in side for b in self.cores if b not in side}
        for a, b in across:
            self.disconnect(a, b)
        return across

    def heal(self, links: list[tuple[str, str]]) -> None:
        self.cut = set()
        for a, b in links:
            self.connect(a, b)

    def _dial(self, peer: str, inp, effect: Dial) -> None:
        if effect.peer in self.cores and effect.peer not in self.down and frozenset((peer, effect.peer)) not in self.cut:
            self.connect(peer, effect.peer)
        else:
            self._pending.append((peer, DialFailed(effect.peer, "unreachable")))

    def _disconnect(self, peer: str, inp, effect: Disconnect | Ban) -> None:
        self.disconnect(peer, effect.peer)

    def _store_blob(self, peer: str, inp, effect: StoreBlob) -> None:
        self.blobs[peer][effect.digest] = effect.data

    def _store_shard(self, peer: str, inp, effect: StoreShard) -> None:
        assert hashlib.blake2b(effect.data, digest_size=32).digest() == effect.digest, "unverified shard stored"
        self.shards[peer][effect.digest] = effect.data

    def _check_shards(self, peer: str, inp, effect: CheckShards) -> None:
        held = frozenset(d for d in effect.digests if d in self.shards[peer])
        self._pending.append((peer, ShardsPresent(effect.root, held)))

    def _drop_blobs(self, peer: str, inp, effect: DropBlobs) -> None:
        for digest in effect.digests:
            self.blobs[peer].pop(digest, None)
            self.dropped_blobs.append((peer, digest))

    def _keep_shards(self, peer: str, inp, effect: KeepShards) -> None:
        for digest in [d for d in self.shards[peer] if d not in effect.keep]:
            del self.shards[peer][digest]

    def _read_piece(self, peer: str, shard_digest: bytes, offset: int, length: int, digest: bytes) -> bytes | None:
        shard = self.shards[peer].get(shard_digest)
        data = None if shard is None else shard[offset:offset + length]
        if self.check_reads and data is not None and hashlib.blake2b(data, digest_size=32).digest() != digest:
            return None  # what node/shardstore.py's get_piece does with a rotten file
        return data

    def _respond_shard(self, peer: str, inp, effect: RespondShard) -> None:
        client, rid, proto = self._requests.pop((peer, effect.request_id))
        data, error = shardwire.piece_answer(effect, lambda *read: self._read_piece(peer, *read))
        if self.serve_hook is not None:
            data = self.serve_hook(peer, effect.digest, None if error else data)
            if data is Ellipsis:  # the server never answers (the client's own timeout fires)
                return
            data, error = (data, None) if data is not None else (b"", shardwire.NOT_FOUND)
        self._pending.append((client, ResponseReceived(peer, proto, rid, data, error)))
        self._pending.append((peer, ShardSent(effect.request_id)))

    def _run_job(self, peer: str, inp, effect: RunJob) -> None:
        self.jobs_run.append((peer, effect))
        if self.jobs is not None:
            if effect.kind == "unpack":  # the follower's job: done here, from this peer's own shards
                ok, result, error, produced = fake_unpack(self.shards[peer], effect)
            else:
                ok, result, error, produced = self.jobs(peer, effect)
            self.blobs[peer].update(produced)
            self.shards[peer].update(produced)  # a job writes shards to the store (trainer packing)
            self._delayed.append((self.now + self.job_seconds, len(self.jobs_run), peer,
                                  JobFinished(effect.job_id, ok, result, error)))

    def _send_request(self, peer: str, inp, effect: SendRequest) -> None:
        if effect.protocol == protocols.BLOB:  # blobs are served by the runtime from its store, not by the core
            held = self.blobs.get(effect.peer, {}).get(effect.data)
            linked = frozenset((peer, effect.peer)) in self.links and effect.peer not in self.down
            self._pending.append((peer, ResponseReceived(effect.peer, effect.protocol, effect.request_id,
                                                         held or b"", None if held and linked else "not-found")))
        elif frozenset((peer, effect.peer)) in self.links and effect.peer not in self.down:
            self._server_rid += 1
            self._requests[(effect.peer, self._server_rid)] = (peer, effect.request_id, effect.protocol)
            self._pending.append((effect.peer, RequestReceived(peer, effect.protocol, self._server_rid, effect.data)))
        else:
            self._pending.append((peer, ResponseReceived(effect.peer, effect.protocol, effect.request_id,
                                                         error="not connected")))

    def _respond(self, peer: str, inp, effect: Respond) -> None:
        client, rid, proto = self._requests.pop((peer, effect.request_id))
        self._pending.append((client, ResponseReceived(peer, proto, rid, effect.data, effect.error)))

    def _emit(self, peer: str, inp, effect: Emit) -> None:
        self.events.append((peer, effect))

    def _command_result(self, peer: str, inp, effect: CommandResult) -> None:
        self.command_results.append((peer, effect))

    EFFECT_HANDLERS = {
        Publish: _publish, MessageVerdict: _verdict, Subscribe: _subscribe, Unsubscribe: _unsubscribe, Dial: _dial,
        Disconnect: _disconnect, Ban: _disconnect, StoreBlob: _store_blob, StoreShard: _store_shard,
        CheckShards: _check_shards, DropBlobs: _drop_blobs, KeepShards: _keep_shards, RespondShard: _respond_shard,
        RunJob: _run_job, SendRequest: _send_request, Respond: _respond, Emit: _emit, CommandResult: _command_result,
    }
    """Effect class -> handler(net, peer, input, effect), built once; a missing effect is an error."""

    def run_for(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            deadlines = [(c.next_deadline(), p) for p, c in sorted(self.cores.items())
                         if p not in self.down and p not in self.frozen and c.next_deadline() is not None]
            at = min([d for d, _ in deadlines] + [d[0] for d in self._delayed], default=None)
            if at is None or at > end:
                break
            self.now = max(self.now, at)
            self._delayed.sort()
            while self._delayed and self._delayed[0][0] <= self.now:
                _, _, peer, inp = self._delayed.pop(0)
                self.deliver(peer, inp)
            for deadline, peer in deadlines:
                if deadline <= self.now:
                    self.deliver(peer, Tick())
        self.now = end

    def events_named(self, name: str) -> list[tuple[str, dict]]:
        return [(p, dict(e.fields)) for p, e in self.events if e.event == name]


def star_net(n: int, **config) -> tuple[MemoryNet, list[PeerCore]]:
    """n started cores (CoreConfig(**config)) all linked to core 0, at T0."""
    cores = [PeerCore(Identity(bytes([i + 1]) * 32), CoreConfig(**config), seed=i) for i in range(n)]
    net = MemoryNet(cores, T0)
    net.start()
    for other in cores[1:]:
        net.connect(cores[0].peer_id, other.peer_id)
    return net, cores


def announce_small_task(net: "MemoryNet", trainer: PeerCore):
    """`trainer` announces the small task the role tests train (4 completions a prompt, 4 prompts a batch,
    8 a step), which names it as the one trainer: the task."""
    t = task(trainer_keys=(trainer.identity.public_key,),
             params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    return t
