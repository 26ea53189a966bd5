"""The virtual clock: a heap of (time, seq, callback, args), run in order, no wall clock anywhere.

`seq` breaks ties in scheduling order, so two events at the same instant always run in the same order
(a heap of bare times would compare callbacks, and their order would depend on memory addresses).
Callbacks are plain functions plus an argument tuple: no closures or event objects on the hot path.
"""

from __future__ import annotations

import heapq
from typing import Callable


class EventLoop:
    __slots__ = ("now", "_heap", "_seq", "events_run", "stopped")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.events_run = 0
        self.stopped = False

    def at(self, when: float, fn: Callable, *args) -> None:
        """Run `fn(*args)` at virtual time `when` (never earlier than now)."""
        if when < self.now:
            when = self.now
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, fn, args))

    def after(self, delay: float, fn: Callable, *args) -> None:
        self.at(self.now + delay, fn, *args)

    def pending(self) -> int:
        return len(self._heap)

    def run(self, until: float, on_progress: Callable[[float], None] | None = None,
            progress_every: float = 1.0) -> None:
        """Run events with time <= `until`, then set the clock to `until`."""
        heap, pop = self._heap, heapq.heappop
        next_report = self.now + progress_every
        count = 0
        while heap and not self.stopped:
            when = heap[0][0]
            if when > until:
                break
            _, _, fn, args = pop(heap)
            self.now = when
            count += 1
            fn(*args)
            if on_progress is not None and when >= next_report:
                on_progress(when)
                next_report = when + progress_every
        self.events_run += count
        if not self.stopped:
            self.now = max(self.now, until)
