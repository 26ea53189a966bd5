"""The newcomer budget: how many peers nothing vouches for a heartbeat alone may make alive here.

Keys cost nothing (issue 27, attack 1: 1,116 fresh keys heartbeating, each declaring an hour), so a
gossiped heartbeat earns a live entry only within a budget. A peer is *vouched* for when something
costly stands behind it (swarm/membership.py `vouched`: a link, a task naming it, proven work); any
other peer is a newcomer, charged to the source network its heartbeat came through (the forwarder's
/24 or /48, or the forwarder itself where the runtime cannot tell): at most `per_net` of them alive
per network and `total` in all. Past that a heartbeat makes no entry (`NoRoom`), but it is not refused:
gossip judges a message at its first arrival only, so an attacker that relays honest heartbeats to us
before anyone else would have them dropped here for good (a 1,000-peer run lost every trainer's
heartbeat that way and trained nothing). The core relays it if it names a task we hold, and keeps it
otherwise, as any heartbeat nothing vouches for (swarm/core.py `_relays`). Newcomers then count for what we decide (our pace, a role's split of
the work) only up to the vouched peers' number, those charged first first (`first_alive`): a flood
can at most double our interval, and does not push out a newcomer that was there before it.
"""

from __future__ import annotations

from collections.abc import Callable

class NoRoom(Exception):
    """The budget is spent: the heartbeat makes no entry (the message says which part)."""


class Newcomers:
    def __init__(self, per_net: int, total: int) -> None:
        self.per_net, self.total = per_net, total
        self.charged: dict[str, str] = {}  # newcomer -> its source network, in the order first charged
        self.by_net: dict[str, set[str]] = {}  # source network -> its newcomers
        self.refused = 0  # heartbeats refused for the budget

    def __contains__(self, peer: str) -> bool:
        return peer in self.charged

    def admit(self, peer: str, net: str, alive: Callable[[str], bool]) -> None:
        """Charge `peer` to `net`, or raise NoRoom when the budget is spent. `alive(p)`: is
        newcomer p alive now (a gone one holds no place)."""
        if peer in self.charged:
            return  # already charged: an old newcomer's entry, back alive
        if sum(1 for p in self.by_net.get(net, ()) if alive(p)) >= self.per_net:
            self.refused += 1
            raise NoRoom(f"{self.per_net} peers nothing vouches for came through {net} and are alive here")
        if len(self.charged) >= self.total and self.alive_count(alive) >= self.total:
            self.refused += 1
            raise NoRoom(f"{self.total} peers nothing vouches for are alive here")
        self.charged[peer] = net
        self.by_net.setdefault(net, set()).add(peer)

    def uncharge(self, peer: str) -> None:
        """Vouched for since, or forgotten."""
        net = self.charged.pop(peer, None)
        if net is not None:
            mine = self.by_net[net]
            mine.discard(peer)
            if not mine:
                del self.by_net[net]

    def alive_count(self, alive: Callable[[str], bool]) -> int:
        return sum(1 for p in self.charged if alive(p))

    def first_alive(self, alive: Callable[[str], bool], room: int) -> list[str]:
        """Up to `room` alive newcomers, those charged first first."""
        out: list[str] = []
        for p in self.charged:
            if len(out) >= room:
                break
            if alive(p):
                out.append(p)
        return out

    def snapshot(self, alive: Callable[[str], bool]) -> dict:
        return {"newcomers_alive": self.alive_count(alive), "newcomers_charged": len(self.charged),
                "newcomer_networks": len(self.by_net), "refused_newcomers": self.refused}
