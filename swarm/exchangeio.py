"""What goes into the shard exchange and what comes out of it: plain frozen values, no behaviour.

`Want` names a version to download; the actions (`Fetch`, `Store`, `Check`, `Announce`, `Done`,
`Blame`) are what `ShardExchange` asks its runtime to do, and `Serve` is its answer to a piece
request. They live apart from the exchange so the runtimes that carry them out
(`swarm/roles/shards.py`, `simulator/swarming.py`, the tests) read them without the decision code;
`swarm.exchange` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.pieces import Layout


@dataclass(frozen=True)
class Want:
    """A version (or a trainer checkpoint) to download (or, with `held=True`, one we produced and hold in full): its shards
    (hash and size each) and its pieces (`piece_size`, and the hashes in stream order; with no piece
    hashes, every shard is one piece)."""

    root: bytes
    task_id: str
    version: int
    hashes: tuple[bytes, ...]
    sizes: tuple[int, ...]
    piece_size: int = 0
    pieces: tuple[bytes, ...] = ()
    # A trainer checkpoint rather than a policy version: heartbeats name versions, not checkpoints, so
    # it is never found by (task, version) and its holders are only those that announce its root.
    state: bool = False

    def layout(self) -> Layout:
        if not self.pieces:
            return Layout(self.sizes, self.sizes[0])
        return Layout(self.sizes, self.piece_size)

    def piece_hashes(self) -> tuple[bytes, ...]:
        return self.pieces or self.hashes


@dataclass(frozen=True)
class Fetch:
    peer: str
    root: bytes
    index: int  # a piece
    timeout: float


@dataclass(frozen=True)
class Store:
    """Shard `index` is complete: `parts` are its checked pieces in order (joined, they hash to `digest`
    when the manifest is honest; the runtime's store checks that before it writes)."""

    root: bytes
    index: int
    digest: bytes
    parts: tuple[bytes, ...]


@dataclass(frozen=True)
class Check:
    root: bytes
    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class Announce:
    root: bytes
    task_id: str
    version: int
    bitmap: bytes


@dataclass(frozen=True)
class Done:
    root: bytes


@dataclass(frozen=True)
class Blame:
    peer: str
    reason: str  # gossip.errors code: bad-shard, truncated, withheld
    detail: str


@dataclass(frozen=True)
class Serve:
    """What to answer a piece request with: bytes at `offset` of stored shard `shard` (re-read and
    checked against `digest` by the runtime), or, for a shard not complete yet, the checked `data`."""

    digest: bytes  # the piece's hash
    shard: bytes  # its shard's hash
    offset: int
    length: int
    data: bytes | None = None
