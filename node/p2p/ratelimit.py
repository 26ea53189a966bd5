"""Token bucket with backpressure for outbound gossip.

py-libp2p's gossipsub drops messages when a peer's 32-slot send queue is full, and its own spam
protection (10 msg/s per topic) drops at the receiver. We turn that off and instead make publishers
*wait*: a caller that publishes faster than ``rate`` is slowed down rather than silently losing
messages. About 100 msg/s of 1 KB is what 2 cores sustain (DESIGN.md), so the default leaves headroom.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


class TokenBucket:
    """``rate`` tokens/s, at most ``burst`` stored. ``acquire()`` waits in FIFO order for a token."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = trio.current_time) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last: float | None = None
        # trio.Lock is fair (FIFO), so waiting publishers are served in arrival order.
        self._lock = trio.Lock()
        self.waited_seconds = 0.0  # total time callers spent blocked: a cheap backpressure metric

    def _refill(self) -> None:
        now = self._clock()
        if self._last is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is available right now (never waits)."""
        self._refill()
        if self._tokens >= 1.0 and not self._lock.locked():
            self._tokens -= 1.0
            return True
        return False

    async def acquire(self) -> None:
        """Wait until a token is available, then take it."""
        async with self._lock:
            self._refill()
            if self._tokens < 1.0:
                wait = (1.0 - self._tokens) / self.rate
                self.waited_seconds += wait
                await trio.sleep(wait)
                self._refill()
            self._tokens -= 1.0
