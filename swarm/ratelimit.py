"""Per-sender token buckets: how fast one signer may make us do work."""

from __future__ import annotations

from collections import OrderedDict


class TokenBuckets:
    """`rate` tokens/s, at most `burst` banked, per key; at most `capacity` keys (least recent evicted)."""

    def __init__(self, rate: float, burst: float, capacity: int = 4096) -> None:
        self.rate, self.burst, self.capacity = rate, burst, capacity
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()

    def take(self, key: str, now: float, cost: float = 1.0) -> bool:
        buckets = self._buckets
        entry = buckets.get(key)  # [tokens, when]: updated in place, moved to the end (most recent)
        if entry is None:
            tokens, elapsed = self.burst, 0.0
            entry = buckets[key] = [tokens, now]
            while len(buckets) > self.capacity:
                buckets.popitem(last=False)
        else:
            buckets.move_to_end(key)
            tokens, elapsed = entry[0], now - entry[1]
        if elapsed > 0.0:
            tokens += elapsed * self.rate
        if tokens > self.burst:
            tokens = self.burst
        allowed = tokens >= cost
        if allowed:
            tokens -= cost
        entry[0], entry[1] = tokens, now
        return allowed
