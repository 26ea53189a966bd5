"""`PieceSet`: a set of piece (or shard) indices, as an immutable value.

The exchange keeps several such sets per version (pieces held, asked for, of open shards, announced
by each peer, in each rarity class) and combines them on every scheduling decision, which a large
simulation makes millions of times. So a set is an int bitmask underneath (bit i is index i): a
union, intersection or difference is one big-int operation however many pieces a version has, and
the wire bitmap (`ShardHave.bitmap`) is the same integer's little-endian bytes. Wrapping the int
keeps the bit twiddling in this file, and immutability lets one set be shared (a holder's
announcement, a rarity class) with no owner's change leaking into another's: to change a set, bind
the name to a new one (`held = held.add(i)`).

Operands of `|`, `&` and `-` must be PieceSets (no type check: these run in the hot loop).
"""

from __future__ import annotations

from typing import Iterable, Iterator


class PieceSet:
    __slots__ = ("_bits",)

    def __init__(self, indices: Iterable[int] = ()) -> None:
        bits = 0
        for i in indices:
            if i < 0:
                raise ValueError(f"a piece index is not negative: {i}")
            bits |= 1 << i
        _set_bits(self, bits)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a PieceSet is immutable: bind a new one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a PieceSet is immutable")

    # ---- making one

    @staticmethod
    def from_mask(mask: int) -> PieceSet:
        """The set whose members are the set bits of `mask` (bit i: index i)."""
        if mask < 0:
            raise ValueError("a mask is not negative")
        return _make(mask)

    @staticmethod
    def full(n: int) -> PieceSet:
        """Every index in range(n)."""
        return _make((1 << n) - 1)

    @staticmethod
    def span(indices: range) -> PieceSet:
        """Every index of a contiguous range (a shard's pieces)."""
        if not indices:
            return EMPTY
        return _make(((1 << len(indices)) - 1) << indices.start)

    @staticmethod
    def from_bitmap(bitmap: bytes, n: int) -> PieceSet:
        """A wire bitmap (bit i of byte i // 8, least significant first) of a version of `n` pieces;
        bits at n and beyond are ignored."""
        return _make(int.from_bytes(bitmap[: (n + 7) // 8], "little") & ((1 << n) - 1))

    # ---- reading it

    @property
    def mask(self) -> int:
        return self._bits

    def bitmap(self, n: int) -> bytes:
        """The wire bitmap for a version of `n` pieces, as `ShardHave.holds` reads it."""
        return self._bits.to_bytes((n + 7) // 8, "little")

    def __contains__(self, index: int) -> bool:
        return index >= 0 and (self._bits >> index) & 1 == 1

    def __len__(self) -> int:
        return self._bits.bit_count()

    def __bool__(self) -> bool:
        return self._bits != 0

    def __iter__(self) -> Iterator[int]:
        """The members, lowest first."""
        bits = self._bits
        while bits:
            low = bits & -bits
            yield low.bit_length() - 1
            bits ^= low

    def pick(self, n: int, rng) -> int:
        """A member (the set is not empty) chosen by `rng`, for a version of `n` pieces: the first at or
        after a random start, wrapping. One draw and a few big-int operations, whatever the size (a
        uniform draw among the members would enumerate them; this favours members after gaps a little,
        which rarest-first does not mind)."""
        bits = self._bits
        start = rng.randrange(n)
        high = bits >> start
        if high:
            return start + (high & -high).bit_length() - 1
        return (bits & -bits).bit_length() - 1

    # ---- new sets from it

    def add(self, index: int) -> PieceSet:
        """This set and `index` (a new set)."""
        s = _new(PieceSet)
        _set_bits(s, self._bits | (1 << index))
        return s

    def discard(self, index: int) -> PieceSet:
        """This set without `index`, whether or not it was in (a new set)."""
        s = _new(PieceSet)
        _set_bits(s, self._bits & ~(1 << index))
        return s

    def missing(self, n: int) -> PieceSet:
        """The indices in range(n) that are not in this set."""
        return _make(((1 << n) - 1) & ~self._bits)

    def __or__(self, other: PieceSet) -> PieceSet:
        s = _new(PieceSet)
        _set_bits(s, self._bits | other._bits)
        return s

    def __and__(self, other: PieceSet) -> PieceSet:
        s = _new(PieceSet)
        _set_bits(s, self._bits & other._bits)
        return s

    def __sub__(self, other: PieceSet) -> PieceSet:
        s = _new(PieceSet)
        _set_bits(s, self._bits & ~other._bits)
        return s

    def __le__(self, other: PieceSet) -> bool:
        return self._bits & ~other._bits == 0

    # ---- a value

    def __eq__(self, other: object) -> bool:
        if type(other) is not PieceSet:
            return NotImplemented
        return self._bits == other._bits

    def __hash__(self) -> int:
        return hash(("PieceSet", self._bits))

    def __repr__(self) -> str:
        return f"PieceSet({sorted(self)})" if self._bits else "PieceSet()"

    def __reduce__(self):
        return PieceSet.from_mask, (self._bits,)


_new = object.__new__
_set_bits = PieceSet._bits.__set__  # the slot's own setter: how a new set gets its bits past __setattr__


def _make(bits: int) -> PieceSet:
    s = _new(PieceSet)
    _set_bits(s, bits)
    return s


EMPTY = PieceSet()
