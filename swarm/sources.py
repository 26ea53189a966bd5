"""Whom a download may ask, for one version: who announced which pieces, and whom not to ask for now.

`Sources` is what peers told us (ShardHave bitmaps, heartbeats saying "all of it"): each holder's
pieces and, per piece, how many holders announced it, which is what rarest-first reads. Rarity is
kept as one `PieceSet` per holder count, updated when a holder adds pieces or is forgotten, so
finding the rarest pieces among candidates costs one intersection per count instead of a count per
piece.

`Backoff` is what their answers taught us: (piece, peer) pairs not to ask again until some time (the
peer said busy, or withheld the piece), strikes per peer, and peers skipped for a while after too
many strikes (overloaded, restarted or partitioned: not banned, they may serve again later).
"""

from __future__ import annotations

from typing import Hashable

from swarm.pieceset import EMPTY, PieceSet

Peer = Hashable  # a peer id (str in a node, int in simulator/swarming.py)


class Sources:
    """Each holder's announced pieces; `rarity`: holder count -> the pieces that many announced (only
    counts some piece has); `counts`: piece -> its holder count (which class it is in)."""

    __slots__ = ("n", "holders", "rarity", "counts")

    def __init__(self, n: int) -> None:
        self.n = n
        self.holders: dict[Peer, PieceSet] = {}
        self.rarity: dict[int, PieceSet] = {0: PieceSet.full(n)}
        self.counts = [0] * n

    def add(self, peer: Peer, pieces: PieceSet) -> None:
        """`peer` announced `pieces` (pieces it announced before count once)."""
        old = self.holders.get(peer, EMPTY)
        new = pieces - old
        if new:
            self.holders[peer] = old | new
            self._shift(new, 1)

    def forget(self, peer: Peer) -> None:
        """`peer` is no source any more (it served bytes that failed a check)."""
        pieces = self.holders.pop(peer, EMPTY)
        if pieces:
            self._shift(pieces, -1)

    def rarest(self, candidates: PieceSet, rng) -> int:
        """One of `candidates` (not empty) with the fewest holders, ties broken by `rng`."""
        rarity = self.rarity
        for c in sorted(rarity):
            found = rarity[c] & candidates
            if found:
                return found.pick(self.n, rng)
        return candidates.pick(self.n, rng)

    def _shift(self, pieces: PieceSet, by: int) -> None:
        """Every piece in `pieces` has `by` (1 or -1) more holders. A have usually brings a few pieces,
        moved one by one; a heartbeat or a first have brings many, moved a class at a time."""
        rarity, counts = self.rarity, self.counts
        if 2 * len(pieces) > len(rarity):
            self._shift_classes(pieces, by)
            return
        for i in pieces:
            c = counts[i]
            counts[i] = c + by
            left = rarity[c].discard(i)
            if left:
                rarity[c] = left
            else:
                del rarity[c]
            rarity[c + by] = rarity.get(c + by, EMPTY).add(i)

    def _shift_classes(self, pieces: PieceSet, by: int) -> None:
        rarity, counts, left = self.rarity, self.counts, pieces
        # from the far end, so that a piece moves one class only
        for c in sorted(rarity, reverse=by > 0):
            moved = rarity[c] & left
            if moved:
                rarity[c] = rarity[c] - moved
                rarity[c + by] = rarity.get(c + by, EMPTY) | moved
                if not rarity[c]:
                    del rarity[c]
                for i in moved:
                    counts[i] += by
                left = left - moved
                if not left:  # each piece is in one class: the rest hold none of these
                    break


class Backoff:
    """Pairs and peers not to ask for a while, and the strikes that lead there."""

    __slots__ = ("refused", "by_peer", "strikes", "skip")

    def __init__(self) -> None:
        self.refused: dict[tuple[int, Peer], float] = {}  # (piece, peer) -> not asked for it until then
        self.by_peer: dict[Peer, PieceSet] = {}  # the same pairs by peer: what the scheduler reads
        self.strikes: dict[Peer, int] = {}
        self.skip: dict[Peer, float] = {}  # peers not asked for this version until then

    def refuse(self, index: int, peer: Peer, until: float) -> None:
        self.refused[(index, peer)] = until
        self.by_peer[peer] = self.by_peer.get(peer, EMPTY).add(index)

    def strike(self, index: int, peer: Peer, until: float, limit: int) -> None:
        """`peer` withheld piece `index`: not asked for it until `until`, nor for anything after `limit`
        strikes (which then start again)."""
        self.refuse(index, peer, until)
        self.strikes[peer] = self.strikes.get(peer, 0) + 1
        if self.strikes[peer] >= limit:
            self.skip[peer] = until
            self.strikes[peer] = 0

    def forgive(self, peer: Peer) -> None:
        """`peer` answered well: its strikes so far are forgotten."""
        self.strikes.pop(peer, None)

    def expire(self, now: float) -> None:
        for key in [k for k, t in self.refused.items() if t <= now]:
            del self.refused[key]
            index, peer = key
            left = self.by_peer[peer].discard(index)
            if left:
                self.by_peer[peer] = left
            else:
                del self.by_peer[peer]
        for peer in [p for p, t in self.skip.items() if t <= now]:
            del self.skip[peer]

