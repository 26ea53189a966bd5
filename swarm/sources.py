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

from typing import Hashable, Iterable

from swarm.pieceset import EMPTY, PieceSet

Peer = Hashable  # a peer id (str in a node, int in simulator/swarming.py)


class Sources:
    """Each holder's announced pieces, and `rarity`: holder count -> the pieces that many announced."""

    __slots__ = ("n", "holders", "rarity")

    def __init__(self, n: int) -> None:
        self.n = n
        self.holders: dict[Peer, PieceSet] = {}
        self.rarity: dict[int, PieceSet] = {0: PieceSet.full(n)}

    def add(self, peer: Peer, pieces: PieceSet) -> None:
        """`peer` announced `pieces` (pieces it announced before count once)."""
        old = self.holders.get(peer, EMPTY)
        new = pieces - old
        if new:
            self.holders[peer] = old | new
            self._shift_up(new)

    def forget(self, peer: Peer) -> None:
        """`peer` is no source any more (it served bytes that failed a check)."""
        pieces = self.holders.pop(peer, EMPTY)
        if pieces:
            self._shift_down(pieces)

    def rarest(self, candidates: PieceSet, rng) -> int:
        """One of `candidates` (not empty) with the fewest holders, ties broken by `rng`."""
        rarity = self.rarity
        for c in sorted(rarity):
            found = rarity[c] & candidates
            if found:
                return found.pick(self.n, rng)
        return candidates.pick(self.n, rng)

    def _shift_up(self, new: PieceSet) -> None:
        """Every piece in `new` has one more holder."""
        rarity = self.rarity
        for c in sorted(rarity, reverse=True):  # highest first, so a piece moves up one class only
            moved = rarity[c] & new
            if moved:
                rarity[c] = rarity[c] - moved
                rarity[c + 1] = rarity.get(c + 1, EMPTY) | moved
                if not rarity[c]:
                    del rarity[c]

    def _shift_down(self, gone: PieceSet) -> None:
        """Every piece in `gone` has one holder fewer."""
        rarity = self.rarity
        for c in sorted(rarity):  # lowest first, so a piece moves down one class only
            moved = rarity[c] & gone
            if moved and c > 0:
                rarity[c] = rarity[c] - moved
                rarity[c - 1] = rarity.get(c - 1, EMPTY) | moved
                if not rarity[c]:
                    del rarity[c]


class Backoff:
    """Pairs and peers not to ask for a while, and the strikes that lead there."""

    __slots__ = ("refused", "strikes", "skip")

    def __init__(self) -> None:
        self.refused: dict[tuple[int, Peer], float] = {}  # (piece, peer) -> not asked for it until then
        self.strikes: dict[Peer, int] = {}
        self.skip: dict[Peer, float] = {}  # peers not asked for this version until then

    def refuse(self, index: int, peer: Peer, until: float) -> None:
        self.refused[(index, peer)] = until

    def strike(self, index: int, peer: Peer, until: float, limit: int) -> None:
        """`peer` withheld piece `index`: not asked for it until `until`, nor for anything after `limit`
        strikes (which then start again)."""
        self.refused[(index, peer)] = until
        self.strikes[peer] = self.strikes.get(peer, 0) + 1
        if self.strikes[peer] >= limit:
            self.skip[peer] = until
            self.strikes[peer] = 0

    def forgive(self, peer: Peer) -> None:
        """`peer` answered well: its strikes so far are forgotten."""
        self.strikes.pop(peer, None)

    def refused_by_peer(self) -> dict[Peer, PieceSet]:
        """peer -> the pieces it is not asked for now."""
        out: dict[Peer, PieceSet] = {}
        for (i, p) in self.refused:
            out[p] = out.get(p, EMPTY).add(i)
        return out

    def expire(self, now: float) -> None:
        for key in [k for k, t in self.refused.items() if t <= now]:
            del self.refused[key]
        for peer in [p for p, t in self.skip.items() if t <= now]:
            del self.skip[peer]

    def deadlines(self) -> Iterable[float]:
        yield from self.refused.values()
        yield from self.skip.values()
