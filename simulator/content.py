"""Virtual blobs and weight shards: what the simulated peers store, serve and hash, without the bytes.

A thousand peers each holding a 50 MB policy would need 50 GB; the simulator instead keeps one
world-wide `Content` registry that knows, for every digest a job produced, how to make its bytes
(a 32-byte label followed by zeros: distinct content, cheap to build) and what it stands for (a
rollout batch's facts, a policy version's root), plus one `NodeStore` per peer with the digests that
peer holds (its data dir: it survives a crash-and-restart of the same identity, like node/'s blob and
shard directories).

Bytes are made only when they travel (a `/swarm/blob/1` or `/swarm/shard/2` answer), so a transfer
still costs its full length on the flow model and the receiving core still checks length and hash.
Shard bytes are cached (bounded by total size) and the cache remembers each object's digest:
`Content.hasher` is the memoised hash the simulator hands to every core's `ShardExchange`, so the
same bytes object is hashed once however many peers receive it. Bytes an adversary made (a corrupted
shard) are a new object and are hashed for real.

Every table here is bounded (LRU); what falls out is regenerated from its recipe, or, for a recipe
that fell out, answered as missing.

In a scenario whose roles' jobs run for real (simulator/realjobs.py) the blobs and shards those jobs
write are real files: `add_file` registers them, and their bytes are read from disk (and re-hashed)
when they travel, through the same cache.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gossip.hashing import blake2b256

MAX_RECIPES = 400_000  # blobs and shards the world remembers how to make (about 100 bytes each)
SHARD_CACHE_BYTES = 96 << 20  # shard bytes kept built (shared by every peer that serves them)
NODE_BLOBS = 4096  # blobs one peer keeps (LRU), like a bounded blob store
NODE_SHARDS = 65536  # shards one peer keeps at most (the core's KeepShards normally keeps far fewer)
NODE_SEEN = 8192  # batch contents one peer's verify jobs remember (duplicate check), like trainer/verifyjob.py
NODE_GENERATED = 4096  # prompt slices a worker's job process remembers (trainer/generated.py keeps 64 versions)
GC_GRACE = 300.0  # KeepShards spares shards younger than this, like node/shardstore.py


def label_of(*parts: Any) -> bytes:
    """A 32-byte label from parts (str, bytes, int, tuples of those), stable across processes."""
    h = hashlib.blake2b(digest_size=32)
    for part in parts:
        h.update(repr(part).encode() if not isinstance(part, (bytes, bytearray)) else bytes(part))
        h.update(b"\x00")
    return h.digest()


def synth(label: bytes, size: int) -> bytes:
    """The bytes of virtual content: its label, then zeros, `size` bytes in all."""
    return label[:size] + bytes(max(0, size - len(label)))


@dataclass(frozen=True)
class Recipe:
    label: bytes
    size: int
    meta: Any = None  # what the content stands for (rolejobs.Batch, rolejobs.Weights) or None
    servable: bool = True  # False: an id only (weights blobs never travel; versions go as shards)
    path: str = ""  # real content (simulator/realjobs.py): the file that holds its bytes


class Content:
    """Every digest the simulated world produced: how to build its bytes and what it means."""

    def __init__(self, max_recipes: int = MAX_RECIPES, cache_bytes: int = SHARD_CACHE_BYTES) -> None:
        self.max_recipes = max_recipes
        self.cache_bytes = cache_bytes
        self.recipes: OrderedDict[bytes, Recipe] = OrderedDict()
        self._cache: OrderedDict[bytes, bytes] = OrderedDict()  # digest -> built bytes
        self._cached = 0
        self._memo: dict[int, tuple[bytes, bytes]] = {}  # id(bytes object in the cache) -> (object, digest)
        self.hashed_bytes = 0  # bytes hashed for real (not memoised): a cost figure

    # ---- making content

    def make(self, label: bytes, size: int, meta: Any = None, keep: bool = False) -> bytes:
        """Register content `label`/`size`; its digest is the blake2b-256 of its bytes."""
        data = synth(label, size)
        digest = blake2b256(data)
        self.hashed_bytes += size
        self._remember(digest, Recipe(label, size, meta))
        if keep:
            self._put_cache(digest, data)
        return digest

    def name(self, digest: bytes, size: int, meta: Any = None) -> bytes:
        """Register an id that names content never sent over the network (a weights blob)."""
        self._remember(digest, Recipe(b"", size, meta, servable=False))
        return digest

    def add_file(self, digest: bytes, path: str, size: int) -> bytes:
        """Register content a real job wrote (its bytes are the file at `path`, already hashed by the
        job's blob store): it travels like any other, read from disk when it is sent."""
        self._remember(bytes(digest), Recipe(b"", size, None, path=path))
        return bytes(digest)

    def is_file(self, digest: bytes) -> bool:
        r = self.recipes.get(bytes(digest))
        return r is not None and bool(r.path)

    def _remember(self, digest: bytes, recipe: Recipe) -> None:
        self.recipes[digest] = recipe
        self.recipes.move_to_end(digest)
        while len(self.recipes) > self.max_recipes:
            self.recipes.popitem(last=False)

    def meta(self, digest: bytes) -> Any:
        r = self.recipes.get(bytes(digest))
        return None if r is None else r.meta

    def size(self, digest: bytes) -> int | None:
        r = self.recipes.get(bytes(digest))
        return None if r is None else r.size

    # ---- bytes on demand

    def data(self, digest: bytes) -> bytes | None:
        """The bytes of `digest`, or None if nobody can make them (unknown, forgotten, not servable)."""
        digest = bytes(digest)
        data = self._cache.get(digest)
        if data is not None:
            self._cache.move_to_end(digest)
            return data
        r = self.recipes.get(digest)
        if r is None or not r.servable:
            return None
        if r.path:
            try:
                with open(r.path, "rb") as fh:
                    data = fh.read()
            except OSError:
                return None
            self.hashed_bytes += len(data)
            if len(data) != r.size or blake2b256(data) != digest:  # re-hashed on read, like node/'s stores
                return None
        else:
            data = synth(r.label, r.size)
        self._put_cache(digest, data)
        return data

    def piece(self, shard: bytes, offset: int, length: int, digest: bytes | None = None) -> bytes | None:
        """Bytes [offset, offset + length) of shard `shard` (a piece), or None if the shard cannot be
        made. Cached under the piece's own hash (`digest` when the caller knows it), so every peer that
        serves or receives it shares one object and `hasher` finds it memoised."""
        if digest is not None:
            data = self._cache.get(bytes(digest))
            if data is not None and len(data) == length:
                self._cache.move_to_end(bytes(digest))
                return data
        whole = self.data(shard)
        if whole is None or offset + length > len(whole):
            return None
        data = whole[offset:offset + length] if (offset, length) != (0, len(whole)) else whole
        if data is not whole:
            actual = blake2b256(data)
            self.hashed_bytes += length
            if actual in self._cache and len(self._cache[actual]) == length:
                return self._cache[actual]
            self._put_cache(actual, data)
        return data

    def _put_cache(self, digest: bytes, data: bytes) -> None:
        if digest in self._cache or len(data) > self.cache_bytes:
            return
        self._cache[digest] = data
        self._memo[id(data)] = (data, digest)
        self._cached += len(data)
        while self._cached > self.cache_bytes:
            old_digest, old = self._cache.popitem(last=False)
            self._memo.pop(id(old), None)
            self._cached -= len(old)

    def hasher(self, data: bytes) -> bytes:
        """blake2b-256, memoised for the bytes objects this registry built (ShardExchange's hasher)."""
        entry = self._memo.get(id(data))
        if entry is not None and entry[0] is data:
            return entry[1]
        self.hashed_bytes += len(data)
        return blake2b256(data)


@dataclass
class NodeStore:
    """One peer's blob and shard directories (digests only); survives restarts of the same peer."""

    blobs: OrderedDict = field(default_factory=OrderedDict)  # digest -> None, LRU
    shards: OrderedDict = field(default_factory=OrderedDict)  # digest -> virtual time stored
    seen: OrderedDict = field(default_factory=OrderedDict)  # batch contents verified (job process memory)
    published: dict = field(default_factory=dict)  # task id -> (version, weights id) a trainer's jobs made last
    generated: OrderedDict = field(default_factory=OrderedDict)  # (task, worker, version, prompts) generated

    def record_generated(self, key) -> None:
        self.generated[key] = None
        while len(self.generated) > NODE_GENERATED:
            self.generated.popitem(last=False)

    def add_blob(self, digest: bytes) -> None:
        self.blobs[bytes(digest)] = None
        self.blobs.move_to_end(bytes(digest))
        while len(self.blobs) > NODE_BLOBS:
            self.blobs.popitem(last=False)

    def drop_blobs(self, digests) -> None:
        for digest in digests:
            self.blobs.pop(bytes(digest), None)

    def has_blob(self, digest: bytes) -> bool:
        return bytes(digest) in self.blobs

    def add_shard(self, digest: bytes, now: float) -> None:
        self.shards[bytes(digest)] = now
        self.shards.move_to_end(bytes(digest))
        while len(self.shards) > NODE_SHARDS:
            self.shards.popitem(last=False)

    def has_shard(self, digest: bytes) -> bool:
        return bytes(digest) in self.shards

    def gc(self, keep, now: float, grace: float = GC_GRACE) -> int:
        """KeepShards: drop shards not in `keep` older than `grace`; how many were dropped."""
        drop = [d for d, at in self.shards.items() if d not in keep and now - at >= grace]
        for d in drop:
            del self.shards[d]
        return len(drop)

    def remember_seen(self, content: bytes) -> None:
        self.seen[content] = None
        while len(self.seen) > NODE_SEEN:
            self.seen.popitem(last=False)
