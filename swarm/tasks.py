"""The tasks this peer knows: validated announcements, kept with their signed bytes.

A task is learned from gossip when it is announced, or later by asking a peer whose heartbeat lists
a task id we lack (`/swarm/sync/1`), so a peer that joins after the announcement still learns it.
Knowing a task means subscribing to its topics.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from gossip import topics
from gossip.envelope import SignedMessage
from gossip.errors import CAPACITY, MALFORMED, OUT_OF_WINDOW, SCHEMA, Rejected
from gossip.identity import peer_id_from_public_key
from gossip.messages import TaskAnnouncement
from swarm.io import Emit, Subscribe, Unsubscribe
from swarm.taskparams import ParamError, TaskParams

MAX_SYNC_IDS = 32


@dataclass(frozen=True)
class KnownTask:
    task: TaskAnnouncement
    signed: SignedMessage
    learned_at: float

    @property
    def task_id(self) -> str:
        return self.task.task_id

    def as_dict(self) -> dict:
        t = self.task
        return {"task_id": t.task_id, "name": t.name, "model": t.model, "env": t.env,
                "created_at": t.created_at, "expires_at": t.expires_at, "async_level": t.async_level,
                "announced_by": peer_id_from_public_key(self.signed.signer),
                "trainers": [peer_id_from_public_key(k) for k in t.trainer_keys],
                "params": dict(t.params)}


class TaskBook:
    def __init__(self, max_tasks: int = 32, clock_skew: float = 30.0, sync_retry: float = 10.0) -> None:
        self.max_tasks = max_tasks
        self.clock_skew = clock_skew
        self.sync_retry = sync_retry
        self.tasks: dict[str, KnownTask] = {}
        self._sync_pending: dict[str, float] = {}  # task id -> when we may ask again

    def add(self, now: float, signed: SignedMessage) -> list:
        """Store a verified task announcement; raises Rejected if it is not acceptable now."""
        task = signed.message
        assert isinstance(task, TaskAnnouncement)
        if task.created_at > now + self.clock_skew:
            raise Rejected(OUT_OF_WINDOW, f"task created in the future ({task.created_at - now:.0f} s ahead)")
        if task.expires_at <= now:
            raise Rejected(OUT_OF_WINDOW, "task has expired")
        task_id = task.task_id
        self._sync_pending.pop(task_id, None)
        if task_id in self.tasks:
            return []
        try:
            TaskParams.of(task)  # every peer reads a signed task the same way, or refuses it
        except ParamError as exc:
            raise Rejected(SCHEMA, str(exc)) from None
        if len(self.tasks) >= self.max_tasks:
            raise Rejected(CAPACITY, f"already following {self.max_tasks} tasks")
        self.tasks[task_id] = KnownTask(task, signed, now)
        return [Subscribe(t) for t in topics.task_topics(task_id)] + [
            Emit("task-learned", {"task_id": task_id, "name": task.name})]

    def expire(self, now: float) -> list:
        effects: list = []
        for task_id in sorted(self.tasks):
            if self.tasks[task_id].task.expires_at <= now:
                del self.tasks[task_id]
                effects += [Unsubscribe(t) for t in topics.task_topics(task_id)]
                effects.append(Emit("task-expired", {"task_id": task_id}))
        return effects

    def missing(self, now: float, task_ids: tuple[str, ...]) -> list[str]:
        """Task ids we lack and may ask for now (each asked at most once per `sync_retry`)."""
        wanted = []
        for task_id in task_ids:
            if task_id in self.tasks or self._sync_pending.get(task_id, 0.0) > now:
                continue
            if len(self._sync_pending) >= 4 * MAX_SYNC_IDS:
                self._sync_pending = {k: v for k, v in self._sync_pending.items() if v > now}
                if len(self._sync_pending) >= 4 * MAX_SYNC_IDS:
                    break
            self._sync_pending[task_id] = now + self.sync_retry
            wanted.append(task_id)
        return wanted[:MAX_SYNC_IDS]

    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.tasks))

    # ---- the sync protocol's bodies

    @staticmethod
    def sync_request(task_ids: list[str]) -> bytes:
        return msgpack.packb({"tasks": task_ids[:MAX_SYNC_IDS]}, use_bin_type=True)

    def sync_response(self, request: bytes) -> bytes:
        try:
            obj = msgpack.unpackb(request, raw=False, strict_map_key=True)
        except Exception:
            raise Rejected(MALFORMED, "sync request is not msgpack") from None
        ids = obj.get("tasks") if isinstance(obj, dict) else None
        if not isinstance(ids, list) or len(ids) > MAX_SYNC_IDS or not all(isinstance(i, str) for i in ids):
            raise Rejected(MALFORMED, "sync request must be {tasks: [up to 32 ids]}")
        wires = [self.tasks[i].signed.wire for i in ids if i in self.tasks]
        return msgpack.packb({"envelopes": wires}, use_bin_type=True)

    @staticmethod
    def parse_sync_response(data: bytes) -> list[bytes]:
        try:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except Exception:
            raise Rejected(MALFORMED, "sync response is not msgpack") from None
        wires = obj.get("envelopes") if isinstance(obj, dict) else None
        if not isinstance(wires, list) or len(wires) > MAX_SYNC_IDS or not all(isinstance(w, bytes) for w in wires):
            raise Rejected(MALFORMED, "sync response must be {envelopes: [up to 32 envelopes]}")
        return wires

    def snapshot(self) -> list[dict]:
        return [self.tasks[t].as_dict() for t in sorted(self.tasks)]
