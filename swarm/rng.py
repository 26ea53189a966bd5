"""A small seeded PRNG owned by each peer.

`swarm/` may not use the global `random` (nor import the module: one seed must drive a simulation,
and a stray global call would break byte-identical traces). SplitMix64 is tiny, fast in pure Python,
and statistically fine for choosing peers and jittering timers.
"""

from __future__ import annotations

import hashlib
from typing import Sequence, TypeVar

T = TypeVar("T")
_MASK = (1 << 64) - 1


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from any printable parts, stable across processes (never Python's hash())."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Rng:
    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK

    def next_u64(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def random(self) -> float:
        """Uniform in [0, 1)."""
        return (self.next_u64() >> 11) / float(1 << 53)

    def randrange(self, n: int) -> int:
        if n <= 0:
            raise ValueError("randrange of an empty range")
        limit = (1 << 64) - ((1 << 64) % n)  # rejection sampling: no modulo bias
        while True:
            x = self.next_u64()
            if x < limit:
                return x % n

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.random()

    def choice(self, items: Sequence[T]) -> T:
        return items[self.randrange(len(items))]

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        pool = list(items)
        n = len(pool)
        k = min(k, n)
        # randrange and next_u64 inlined, drawing exactly the same numbers: the simulator samples gossip
        # targets for every peer's IHAVE each heartbeat, and the two calls per draw were most of the cost.
        state = self._state
        for i in range(k):
            span = n - i
            limit = (1 << 64) - ((1 << 64) % span)
            while True:
                state = (state + 0x9E3779B97F4A7C15) & _MASK
                z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
                x = z ^ (z >> 31)
                if x < limit:
                    break
            j = i + x % span
            pool[i], pool[j] = pool[j], pool[i]
        self._state = state
        return pool[:k]

    def sample_positions(self, n: int, k: int) -> list[int]:
        """The positions `sample` picks from a sequence of `n` items, drawing the same numbers, without the
        sequence: the simulator samples a few of 10,000 live peers for each peer that starts."""
        moved: dict[int, int] = {}
        out = []
        for i in range(min(k, n)):
            j = i + self.randrange(n - i)
            at_i, at_j = moved.get(i, i), moved.get(j, j)
            moved[i], moved[j] = at_j, at_i
            out.append(at_j)
        return out

    def shuffle(self, items: list[T]) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.randrange(i + 1)
            items[i], items[j] = items[j], items[i]

    def fork(self, *label: object) -> "Rng":
        """An independent stream for a sub-component, derived deterministically."""
        return Rng(stable_seed(self.next_u64(), *label))
