"""The serving half of the exchange: which piece requests to answer now, later or not at all.

Three rules, each for a reason:

  - upload slots: at most `upload_slots` answers go out at once (more wait in a queue of
    `upload_queue`, or are answered "busy"), because a few fast uploads spread pieces sooner than
    many slow ones sharing one uplink; a slot is held until the runtime reports the answer sent
    (`done`), or `upload_timeout` if it never does;
  - super-seeding: for a version we originated, a piece is served only while it has gone out at
    most `spread` times more than the least-served piece, so the first copies of every piece leave
    the origin once each and peers fetch the repeats from each other;
  - only checked pieces are served: a piece we do not hold is "not-found".

The uploader reads a download's holdings and never changes them; what it owns is the slots, the
queue and the origin's serve counts.
"""

from __future__ import annotations

from typing import Callable

from swarm.download import Download
from swarm.exchangeio import Serve

Token = object  # the runtime's id for one request being answered
MAX_SPREAD_REFUSED = 4096  # (asker, piece) pairs remembered per version; past it, forgotten at once


class Uploader:
    """One per exchange: upload slots are shared by every version we serve (one uplink)."""

    def __init__(self, config) -> None:
        self.config = config  # an ExchangeConfig
        self.slots: dict[Token, float] = {}  # upload token -> when its slot frees anyway
        self.queue: list[tuple[Token, bytes, int]] = []  # requests waiting for a slot: (token, root, index)
        self.served: dict[bytes, list[int]] = {}  # root of a version we originated -> serves per piece
        # root -> (asker, piece) refused by the spread rule: an asker that comes back for the same piece
        # after its rest found it nowhere else, and is served. Without this, when every downloader
        # lacked the same pieces and those had gone out more than the others (to a peer that left, or
        # that corrupted them), the origin refused them to everyone forever.
        self.spread_refused: dict[bytes, set] = {}

    def originated(self, root: bytes, n: int) -> None:
        """We produced version `root` (of `n` pieces): spread its pieces (super-seeding)."""
        self.served.setdefault(root, [0] * n)

    def forget(self, root: bytes) -> None:
        self.served.pop(root, None)
        self.spread_refused.pop(root, None)

    def serve(self, d: Download, index: int, now: float, token: Token | None,
              peer: object = None) -> tuple[Serve | None, str]:
        """`d` holds piece `index`: see `ShardExchange.serve`."""
        cfg = self.config
        served = self.served.get(d.want.root)
        if served is not None:
            if cfg.spread >= 0 and served[index] > min(served) + cfg.spread - 1:
                refused = self.spread_refused.setdefault(d.want.root, set())
                if peer is None or (peer, index) not in refused:
                    if len(refused) >= MAX_SPREAD_REFUSED:
                        refused.clear()
                    refused.add((peer, index))
                    return None, "busy"
                refused.discard((peer, index))
        if token is not None and cfg.upload_slots:
            for t in [t for t, until in self.slots.items() if until <= now]:
                del self.slots[t]
            if len(self.slots) >= cfg.upload_slots:
                if len(self.queue) >= cfg.upload_queue:
                    return None, "busy"
                self.queue.append((token, d.want.root, index))
                if served is not None:
                    served[index] += 1  # counted when promised, so the queue does not fill with repeats
                return None, "queued"  # answered by `done` when a slot frees
            self.slots[token] = now + cfg.upload_timeout
        if served is not None:
            served[index] += 1
        return d.serving(index), ""

    def done(self, token: Token, now: float,
             holding: Callable[[bytes, int], Download | None]) -> list[tuple[Token, Serve | None]]:
        """Free `token`'s slot; the queued requests that may go now, each with what to send (None when
        `holding(root, index)`, the download that still holds the piece, is None)."""
        self.slots.pop(token, None)
        out: list[tuple[Token, Serve | None]] = []
        while self.queue and len(self.slots) < self.config.upload_slots:
            t, root, index = self.queue.pop(0)
            d = holding(root, index)
            if d is None:
                out.append((t, None))
                continue
            self.slots[t] = now + self.config.upload_timeout
            out.append((t, d.serving(index)))
        return out
