"""The piece requests one download has out, and how long its answers take.

Kept in one place because four things must agree on it: the per-peer and per-download bounds (how
many requests each peer has, counting endgame losers that are still sending), the timeouts (every
request's deadline), the endgame (which requests are late against this download's mean answer
time) and the answers themselves (an answer is ours only if its request is still out). Every change
goes through a method here, so `count` and `asked` never drift from `pieces`.
"""

from __future__ import annotations

from typing import Hashable

from swarm.pieceset import EMPTY, PieceSet

Peer = Hashable


class InFlight:
    """The requests out for one download (module docstring: why they are kept in one place)."""

    __slots__ = ("pieces", "asked", "count", "abandoned", "answered", "answer_s", "endgame_at")

    def __init__(self) -> None:
        self.pieces: dict[int, dict[Peer, float]] = {}  # piece -> {peer: deadline}
        self.asked: PieceSet = EMPTY  # the pieces in `pieces`
        self.count = 0  # requests in `pieces` (an endgame duplicate counts twice)
        self.abandoned: dict[tuple[int, Peer], float] = {}  # endgame losers still sending: (piece, peer) -> deadline
        self.answered = 0  # pieces received, and the seconds their requests took (the endgame's yardstick)
        self.answer_s = 0.0
        self.endgame_at: float | None = None  # when an in-flight request becomes slow enough to double

    def ask(self, index: int, peer: Peer, deadline: float) -> None:
        self.pieces.setdefault(index, {})[peer] = deadline
        self.asked = self.asked.add(index)
        self.count += 1

    def end(self, index: int, peer: Peer) -> float | None:
        """The request for `index` to `peer` is answered: its deadline, or None when it was not out (an
        endgame duplicate whose twin won, or one that already expired)."""
        asked = self.pieces.get(index)
        if asked is None or peer not in asked:
            return None
        deadline = asked.pop(peer)
        self.count -= 1
        if not asked:
            del self.pieces[index]
            self.asked = self.asked.discard(index)
        return deadline

    def release(self, index: int, peer: Peer) -> bool:
        """An abandoned request ended (the peer is free again); False if it was not one."""
        return self.abandoned.pop((index, peer), None) is not None

    def won(self, index: int, took: float) -> None:
        """Piece `index` arrived, its request having taken `took` seconds: the duplicates still out
        for it are abandoned (they count against their peers until they end)."""
        self.answered += 1
        self.answer_s += took
        others = self.pieces.pop(index, {})
        for other, deadline in others.items():
            self.abandoned[(index, other)] = deadline
            self.count -= 1
        self.asked = self.asked.discard(index)

    def late_after(self, slow: float, timeout: float) -> float:
        """How long a request may be out before the endgame doubles it: `slow` times the mean answer
        time, or half the timeout before the first answer."""
        return slow * self.answer_s / self.answered if self.answered else timeout / 2

    def load(self) -> dict[Peer, int]:
        """peer -> its requests out, abandoned ones included."""
        load: dict[Peer, int] = {}
        for asked in self.pieces.values():
            for p in asked:
                load[p] = load.get(p, 0) + 1
        for _, p in self.abandoned:
            load[p] = load.get(p, 0) + 1
        return load

    def stop(self) -> None:
        """Nothing is asked any more (we hold everything); abandoned requests still end on their own."""
        self.pieces.clear()
        self.asked = EMPTY
        self.count = 0

    def finish(self) -> None:
        """Every piece is held: nothing is out that we still wait for."""
        self.stop()
        self.abandoned.clear()

    def expire(self, now: float) -> list[tuple[int, Peer]]:
        """The (piece, peer) requests past their deadline, in order; abandoned ones past theirs are
        forgotten."""
        expired = [(i, p) for i, asked in sorted(self.pieces.items()) for p, t in sorted(asked.items()) if t <= now]
        for key in [k for k, t in self.abandoned.items() if t <= now]:
            del self.abandoned[key]
        return expired
