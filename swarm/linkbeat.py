"""Our heartbeat for links (swarm/pings.py), signed once for a burst of them.

A peer that joins opens its links within a second or two, and a peer a crowd dials answers each of
them: every link's first ping (and the answer to one) carries our heartbeat, and signing one per link
was 8% of a 3,000-peer simulated run's time (py-spy), with about as much again spent opening them at
the other ends. A signed beat is reused for links opened while it is younger than our heartbeat interval (what the
beat itself says the neighbour may wait for the next) and at most `REUSE_FOR`, and only while no
heartbeat was signed since (the seq a neighbour judges it by) and our tasks, versions and addresses
are what it says. (The pace and swarm size it declares drift with every peer we count; within the
window the drift is a few peers.) A neighbour that already has it (a second link within the window)
takes it as stale, which costs nothing. A shuffle's beat is always signed now (swarm/pings.py).
"""

from __future__ import annotations

from typing import Callable

REUSE_FOR = 10.0


class LinkBeat:
    def __init__(self) -> None:
        self._key: tuple | None = None
        self._at = 0.0
        self._wire = b""
        self.signed = 0  # beats signed for links
        self.reused = 0  # links that got one signed earlier

    def get(self, now: float, interval: float, key: tuple, sign: Callable[[], bytes], seq: Callable[[], int],
            fresh: bool = False) -> bytes:
        """The beat for a link now: the last one if `key` (what it says, but its seq) and `seq()` are
        unchanged and it is young enough, else `sign()`'s; `fresh` (a shuffle, whose point is a sample
        of our links as they are now, newer than the one the neighbour took): always `sign()`'s."""
        if not fresh and self._key == (key, seq()) and now - self._at < min(interval, REUSE_FOR):
            self.reused += 1
            return self._wire
        self._wire = sign()
        self._key, self._at = (key, seq()), now
        self.signed += 1
        return self._wire
