"""Links that keep introducing strangers nobody vouches for are cut (issue 27, attack 1).

The newcomer budget (swarm/newcomers.py) bounds what a flood of fresh-key heartbeats makes us hold, and
no honest peer relays one (swarm/core.py `_on_heartbeat`: KEPT). But every fake still reaches each
neighbour of the flooder, which opens and judges it: 18 a second on each of its links, for as long as
the links stay. Unpunished, a flooder keeps every link peers give it (in `scale-10k` it sat at its
64-link limit, and its fakes were a third of all the swarm's deliveries).

So each link's gossip is counted over a window of at least `window` seconds: the heartbeats we kept
without relaying whose signer was a stranger (neither in our table nor among the last `recent` strangers
kept), and the messages we accepted and relayed. Honest signers heartbeat again and again, and an honest
neighbour relays only heartbeats it can vouch for (its own neighbours', workers shown to work on a task
it holds), so the strangers it introduces are at most the swarm's heartbeating peers, each once; a key
minted per heartbeat is a stranger every time. A link *floods* when, over a window, it introduced at
least `min_fresh` strangers and `fresh_rate` a second, at least `ratio` times the messages we accepted
of it, and at least `ratio` times the median our other links introduced (at a join, most strangers come
through the best-linked neighbour, and they are the swarm's peers, once each: `min_fresh` is above what
a swarm of a few dozen peers introduces at once). It is then penalised, disconnected and refused for
`refuse_for` seconds, and repeats add up to a ban (gossip/reputation.py, `flooding`). The window is
judged at the core's sweeps, and also the moment a link has introduced `min_fresh` strangers in a window
already `window` long: a flooder keeps a link until it has shown what it is, not until the next sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from gossip.errors import FLOODING, Rejected
from swarm.io import Disconnect


@dataclass(frozen=True)
class FloodConfig:
    window: float = 10.0  # the shortest span judged (at a sweep, or once a link has introduced `min_fresh`)
    min_fresh: int = 64  # strangers a link must introduce in a window to be judged at all ...
    fresh_rate: float = 2.0  # ... and this many a second of the window
    ratio: float = 10.0  # ... and this many times what we accepted of it and the median of other links
    refuse_for: float = 600.0  # a cut link's peer is neither dialled nor let back in for this long
    recent: int = 4096  # strangers remembered (a heartbeat whose signer has no entry here comes back)
    max_refused: int = 1024  # refused peers remembered (the oldest refusal is forgotten first)


class FloodWatch:
    """Counts per linked peer since the last judgement; recent strangers and refused peers, oldest first."""

    def __init__(self, config: FloodConfig) -> None:
        self.config = config
        self.fresh: dict[str, int] = {}  # linked peer -> strangers it introduced in this window
        self.accepted: dict[str, int] = {}  # linked peer -> messages of it we accepted in this window
        self.since: float | None = None  # when this window started
        self.last_fresh: dict[str, int] = {}  # the counts last judged (what a penalty's detail quotes)
        self._strangers: dict[str, None] = {}  # signers kept without an entry, in the order first kept
        self.refused: dict[str, float] = {}  # peer -> until when, in the order refused
        self.links_cut = 0  # links cut for flooding, in all

    def accepted_from(self, peer: str) -> None:
        self.accepted[peer] = self.accepted.get(peer, 0) + 1

    def kept_from(self, now: float, peer: str, signer: str) -> bool:
        """We kept, without relaying, a heartbeat `peer` handed us from `signer`, who had no entry here.
        True when the window may be judged now rather than at the next sweep (`cut`): it is long enough and
        this link has just introduced enough strangers to be judged at all. A flooder then loses the link
        as soon as the evidence is in, not a sweep period later (30 s in `scale-10k`, where that wait was
        most of the fakes its neighbours took); at most one such judgement a window, as each starts one."""
        strangers = self._strangers
        if signer in strangers:
            return False
        strangers[signer] = None
        cfg = self.config
        if len(strangers) > cfg.recent:
            del strangers[next(iter(strangers))]
        n = self.fresh[peer] = self.fresh.get(peer, 0) + 1
        return n >= cfg.min_fresh and self.since is not None and now - self.since >= cfg.window

    def closed(self, peer: str) -> None:
        self.fresh.pop(peer, None)
        self.accepted.pop(peer, None)

    def judge(self, now: float, linked: Collection[str]) -> list[str]:
        """The linked peers that flooded us in the window now ending (if it is long enough), in peer-id
        order; a new window starts."""
        if self.since is None:
            self.since = now
            return []
        elapsed = now - self.since
        cfg = self.config
        if elapsed < cfg.window:
            return []
        self.since = now
        fresh, accepted = self.fresh, self.accepted
        self.fresh, self.accepted, self.last_fresh = {}, {}, fresh
        floor = max(cfg.min_fresh, cfg.fresh_rate * elapsed)
        suspects = [p for p, n in fresh.items() if n >= floor and n >= cfg.ratio * accepted.get(p, 0) and p in linked]
        flooding = []
        for peer in sorted(suspects):
            others = sorted(fresh.get(p, 0) for p in linked if p != peer)
            median = others[len(others) // 2] if others else 0
            if fresh[peer] >= cfg.ratio * median:
                flooding.append(peer)
        return flooding

    def cut(self, now: float, membership, penalise: Callable) -> list:
        """At a sweep (or when `kept_from` says so): the links that flooded us in the window now ending,
        penalised (`penalise`: the core's), cut, and refused by us and by `membership`'s dials for `refuse_for`."""
        effects: list = []
        for peer in self.judge(now, membership.linked):
            detail = f"{self.last_fresh[peer]} heartbeats of strangers nobody vouches for, little else"
            effects += penalise(now, peer, Rejected(FLOODING, detail))
            self.refuse(peer, now)
            membership.refuse_dials(peer, now + self.config.refuse_for)
            effects.append(Disconnect(peer, "flooding"))
        return effects

    def refuse(self, peer: str, now: float) -> None:
        self.links_cut += 1
        self.refused.pop(peer, None)
        self.refused[peer] = now + self.config.refuse_for
        while len(self.refused) > self.config.max_refused:
            del self.refused[next(iter(self.refused))]

    def refusing(self, peer: str, now: float) -> bool:
        until = self.refused.get(peer)
        if until is None:
            return False
        if until <= now:
            del self.refused[peer]
            return False
        return True
