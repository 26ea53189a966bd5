"""When the core next looks for links to dial: the `maintain` timer, parked while there is nothing to do.

A relay whose links are full has nothing to dial and no shards to fetch, yet woke every
`maintain_interval` to find that out: in a 10,000-peer swarm of relays those empty wake-ups were about
one event in six of the simulator's run. So a maintain pass that finds a relay's links full parks
the timer, and the next closed link wakes it on the beat it would have kept. A peer with a role keeps
the timer running: its maintain pass also retries dials to the holders of the shards it fetches
(swarm/roles/shards.py `reach_holders`).
"""

from __future__ import annotations

import math

from swarm.timers import Timers

NAME = "maintain"


class MaintainClock:
    def __init__(self, timers: Timers, interval: float) -> None:
        self.timers = timers
        self.interval = interval
        self.parked: float | None = None  # when the timer would next have fired, while parked

    def start(self, now: float) -> None:
        self.parked = None
        self.timers.set(NAME, now + self.interval)

    def ran(self, now: float, idle: bool) -> None:
        """A maintain pass ran at `now`; `idle`: it found nothing to do, nor will until a link closes."""
        due = now + self.interval
        if idle:
            self.parked = due
        else:
            self.timers.set(NAME, due)

    def link_closed(self, now: float) -> None:
        """Resume a parked timer on its old beat: the first due time not before `now`."""
        at = self.parked
        if at is None:
            return
        self.parked = None
        if at < now:
            at += math.ceil((now - at) / self.interval) * self.interval
        self.timers.set(NAME, at)
