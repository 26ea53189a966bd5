"""The active trainer's task summary: who the task's work came from lately, in one signed message.

Every member's heartbeat flooded to every peer is what made membership cost N squared (issue 27); what a
peer of the task needs to know of the others is mostly what the trainer already knows: whose batches it
trained, how much, which of the task's trainers are alive, how far the chain is. So the active trainer
publishes that as a `TaskSummary` (gossip/messages.py) on the task's weights topic, with a version or
its re-announcement but at most every `SUMMARY_EVERY` seconds: one message per task, however many
members it has. Peers keep the newest (swarm/summaries.py), show it in status and metrics, and take a
listed worker's heartbeats as evidence that it works on the task (swarm/evidence.py).
"""

from __future__ import annotations

from collections import deque

from gossip import topics
from gossip.messages import TaskSummary
from swarm.peerinfo import ALIVE

SUMMARY_EVERY = 30.0  # seconds between two summaries of one task, at least
SUMMARY_VERSIONS = 16  # versions back the worker list and the completions reach
MAX_WORKERS = 512  # TaskSummary.workers' schema bound: the most recent workers first


class Recent:
    """The workers and completions of the last `SUMMARY_VERSIONS` versions a trainer published."""

    def __init__(self) -> None:
        self._versions: deque[tuple[tuple[str, ...], int]] = deque(maxlen=SUMMARY_VERSIONS)  # (workers, completions)
        self.sent_at = float("-inf")

    def trained(self, workers: list[str], completions: int) -> None:
        """A version published: the workers whose batches its step trained, and their completions."""
        self._versions.append((tuple(workers), completions))

    def workers(self) -> tuple[str, ...]:
        """Distinct, those trained into the newest versions first, at most `MAX_WORKERS`."""
        out: dict[str, None] = {}
        for workers, _ in reversed(self._versions):
            for w in workers:
                out.setdefault(w)
        return tuple(out)[:MAX_WORKERS]

    def completions(self) -> int:
        return sum(c for _, c in self._versions)

    def versions(self) -> int:
        return len(self._versions)


def publish(ctx, now: float, task_id: str, version: int, term: int, trainer_keys, recent: Recent) -> list:
    """The task's summary, if the last went out `SUMMARY_EVERY` ago or more."""
    if now - recent.sent_at < SUMMARY_EVERY or version < 0:
        return []
    recent.sent_at = now
    alive = []
    for key in trainer_keys:
        peer = ctx.signer(key)
        info = ctx.peer_info(peer)
        if peer == ctx.peer_id or (info is not None and info.state == ALIVE):
            alive.append(peer)
    summary = TaskSummary(task_id=task_id, version=version, term=term, workers=recent.workers(),
                          completions=recent.completions(), trainers_alive=tuple(alive), versions=recent.versions(),
                          sent_at=now)
    return ctx.publish(now, topics.task_topic(task_id, "weights"), summary)
