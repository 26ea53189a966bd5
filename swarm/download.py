"""One version being downloaded (or seeded), its state split by owner.

A `Download` is the want, its geometry and a few counters, plus five small pieces of state, each
changed only through its own methods, so that each decision of the exchange reads as a few steps:

  - `have` (`Holdings`, here): the pieces we hold, the shards stored, the bytes of open shards;
  - `sources` (`swarm.sources.Sources`): who announced which pieces, and how rare each one is;
  - `flying` (`swarm.inflight.InFlight`): the requests out and how long answers take;
  - `backoff` (`swarm.sources.Backoff`): whom not to ask, for what, until when;
  - `announcer` (`Announcer`, here): when our next ShardHave may go out.

The scheduler (swarm/scheduler.py) reads all five and changes `flying` and `have.opened`; the
uploader (swarm/uploads.py) only reads `have`.
"""

from __future__ import annotations

from swarm.exchangeio import Serve, Store, Want
from swarm.inflight import InFlight
from swarm.pieces import Layout
from swarm.pieceset import EMPTY, PieceSet
from swarm.sources import Backoff, Peer, Sources


class Holdings:
    """What we hold of one version. Checked pieces of a shard not yet complete wait in `parts` (the
    memory `open_shards` bounds) until the shard is whole and handed to the store; `opened` is the
    missing pieces of the shards started (a piece held or asked), the ones asked for first once no
    more shards may open."""

    __slots__ = ("layout", "held", "stored", "parts", "opened")

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.held: PieceSet = EMPTY  # pieces, checked
        self.stored: PieceSet = EMPTY  # shards complete (stored by the runtime)
        self.parts: dict[int, dict[int, bytes]] = {}  # open shard -> {piece: checked bytes}
        self.opened: PieceSet = EMPTY

    def fill(self) -> None:
        """We hold every shard, stored (a version we produced)."""
        self.held = PieceSet.full(self.layout.pieces)
        self.stored = PieceSet.full(self.layout.shards)
        self.parts.clear()
        self.opened = EMPTY

    def found(self, shard: int) -> None:
        """Shard `shard` was already in the store (a restart resumes)."""
        self.stored = self.stored.add(shard)
        self.held = self.held | self.layout.shard_pieces(shard)

    def open(self, shard: int) -> None:
        """A piece of `shard` is held or asked for: its other missing pieces are wanted first."""
        span = self.layout.shard_pieces(shard)
        if not self.opened & span:
            self.opened = self.opened | (span - self.held)

    def keep(self, index: int, data: bytes) -> tuple[bytes, ...] | None:
        """Hold checked piece `index`; when that completes its shard, the shard's pieces in order (the
        shard is then stored, and its pieces leave memory)."""
        self.held = self.held.add(index)
        layout = self.layout
        shard = layout.shard_of(index)
        parts = self.parts.setdefault(shard, {})
        parts[index] = data
        span = layout.pieces_of(shard)
        if len(parts) < len(span):
            self.open(shard)
            return None
        del self.parts[shard]
        self.opened = self.opened - layout.shard_pieces(shard)
        self.stored = self.stored.add(shard)
        # a Serve of an open shard handed out its bytes already; from now on pieces are read from the store
        return tuple(parts[i] for i in span)

    def data(self, index: int) -> bytes | None:
        """A held piece's bytes while its shard is open; None once they are in the store."""
        shard = self.layout.shard_of(index)
        return None if shard in self.stored else self.parts[shard][index]


class Announcer:
    """When our next ShardHave may go out: soon after new pieces, at most one per `have_interval`."""

    __slots__ = ("due", "last")

    def __init__(self) -> None:
        self.due: float | None = None  # None: nothing new to announce
        self.last = float("-inf")

    def soon(self, now: float, interval: float) -> None:
        if self.due is None:
            self.due = max(now, self.last + interval)

    def ready(self, now: float) -> bool:
        return self.due is not None and self.due <= now

    def sent(self, now: float) -> None:
        self.due, self.last = None, now


class Download:
    """One version: the want and its geometry, and the state above (module docstring), each part
    changed by its owner only."""

    def __init__(self, want: Want, layout: Layout, pieces: tuple[bytes, ...], started: float) -> None:
        self.want = want
        self.layout = layout
        self.pieces = pieces  # piece hashes
        self.n = len(pieces)
        self.full = PieceSet.full(self.n)
        self.started = started
        self.finished: float | None = None
        self.checking = True  # waiting for the runtime's answer to Check
        self.bytes_in = 0
        self.rejected = 0
        self.have = Holdings(layout)
        self.sources = Sources(self.n)
        self.flying = InFlight()
        self.backoff = Backoff()
        self.announcer = Announcer()

    @property
    def complete(self) -> bool:
        return self.have.held == self.full

    @property
    def holders(self) -> dict[Peer, PieceSet]:
        """peer -> the pieces it announced (read by swarm/roles/shards.py to dial a holder)."""
        return self.sources.holders

    @property
    def skip(self) -> dict[Peer, float]:
        """Peers not asked for this version for now."""
        return self.backoff.skip

    def count(self) -> int:
        return len(self.have.held)

    def shards_held(self) -> int:
        return len(self.have.stored)

    def store(self, shard: int, parts: tuple[bytes, ...]) -> Store:
        """Shard `shard` is complete: hand its pieces to the store."""
        return Store(self.want.root, shard, self.want.hashes[shard], parts)

    def serving(self, index: int) -> Serve:
        """What to send for held piece `index`."""
        layout = self.layout
        shard = layout.shard_of(index)
        return Serve(self.pieces[index], self.want.hashes[shard], layout.offset(index), layout.length(index),
                     self.have.data(index))
