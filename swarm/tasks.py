"""The tasks this peer knows: validated announcements, kept with their signed bytes.

A task is learned from gossip when it is announced, or later by asking a peer whose heartbeat lists
a task id we lack (`/swarm/sync/1`), so a peer that joins after the announcement still learns it.
Knowing a task means subscribing to its topics.

Admission, so that a flood of fresh keys cannot fill the table and lock real tasks out: a task may
live at most `max_lifetime` (30 days) from its creation, else it is refused (every peer reads the
signed dates the same way, so refusing keeps them in agreement where a local cap would not); one
announcer key may have at most `per_announcer` tasks here; when the table is full, the task whose
trainers have been silent longest (no heartbeat from any trainer key, no manifest) is evicted for
the newcomer if that silence exceeds `trainer_silence`; a task never heard from counts as silent
since it was learned. The operator's own tasks (the local command) are exempt from the per-announcer
limit, never evicted, and evict the most silent remote task when the table is full.

Keys are free, so two more rules rest on what is not (issue 27, attack 2). The tasks that came
through one source network (the forwarder's /24 or /48, or the peer that answered our sync; in the
simulator each forwarder is its own network) may hold at most `per_network` of the slots: one network
cannot fill the table however many keys it mints. And one trainer key's heartbeats vouch for at most
`per_trainer` tasks: a key named as trainer by more remote tasks than that keeps none of them alive,
since real trainers train one task or two and a junk flood names one live key for all of its tasks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import msgpack

from gossip import topics
from gossip.envelope import SignedMessage
from gossip.errors import CAPACITY, MALFORMED, OUT_OF_WINDOW, SCHEMA, Rejected
from gossip.identity import peer_id_from_public_key
from gossip.messages import TaskAnnouncement
from swarm.io import Emit, Subscribe, Unsubscribe
from swarm.taskparams import ParamError, TaskParams

MAX_SYNC_IDS = 32
MAX_LIFETIME = 30 * 86400.0


@dataclass(frozen=True)
class KnownTask:
    task: TaskAnnouncement
    signed: SignedMessage
    learned_at: float
    own: bool = False  # announced by this peer's operator (the local command)
    via: str = ""  # the source network it came through (own tasks: none)

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def members_only(self) -> bool:
        """Announced with `member_topics`: its gossip is carried by the peers with a role in it (gossip/topics.py)."""
        return self.task.params.get("member_topics") is True

    def as_dict(self) -> dict:
        t = self.task
        return {"task_id": t.task_id, "name": t.name, "model": t.model, "env": t.env,
                "created_at": t.created_at, "expires_at": t.expires_at, "async_level": t.async_level,
                "announced_by": peer_id_from_public_key(self.signed.signer),
                "trainers": [peer_id_from_public_key(k) for k in t.trainer_keys],
                "params": dict(t.params), "via": self.via}


class TaskBook:
    def __init__(self, max_tasks: int = 32, clock_skew: float = 30.0, sync_retry: float = 10.0,
                 last_seen: Callable[[str], float | None] = lambda peer: None, per_announcer: int = 2,
                 max_lifetime: float = MAX_LIFETIME, trainer_silence: float = 300.0, per_network: int = 16,
                 per_trainer: int = 2, member: bool = False) -> None:
        self.max_tasks = max_tasks
        self.member = member  # we have a role (not a relay): a member of every task we hold
        self.clock_skew = clock_skew
        self.sync_retry = sync_retry
        self.last_seen = last_seen  # peer id -> when its last heartbeat came (membership), or None
        self.per_announcer = per_announcer
        self.max_lifetime = max_lifetime
        self.trainer_silence = trainer_silence
        self.per_network = per_network
        self.per_trainer = per_trainer
        self.dropped: list[str] = []  # tasks dropped since the core last asked (its roles forget them)
        self.tasks: dict[str, KnownTask] = {}
        self._manifest_at: dict[str, float] = {}  # task id -> when a manifest by one of its trainers came
        self._sync_pending: dict[str, float] = {}  # task id -> when we may ask again
        self._named: dict[frozenset[str], frozenset[str]] = {}  # task ids -> the peers they name (cache)

    def add(self, now: float, signed: SignedMessage, own: bool = False, via: str = "") -> list:
        """Store a verified task announcement that came through source network `via`; raises Rejected
        if it is not acceptable now."""
        task = signed.message
        assert isinstance(task, TaskAnnouncement)
        if task.created_at > now + self.clock_skew:
            raise Rejected(OUT_OF_WINDOW, f"task created in the future ({task.created_at - now:.0f} s ahead)")
        if task.expires_at <= now:
            raise Rejected(OUT_OF_WINDOW, "task has expired")
        if task.expires_at - task.created_at > self.max_lifetime:
            raise Rejected(OUT_OF_WINDOW, f"task lives over {self.max_lifetime / 86400:g} days")
        task_id = task.task_id
        self._sync_pending.pop(task_id, None)
        if task_id in self.tasks:
            return []
        try:
            TaskParams.of(task)  # every peer reads a signed task the same way, or refuses it
        except ParamError as exc:
            raise Rejected(SCHEMA, str(exc)) from None
        if not own and sum(1 for k in self.tasks.values()
                           if k.signed.signer == signed.signer and not k.own) >= self.per_announcer:
            raise Rejected(CAPACITY, f"its announcer already has {self.per_announcer} tasks here")
        effects: list = []
        if not own and sum(1 for k in self.tasks.values() if k.via == via and not k.own) >= self.per_network:
            victim = self._most_silent(now, self._lives(), via)
            if victim is None:
                raise Rejected(CAPACITY, f"the peers of {via} brought {self.per_network} tasks here, "
                                         "all with a live trainer")
            effects += self._drop(victim, "task-evicted")
        if len(self.tasks) >= self.max_tasks:
            victim = self._most_silent(now, self._lives(), None, own)
            if victim is None:
                raise Rejected(CAPACITY, f"already following {self.max_tasks} tasks, all with a live trainer")
            effects += self._drop(victim, "task-evicted")
        self.tasks[task_id] = KnownTask(task, signed, now, own, "" if own else via)
        self._named.clear()
        return effects + [Subscribe(t) for t in self.topics_of(task_id)] + [
            Emit("task-learned", {"task_id": task_id, "name": task.name})]

    def topics_of(self, task_id: str) -> tuple[str, ...]:
        """The task's topics we subscribe to: all of them, but a relay none of a members-only task's."""
        if not self.tasks[task_id].members_only:
            return topics.task_topics(task_id)
        return topics.task_topics(task_id, members=True) if self.member else ()

    def member_tasks(self) -> list[str]:
        """The members-only tasks we are a member of (swarm/memberlinks.py links us to their other members)."""
        return [task_id for task_id, k in sorted(self.tasks.items()) if k.members_only] if self.member else []

    def beat_topics(self, roles: tuple[str, ...]) -> tuple[str, ...]:
        """Where our gossiped heartbeat goes. A worker's (or a leech's) goes to the members topics of the
        members-only tasks it holds, and to the status topic only if it holds a task of the other kind (or
        none): its trainers and fellow workers are on those topics, and nobody else has a use for it. Any
        other role's goes to the status topic, where every peer hears it: trainers and validators are how
        a new member finds the task's first members to link to (swarm/memberlinks.py), mirrors serve all."""
        members = tuple(topics.task_topic(t, topics.MEMBERS) for t in self.member_tasks())
        if not members or not set(roles) <= {"worker", "leech", "relay"}:
            return (topics.STATUS,)
        return members + ((topics.STATUS,) if len(members) < len(self.tasks) else ())

    def heard_manifest(self, task_id: str, now: float) -> None:
        """A manifest signed by one of the task's trainers: a sign its trainer is alive."""
        self._manifest_at[task_id] = now

    def _lives(self) -> dict[str, float]:
        """Each remote task's life: when one of its trainers last showed it is alive (a heartbeat from a
        trainer key that vouches for it, or a manifest); never: as if silent since it was learned."""
        remote = {task_id: k for task_id, k in self.tasks.items() if not k.own}
        named = Counter(key for k in remote.values() for key in set(k.task.trainer_keys))
        lives = {}
        for task_id, known in remote.items():
            heard = self._manifest_at.get(task_id, float("-inf"))
            for key in known.task.trainer_keys:
                seen = self.last_seen(peer_id_from_public_key(key)) if named[key] <= self.per_trainer else None
                if seen is not None:
                    heard = max(heard, seen)
            lives[task_id] = heard if heard > float("-inf") else known.learned_at - self.trainer_silence
        return lives

    def _most_silent(self, now: float, lives: dict[str, float], via: str | None, own: bool = False) -> str | None:
        """The remote task (of those that came through `via`, if given) to drop for a new one: the most
        silent, if silent long enough (or for our own)."""
        ranked = sorted((life, task_id) for task_id, life in lives.items()
                        if via is None or self.tasks[task_id].via == via)
        if ranked and (own or ranked[0][0] <= now - self.trainer_silence):
            return ranked[0][1]
        return None

    def names(self, peer: str, among: frozenset[str]) -> bool:
        """Does one of the tasks `among` that we hold name `peer` as a trainer or validator? Membership
        vouches for those of the tasks our roles work on: not of every task we hold, since an announcer's
        key is free too, and 32 junk tasks could name a thousand keys."""
        named = self._named.get(among)
        if named is None:
            named = self._named[among] = frozenset(
                peer_id_from_public_key(key) for task_id in among if (k := self.tasks.get(task_id)) is not None
                for key in (*k.task.trainer_keys, *k.task.validator_keys))
        return peer in named

    def _drop(self, task_id: str, event: str) -> list:
        subscribed = self.topics_of(task_id)
        del self.tasks[task_id]
        self.dropped.append(task_id)
        self._named.clear()
        self._manifest_at.pop(task_id, None)
        # the pieces topic too: the exchange may still hold a version of the task (swarm/roles/shards.py)
        pieces = topics.task_topic(task_id, topics.PIECES)
        return [Unsubscribe(t) for t in subscribed + (pieces,)] + [Emit(event, {"task_id": task_id})]

    def expire(self, now: float) -> list:
        effects: list = []
        for task_id in sorted(self.tasks):
            if self.tasks[task_id].task.expires_at <= now:
                effects += self._drop(task_id, "task-expired")
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
