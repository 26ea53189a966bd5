"""Liveness of the peers we hold a link to, judged on the link itself (issue 27, item 1).

Flooded heartbeats tell us about every peer, but their interval stretches with the swarm (about 100 s
at 1,000 peers) and a flood of fake signers stretches it further, so a neighbour that froze was
noticed only after three of those intervals, and a newcomer heard nothing of its neighbours until
their next heartbeat. A link says more, and sooner: anything a neighbour sends us (a message it
forwards, a request, an answer, and what the transport saw of it and did not hand us: a copy of a
message we had already, a gossip IHAVE, `Tick.heard`) shows it is running. A link silent for
`ping_after` is asked (`/swarm/ping/1`); one silent for `gone_after` (membership's least silence before
a peer is gone, 10 s; our question unanswered) is dead, whatever the swarm's size. A busy link is never
pinged: in a swarm that gossips, traffic is the ping. A new link is pinged at once, and each side's heartbeat, freshly
signed, goes over it once: in its first ping, or in its answer to the other side's first ping when
that came first. So both ends know each other's roles, tasks and versions one round trip after
connecting; every other ping and answer is empty (a signature, and the other side's opening of it,
would be most of their cost).

A SIGSTOPped neighbour keeps its TCP connection (DESIGN.md), which is why silence, not the connection,
decides. A neighbour that does not speak ping (a plain libp2p peer) is left to its heartbeats. A
silence we slept through (swarm/stall.py) counts only from when we woke.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.stall import StallWatch


# A request's errors that say nothing came back from the peer (the runtimes' words for them: the node's
# `RequestError` reasons, the simulator's and the test harness's). Any other error is the peer's own
# answer, a refusal or "I do not speak that protocol" (a plain libp2p peer): it is running.
NO_ANSWER = ("timeout", "not connected", "not_connected", "connection closed")
# ... and those that say the peer does not speak the protocol (a plain libp2p peer, a tool): it is not
# pinged again on this link, which its heartbeats judge as before (a failed stream costs both sides).
NOT_SPOKEN = ("open_failed", "unsupported-protocol")


def answered(error: str | None) -> bool:
    return error is None or not error.startswith(NO_ANSWER)


@dataclass(frozen=True)
class LinkConfig:
    ping_after: float = 5.0  # a link silent this long is asked whether the peer is still there
    ping_timeout: float = 5.0
    # A peer short of peers to dial sends its heartbeat (and the peer exchange in it) over a link again,
    # and answers one that came again with its own, at most this often per link (a shuffle).
    shuffle_every: float = 10.0


class Links:
    """When we last heard from each linked peer, and which of them we are asking."""

    def __init__(self, config: LinkConfig, dead_after: float, stall: StallWatch | None = None,
                 checked_every: float = 0.0) -> None:
        self.dead_after = dead_after  # silent this long, our ping unanswered: the link is dead
        # An answer has time to come back (half of dead_after); and a link looked at only every
        # `checked_every` (the core's sweep) is pinged once silent for a whole period: with a shorter
        # silence both ends would find it quiet, and ask, at every check, where one ask shows both alive.
        self.ping_after = max(min(config.ping_after, dead_after / 2), checked_every)
        self.stall = stall or StallWatch()
        self.heard: dict[str, float] = {}  # linked peer -> when it last sent us anything
        self.asking: dict[str, float] = {}  # linked peers with a ping out -> when it went
        self.shuffle_every = config.shuffle_every
        self.introduced: dict[str, float] = {}  # linked peer -> when our heartbeat last went over the link

    def opened(self, now: float, peer: str) -> None:
        self.heard[peer] = now
        self.asking.pop(peer, None)
        self.introduced.pop(peer, None)

    def closed(self, peer: str) -> None:
        self.heard.pop(peer, None)
        self.asking.pop(peer, None)
        self.introduced.pop(peer, None)

    def heard_from(self, now: float, peer: str) -> None:
        if peer in self.heard:
            self.heard[peer] = now

    def heard_by_transport(self, heard: tuple[tuple[str, float], ...]) -> None:
        """What the transport heard on our links that it did not hand us (`Tick.heard`)."""
        links = self.heard
        for peer, when in heard:
            last = links.get(peer)
            if last is not None and when > last:
                links[peer] = when

    def judged(self) -> dict[str, float]:
        """The linked peers whose link judges them (not those that do not speak ping), and when each
        last sent us anything."""
        return self.heard

    def introduce(self, peer: str, now: float) -> bool:
        """Whether our heartbeat should go to `peer` now: once per link (and never to an unlinked peer)."""
        if peer in self.introduced or peer not in self.heard:
            return False
        self.introduced[peer] = now
        return True

    def reintroduce(self, peer: str, now: float) -> bool:
        """Whether our heartbeat may go to `peer` again now (a shuffle): at most every `shuffle_every`."""
        if peer not in self.heard or now - self.introduced.get(peer, float("-inf")) < self.shuffle_every:
            return False
        self.introduced[peer] = now
        return True

    def shuffle_partners(self, now: float) -> list[str]:
        """The linked peers our heartbeat may go to again now, in peer-id order."""
        return [p for p in sorted(self.heard) if now - self.introduced.get(p, float("-inf")) >= self.shuffle_every]

    def pinged(self, now: float, peer: str) -> None:
        self.asking.setdefault(peer, now)  # a shuffle's ping does not restart an unanswered question

    def ping_ended(self, peer: str, error: str | None = None) -> None:
        if not answered(error):
            return  # still asking: nothing came back (timed out, or no way through), so the silence counts on
        self.asking.pop(peer, None)
        if error is not None and error.startswith(NOT_SPOKEN):
            self.heard.pop(peer, None)  # out of `due`, never pinged again: its heartbeats judge it

    def due(self, now: float) -> tuple[list[str], list[str]]:
        """(links to ping now, links now dead), each in peer-id order: a link is dead once silent for
        `dead_after` with a ping out for at least `dead_after - ping_after`. Costs one `min` while every
        link has been heard within `ping_after`, which in a busy swarm is nearly always."""
        heard = self.heard
        if not heard:
            return [], []
        awake = self.stall.awake_since
        if now - max(min(heard.values()), awake) < self.ping_after:
            return [], []
        ping, dead = [], []
        grace = self.dead_after - self.ping_after  # how long a ping has to come back, at least (and at
        # least until the next check, when ping_after is a check period longer than dead_after)
        for peer in sorted(heard):
            silent = now - max(heard[peer], awake)
            if silent < self.ping_after:
                continue
            asked = self.asking.get(peer)
            if asked is None:
                ping.append(peer)  # however long the silence: nobody is gone without being asked
            elif silent >= self.dead_after and now - max(asked, awake) >= grace:
                dead.append(peer)
        return ping, dead
