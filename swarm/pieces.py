"""Where a version's pieces lie (their bytes on `/swarm/shard/2`: swarm/shardwire.py).

A version's compressed stream is cut twice (trainer/weights): into shards of `shard_size` bytes, the
unit a peer stores, names on disk and unpacks, and into pieces of `piece_size` bytes (a divisor of
`shard_size`), the unit peers request, verify and relay. Both hash lists are in the signed
manifest. Pieces exist so a peer can pass on each checked piece as soon as it has it instead of
after a whole shard: how long a unit takes per hop, while every link is shared by several
transfers, is what sets how fast a version crosses a large swarm (simulator/swarming.py: 1 MiB
shards moved whole reach 95% of 100 peers at 1.7x size/bandwidth; 256 KiB pieces of them at 1.3x).

Pieces are a uniform cut of the stream: piece p holds bytes [p * piece_size, (p + 1) * piece_size)
(the last may be shorter), so shard s holds pieces [s * per_shard, (s + 1) * per_shard).
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.pieceset import PieceSet

DEFAULT_PIECE_SIZE = 256 * 1024  # the trainer's pack, the simulator's and the benchmarks' (task param piece_size)


def default_piece_size(shard_size: int) -> int:
    """DEFAULT_PIECE_SIZE where it divides `shard_size`, else the whole shard is one piece."""
    return DEFAULT_PIECE_SIZE if shard_size % DEFAULT_PIECE_SIZE == 0 else shard_size


@dataclass(frozen=True)
class Layout:
    """The piece geometry of one version, from its shard sizes and piece size."""

    shard_sizes: tuple[int, ...]
    piece_size: int

    def __post_init__(self) -> None:
        sizes, p = self.shard_sizes, self.piece_size
        if not sizes or any(s <= 0 for s in sizes) or p <= 0:
            raise ValueError("a version has at least one shard, every size positive")
        if len(sizes) > 1 and (sizes[0] % p or any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0]):
            raise ValueError("every shard but the last has one size, a multiple of the piece size")

    @property
    def shards(self) -> int:
        return len(self.shard_sizes)

    @property
    def total(self) -> int:
        return sum(self.shard_sizes)

    @property
    def pieces(self) -> int:
        return -(-self.total // self.piece_size)

    @property
    def per_shard(self) -> int:
        """Pieces in every shard but (perhaps) the last."""
        return -(-self.shard_sizes[0] // self.piece_size)

    def shard_of(self, piece: int) -> int:
        return piece // self.per_shard

    def pieces_of(self, shard: int) -> range:
        return range(shard * self.per_shard, min((shard + 1) * self.per_shard, self.pieces))

    def offset(self, piece: int) -> int:
        """Where piece `piece` starts inside its shard."""
        return (piece % self.per_shard) * self.piece_size

    def length(self, piece: int) -> int:
        return min(self.piece_size, self.total - piece * self.piece_size)

    def shard_pieces(self, shard: int) -> PieceSet:
        return PieceSet.span(self.pieces_of(shard))


def bitmap_of(mask: int, n: int) -> bytes:
    """Bit i of byte i // 8 (least significant first) is piece i, as `ShardHave.holds` reads it."""
    return PieceSet.from_mask(mask).bitmap(n)


def mask_of(bitmap: bytes, n: int) -> int:
    return PieceSet.from_bitmap(bitmap, n).mask
