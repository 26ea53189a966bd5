"""Per-sender token buckets: how fast one signer may make us do work."""

from __future__ import annotations

from collections import OrderedDict


class TokenBuckets:
    """`rate` tokens/s, at most `burst` banked, per key; at most `capacity` keys (least recent evicted)."""

    def __init__(self, rate: float, burst: float, capacity: int = 4096) -> None:
        self.rate, self.burst, self.capacity = rate, burst, capacity
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str, now: float, cost: float = 1.0) -> bool:
        tokens, last = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
        allowed = tokens >= cost
        if allowed:
            tokens -= cost
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.capacity:
            self._buckets.popitem(last=False)
        return allowed
