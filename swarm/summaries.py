"""The task summaries this peer holds: one per task, the newest its trainers signed.

A summary (gossip/messages.py `TaskSummary`, published by swarm/roles/summary.py) is authorised like a
manifest before it gets here: only a key the task names as a trainer may sign one (swarm/trust.py). Two
trainers of one task may both sign for a while (a takeover, a partition): the one of the highest term
wins, as the fork choice's chain does, and within a term the newest version, then the newest stamp.
Bounded by the task table: at most one summary per task held, dropped with the task.
"""

from __future__ import annotations

from dataclasses import dataclass

from gossip.messages import TaskSummary


@dataclass(frozen=True)
class Held:
    summary: TaskSummary
    signer: str
    workers: frozenset[str]  # asked for every heartbeat naming the task: a set, made once


class TaskSummaries:
    def __init__(self) -> None:
        self._by_task: dict[str, Held] = {}

    def add(self, summary: TaskSummary, signer: str) -> bool:
        """Keep `summary` if it is newer than the one held (term, then version, then stamp)."""
        held = self._by_task.get(summary.task_id)
        if held is not None and _rank(held.summary) >= _rank(summary):
            return False
        self._by_task[summary.task_id] = Held(summary, signer, frozenset(summary.workers))
        return True

    def lists(self, task_id: str, peer: str) -> bool:
        """Whether the task's summary names `peer` among the workers its last versions trained on."""
        held = self._by_task.get(task_id)
        return held is not None and peer in held.workers

    def get(self, task_id: str) -> Held | None:
        return self._by_task.get(task_id)

    def forget(self, task_id: str) -> None:
        self._by_task.pop(task_id, None)

    def snapshot(self, task_id: str, now: float) -> dict | None:
        """What status shows of a task's summary (None: none heard yet)."""
        held = self._by_task.get(task_id)
        if held is None:
            return None
        s = held.summary
        return {"signer": held.signer, "version": s.version, "term": s.term, "workers": len(s.workers),
                "completions": s.completions, "versions": s.versions, "trainers_alive": len(s.trainers_alive),
                "age": round(max(0.0, now - s.sent_at), 3)}


def _rank(s: TaskSummary) -> tuple:
    return (s.term, s.version, s.sent_at)
