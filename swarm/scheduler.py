"""The downloading half of the exchange: what to ask whom, and what to do when an answer fails.

Policy (the reasons are in swarm/exchange.py's docstring):

  - peer by peer, rarest first: each linked holder with a free request slot, taken from a random
    start, is asked for the rarest piece it holds that we miss and have not asked for;
  - at most `open_shards` shards open (their pieces wait in memory): at the bound only pieces of
    open shards are asked for;
  - at most `per_peer` requests to one peer (endgame losers still sending count) and
    `max_in_flight` for the download;
  - endgame: once every missing piece is asked for, a late request is asked of a second holder;
  - a "busy" answer rests that (piece, peer) for `busy_backoff`; a withheld piece rests it for
    `skip_for` and strikes the peer, skipped for the version after `strikes` strikes.

Every random choice draws from the one rng the exchange was given, in a fixed order (links sorted,
pieces sorted before a shuffle), so a seeded run makes the same requests every time.
"""

from __future__ import annotations

from gossip import errors
from swarm.download import Download
from swarm.exchangeio import Blame, Fetch
from swarm.pieceset import EMPTY
from swarm.sources import Peer


class Scheduler:
    """Chooses requests for any download it is handed; holds no download state of its own, only the
    config and the exchange's rng (so its draws interleave with the exchange's as before)."""

    def __init__(self, config, rng) -> None:
        self.config = config  # an ExchangeConfig
        self.rng = rng

    def schedule(self, now: float, d: Download, links: list[Peer], bad: set[Peer]) -> list[Fetch]:
        """Requests to send now for `d`, to peers in `links` (sorted) and not in `bad`."""
        flying = d.flying
        flying.endgame_at = None
        if d.checking or d.complete:
            return []
        cfg = self.config
        if flying.count >= cfg.max_in_flight:
            return []
        load = flying.load()
        holders, skip = d.sources.holders, d.backoff.skip
        free = [p for p in links if p in holders and p not in bad and p not in skip
                and load.get(p, 0) < cfg.per_peer]
        if not free:
            return []
        refused = d.backoff.by_peer
        need = d.have.held.missing(d.n) - flying.asked
        if not need:
            return self._endgame(now, d, free, load, refused)
        out: list[Fetch] = []
        rng = self.rng
        start = rng.randrange(len(free))
        for k in range(len(free)):
            peer = free[(start + k) % len(free)]
            for _ in range(cfg.per_peer - load.get(peer, 0)):
                x = holders[peer] & need
                if peer in refused:
                    x = x - refused[peer]
                if x and len(d.have.parts) + self._opening(d) >= cfg.open_shards:
                    x = x & d.have.opened  # as many shards open as memory allows: finish those first
                if not x:
                    break
                i = d.sources.rarest(x, rng)
                self._ask(now, d, peer, i, out)
                need = need.discard(i)
                if flying.count >= cfg.max_in_flight or not need:
                    return out
        return out

    def _opening(self, d: Download) -> int:
        """Open shards with no piece held yet (asked only): they count against `open_shards` too."""
        layout, parts, count = d.layout, d.have.parts, 0
        for shard in {layout.shard_of(i) for i in d.flying.pieces}:
            if shard not in parts:
                count += 1
        return count

    def _ask(self, now: float, d: Download, peer: Peer, index: int, out: list[Fetch]) -> None:
        d.flying.ask(index, peer, now + self.config.timeout)
        d.have.open(d.layout.shard_of(index))
        out.append(Fetch(peer, d.want.root, index, self.config.timeout))

    def _endgame(self, now: float, d: Download, free: list[Peer], load: dict, refused: dict) -> list[Fetch]:
        """Every missing piece is in flight: double the late ones (swarm/exchange.py: why only those)."""
        cfg = self.config
        if not cfg.endgame:
            return []
        flying = d.flying
        order = sorted(flying.pieces)
        if cfg.endgame_slow > 0:
            # only requests late against this download's mean answer time (before any: half the timeout)
            wait = flying.late_after(cfg.endgame_slow, cfg.timeout)
            due = {i: min(flying.pieces[i].values()) - cfg.timeout + wait for i in order}
            late = [i for i in order if due[i] <= now]
            if len(late) < len(order):
                flying.endgame_at = min(due[i] for i in order if due[i] > now)
            order = late
        out: list[Fetch] = []
        holders = d.sources.holders
        self.rng.shuffle(order)
        for i in order:
            if flying.count >= cfg.max_in_flight:
                break
            asked = flying.pieces[i]
            if len(asked) >= 2:
                continue
            options = [p for p in free if i in holders[p] and p not in asked
                       and i not in refused.get(p, EMPTY) and load.get(p, 0) < cfg.per_peer]
            if not options:
                continue
            peer = options[self.rng.randrange(len(options))]
            load[peer] = load.get(peer, 0) + 1
            self._ask(now, d, peer, i, out)
        return out

    # ---- failed answers and time

    def busy(self, now: float, d: Download, peer: Peer, index: int) -> None:
        """`peer` had no upload slot for `index`: ask someone else for it for a while."""
        d.backoff.refuse(index, peer, now + self.config.busy_backoff)

    def withheld(self, now: float, d: Download, peer: Peer, index: int, error: str) -> Blame:
        """`peer` announced `index` and then did not send it (an error, not-found or no answer)."""
        d.backoff.strike(index, peer, now + self.config.skip_for, self.config.strikes)
        return Blame(peer, errors.WITHHELD, f"piece {index}: {error[:80]}")

    def expire(self, now: float, d: Download) -> list[tuple[int, Peer]]:
        """The requests of `d` past their deadline (the caller answers them as timeouts); rests that are
        over end."""
        expired = d.flying.expire(now)
        d.backoff.expire(now)
        return expired

    @staticmethod
    def deadlines(d: Download, times: list[float]) -> None:
        """Add to `times` when `d` next needs a tick: an announcement due, a request's deadline, a rest
        ending, a request turning late (the endgame)."""
        if d.announcer.due is not None:
            times.append(d.announcer.due)
        flying = d.flying
        for asked in flying.pieces.values():
            times.extend(asked.values())
        times.extend(flying.abandoned.values())
        if not d.complete:
            times.extend(d.backoff.refused.values())
            times.extend(d.backoff.skip.values())
            if flying.endgame_at is not None:
                times.append(flying.endgame_at)
