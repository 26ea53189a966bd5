"""The newcomer budget: how many peers nothing vouches for a heartbeat alone may make alive here.

Keys cost nothing (issue 27, attack 1: 1,116 fresh keys heartbeating, each declaring an hour), so a
gossiped heartbeat earns a live entry only within a budget. A peer is *vouched* for when something
costly stands behind it (swarm/membership.py `vouched`: a link, a task naming it, proven work); any
other peer is a newcomer, charged to the source network its heartbeat came through (the forwarder's
/24 or /48, or the forwarder itself where the runtime cannot tell): at most `per_net` of them alive
per network and `total` in all. Past that a heartbeat makes no entry (`NoRoom`), but it is not refused:
gossip judges a message at its first arrival only, so an attacker that relays honest heartbeats to us
before anyone else would have them dropped here for good (a 1,000-peer run lost every trainer's
heartbeat that way and trained nothing). The core relays it if its signer is shown to work on a task
it names that we hold (swarm/evidence.py), and keeps it otherwise, as any heartbeat nothing vouches for
(swarm/core.py `_on_heartbeat`). Newcomers then count toward
our pace only up to the vouched peers' number, so a flood can at most double our interval; toward a
task's split of the work the same way until some worker commits to it, and from then on only up to as
many as the workers vouched for or committing (swarm/context.py `workers_of`). Those charged first count
first (`first_alive`): a flood that comes later does not push out a newcomer that was there before it.
"""

from __future__ import annotations

class NoRoom(Exception):
    """The budget is spent: the heartbeat makes no entry (the message says which part)."""


class Newcomers:
    """Counts kept as entries change (`mark`), not recounted: under a flood every admission asked how
    many of a network's newcomers were alive, a scan of up to the whole table each time."""

    def __init__(self, per_net: int, total: int) -> None:
        self.per_net, self.total = per_net, total
        self.charged: dict[str, str] = {}  # newcomer -> its source network, in the order first charged
        self.alive: set[str] = set()  # the charged newcomers alive now (a gone one holds no place)
        self._charged_by_net: dict[str, int] = {}  # source network -> its newcomers (while any)
        self._alive_by_net: dict[str, int] = {}
        self.refused = 0  # heartbeats refused for the budget

    def __contains__(self, peer: str) -> bool:
        return peer in self.charged

    def admit(self, peer: str, net: str) -> None:
        """Charge `peer` to `net`, or raise NoRoom when the budget is spent. Membership marks the peer
        alive when its entry turns alive."""
        if peer in self.alive:
            return
        if self._alive_by_net.get(net, 0) >= self.per_net:
            self.refused += 1
            raise NoRoom(f"{self.per_net} peers nothing vouches for came through {net} and are alive here")
        if len(self.alive) >= self.total:
            self.refused += 1
            raise NoRoom(f"{self.total} peers nothing vouches for are alive here")
        self.uncharge(peer)  # a gone newcomer coming back is charged anew: the budget holds for it too
        self.charged[peer] = net
        self._charged_by_net[net] = self._charged_by_net.get(net, 0) + 1

    def mark(self, peer: str, alive: bool) -> None:
        """`peer`'s entry turned alive or gone (a no-op for a peer not charged)."""
        net = self.charged.get(peer)
        if net is None or (peer in self.alive) == alive:
            return
        if alive:
            self.alive.add(peer)
            self._alive_by_net[net] = self._alive_by_net.get(net, 0) + 1
        else:
            self.alive.discard(peer)
            self._alive_by_net[net] -= 1

    def uncharge(self, peer: str) -> None:
        """Vouched for since, or forgotten."""
        self.mark(peer, False)
        net = self.charged.pop(peer, None)
        if net is not None:
            self._charged_by_net[net] -= 1
            if not self._charged_by_net[net]:
                del self._charged_by_net[net]
                self._alive_by_net.pop(net, None)

    def first_alive(self, room: int) -> list[str]:
        """Up to `room` alive newcomers, those charged first first."""
        out: list[str] = []
        if room <= 0:
            return out
        for p in self.charged:
            if p in self.alive:
                out.append(p)
                if len(out) >= room:
                    break
        return out

    def snapshot(self) -> dict:
        return {"newcomers_alive": len(self.alive), "newcomers_charged": len(self.charged),
                "newcomer_networks": len(self._charged_by_net), "refused_newcomers": self.refused}
