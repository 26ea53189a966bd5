"""The `/swarm/ping/1` exchange: what a ping and its answer carry, and what we make of them.

`swarm/links.py` decides when a link is pinged and when it is dead; this is the talking. A link's first
ping carries our heartbeat, signed now (unless our answer to the neighbour's first ping already did),
and so does our answer to a neighbour's first ping; every other ping and answer is empty. A heartbeat
on a link counts only if the peer on the link signed it, and is not relayed: it was not gossip.
"""

from __future__ import annotations

from typing import Callable

from gossip import errors
from gossip.errors import Rejected, UnknownKind
from gossip.identity import peer_id_from_public_key
from gossip.messages import StatusHeartbeat
from swarm import protocols
from swarm.io import RequestReceived, Respond, ResponseReceived
from swarm.links import Links, answered


class Pings:
    def __init__(self, links: Links, membership, pending, stall, penalise: Callable, open_envelope: Callable,
                 timeout: float, listening: Callable[[], bool], signed_beat: Callable[[float, bool], bytes],
                 on_heartbeat: Callable[[float, StatusHeartbeat, str], list]) -> None:
        self.links = links
        self.membership = membership
        self.pending = pending
        self.stall = stall
        self.penalise = penalise
        self.open = open_envelope
        self.timeout = timeout
        self.listening = listening  # before Started we have no addresses to tell
        self.signed_beat = signed_beat  # our heartbeat for a link (fresh: signed now, for a shuffle)
        self.on_heartbeat = on_heartbeat

    def check(self, now: float) -> list:
        """Ping the links that went quiet; close the dead ones (their peers are gone)."""
        ping, dead = self.links.due(now)
        effects: list = []
        for peer in dead:
            self.links.closed(peer)
            effects += self.membership.link_dead(now, peer)
        for peer in ping:
            effects += self.ping(now, peer)
        return effects

    def ping(self, now: float, peer: str, shuffle: bool = False) -> list:
        """Ask a linked peer whether it is there (and, first time on the link or in a shuffle, tell it who
        we are and whom we know)."""
        if not self.listening():
            return []  # the link is pinged once it has been silent
        self.links.pinged(now, peer)
        introduce = self.links.reintroduce(peer, now) if shuffle else self.links.introduce(peer, now)
        data = self.signed_beat(now, shuffle) if introduce else b""
        return [self.pending.request(now, None, None, peer, protocols.PING, data, self.timeout)]

    def shuffle(self, now: float, rng) -> list:
        """We are short of peers to dial (Membership.maintain): swap peer exchange samples with one
        neighbour, picked at random among those we have not swapped with for `shuffle_every`. A relay
        learns addresses only over its links, and a link's first exchange can predate its neighbour's
        other links (three peers joining one bootstrap at once would never find each other)."""
        partners = self.links.shuffle_partners(now)
        return self.ping(now, rng.choice(partners), shuffle=True) if partners and self.listening() else []

    def on_ping(self, now: float, inp: RequestReceived) -> list:
        """Answered at once: empty (the link is alive, all a ping asks), or with our heartbeat when the
        ping held the neighbour's and ours has not gone over this link yet, or (a shuffle: it held a new
        one) not for `shuffle_every`."""
        effects, fresh = self._beat(now, inp.peer, inp.data)
        data = b""
        if inp.data and self.listening():
            if self.links.introduce(inp.peer, now):
                data = self.signed_beat(now, False)
            elif fresh and self.links.reintroduce(inp.peer, now):
                data = self.signed_beat(now, True)  # a shuffle's answer: a sample of our links as they are now
        return [Respond(inp.request_id, data)] + effects

    def on_answer(self, now: float, inp: ResponseReceived) -> list:
        if answered(inp.error):
            self.links.heard_from(now, inp.peer)
        self.links.ping_ended(inp.peer, inp.error)
        if inp.error is not None:
            return []
        return self._beat(now, inp.peer, inp.data)[0]

    def _beat(self, now: float, peer: str, data: bytes) -> tuple[list, bool]:
        """(effects, whether `data` was a heartbeat we took: signed by the peer, newer than its last)."""
        if not data:
            return [], False
        try:
            try:
                signed = self.open(data)
            except UnknownKind as unknown:
                raise Rejected(errors.SCHEMA, f"a ping holds a message of a kind we do not know: {unknown}") from None
            if not isinstance(signed.message, StatusHeartbeat):
                raise Rejected(errors.SCHEMA, f"a ping holds a {signed.kind}, not a heartbeat")
            if peer_id_from_public_key(signed.signer) != peer:
                raise Rejected(errors.UNAUTHORIZED, "a ping holds another peer's heartbeat")
            return self.on_heartbeat(now, signed.message, peer), True
        except Rejected as rej:
            if rej.reason in (errors.STALE, errors.OTHER_MAJOR) or (
                    rej.reason == errors.OUT_OF_WINDOW and self.stall.excused(now)):
                return [], False  # gossip brought a newer one first; a release we do not speak; we slept through it
            return self.penalise(now, peer, rej), False
