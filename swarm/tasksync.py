"""Task sync: learning the tasks a peer missed on gossip by asking for them.

A task is announced once on the tasks topic; a peer that joins later learns of it from heartbeats,
which name the tasks their sender follows. A missing one is asked for over the SYNC protocol (from
the signer if we hold a link to it, else from the forwarder, which has validated the heartbeat);
the answer is a list of signed announcements, each checked as if it came by gossip.
"""

from __future__ import annotations

from typing import Callable

from gossip import errors
from gossip.envelope import open_envelope
from gossip.errors import Rejected
from gossip.messages import TaskAnnouncement
from swarm import protocols
from swarm.context import Pending
from swarm.io import RequestReceived, Respond, ResponseReceived
from swarm.membership import Membership
from swarm.tasks import TaskBook


class TaskSync:
    def __init__(self, tasks: TaskBook, membership: Membership, pending: Pending, timeout: float,
                 learn: Callable, penalise: Callable) -> None:
        self.tasks = tasks
        self.membership = membership
        self.pending = pending
        self.timeout = timeout
        self.learn = learn  # learn(now, signed announcement, via=network) -> effects; raises Rejected
        self.penalise = penalise

    def ask(self, now: float, task_ids: tuple[str, ...], signer: str, forwarder: str) -> list:
        """The tasks a heartbeat named that we do not know (and have not asked for lately)."""
        wanted = self.tasks.missing(now, task_ids)
        if not wanted:
            return []
        info = self.membership.peers.get(signer)
        target = signer if info is not None and info.connected else forwarder
        return [self.pending.request(now, None, None, target, protocols.SYNC, self.tasks.sync_request(wanted),
                                     self.timeout)]

    def answer(self, now: float, inp: RequestReceived) -> list:
        try:
            return [Respond(inp.request_id, self.tasks.sync_response(inp.data))]
        except Rejected as rej:
            return [Respond(inp.request_id, error=rej.reason)] + self.penalise(now, inp.peer, rej)

    def on_response(self, now: float, inp: ResponseReceived) -> list:
        effects: list = []
        try:
            wires = TaskBook.parse_sync_response(inp.data)
        except Rejected as rej:
            return self.penalise(now, inp.peer, rej)
        for wire in wires:
            try:
                signed = open_envelope(wire)
                if not isinstance(signed.message, TaskAnnouncement):
                    raise Rejected(errors.WRONG_TOPIC, f"sync answered with a {signed.kind}")
                effects += self.learn(now, signed, via=inp.from_net or inp.peer)
            except Rejected as rej:
                effects += self.penalise(now, inp.peer, rej)
        return effects
