"""Invariants and metrics over the trace, separate from the system under test.

Checkers see only trace records `(t, peer, kind, fields)`, fed live by the run (`Trace.observe`) or
read back from a JSONL file (`read_trace`), never the simulator's or the cores' state. Each check
returns ok plus the first few violations. The checks a scenario lists in `checks` must hold.

Invariants:
* tasks-learned: every honest peer up at the end, whose current incarnation is older than the settle
  period, has learned (Emit "task-learned") every unexpired task announced before the settle period.
* honest-not-banned: no honest peer emits "peer-banned" about an honest peer.
* versions-forward: per peer incarnation and task, "version-installed" versions never decrease.
* no-bad-training: no "rollout-trained" names a worker that is an adversary, produced forged job
  results, or was banned by the training peer before it trained.
* adversaries-banned: every detectable adversary that ran is banned by at least one honest peer.
* delivery-complete: every measured gossip message reached every live honest peer (see Delivery).

The role invariants (versions-forward, no-bad-training) are only as strong as the run is busy: the
`training` metrics say how many versions were published and installed and how many rollouts were
trained (and how many verify jobs failed, by reason), so a test can insist they are not vacuous.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from swarm.stats import percentile

GLOBAL_TOPICS = ("swarm/1/status", "swarm/1/tasks", "swarm/1/probe")
REWARD_WINDOW = 10  # steps averaged for the first and the latest mean rollout reward
JOIN_SETTLE = 10.0  # a peer counts as live for delivery once its incarnation is this old


@dataclass
class CheckResult:
    ok: bool
    detail: str = ""
    violations: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "detail": self.detail, "violations": self.violations[:10]}


class PeerTable:
    """Who each peer index is (id, adversary kind) and when each incarnation was up."""

    kinds = ("peer", "start", "leave", "crash")

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}
        self.index: dict[str, int] = {}
        self.adversary: dict[int, str] = {}
        self.detectable: dict[int, bool] = {}
        self.roles: dict[int, tuple[str, ...]] = {}
        self.up_since: dict[int, float] = {}  # current incarnation start, for peers up now
        self.incarnation: dict[int, int] = {}
        self.intervals: dict[int, list[list[float]]] = {}  # [start, end or inf]

    def feed(self, t: float, peer: int, kind: str, f: dict) -> None:
        if kind == "peer":
            self.ids[peer] = f["id"]
            self.index[f["id"]] = peer
            self.adversary[peer] = f.get("adversary", "")
            self.detectable[peer] = bool(f.get("detectable", False))
            self.roles[peer] = tuple(f.get("roles", ()))
        elif kind == "start":
            self.up_since[peer] = t
            self.incarnation[peer] = f.get("incarnation", 1)
            self.intervals.setdefault(peer, []).append([t, math.inf])
        else:
            self.up_since.pop(peer, None)
            if self.intervals.get(peer):
                self.intervals[peer][-1][1] = t

    def honest(self, peer: int) -> bool:
        return peer in self.ids and not self.adversary.get(peer)

    def follows_weights(self, peer: int) -> bool:
        """Workers and validators install every version (trainers make them; relays hold none)."""
        return bool({"worker", "validator"} & set(self.roles.get(peer, ())))

    def up_throughout(self, peer: int, a: float, b: float) -> bool:
        for start, end in self.intervals.get(peer, ()):
            if start <= a and end >= b:
                return True
        return False


class Check:
    name = ""
    kinds: tuple[str, ...] = ()

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers

    def feed(self, t: float, peer: int, kind: str, f: dict) -> None:
        raise NotImplementedError

    def result(self, end: float, settle: float) -> CheckResult:
        raise NotImplementedError


class TasksLearned(Check):
    name = "tasks-learned"
    kinds = ("task", "emit.task-learned", "start")

    def __init__(self, peers):
        super().__init__(peers)
        self.tasks: dict[str, tuple[float, float]] = {}  # id -> (announced, expires)
        self.learned: dict[int, set[str]] = {}  # peer -> tasks learned by its current incarnation

    def feed(self, t, peer, kind, f):
        if kind == "task":
            self.tasks[f["task_id"]] = (t, f.get("expires", math.inf))
        elif kind == "start":
            self.learned[peer] = set()
        else:
            self.learned.setdefault(peer, set()).add(f["task_id"])

    def result(self, end, settle):
        cutoff = end - settle
        due = sorted(tid for tid, (at, expires) in self.tasks.items() if at <= cutoff and expires > end)
        missing = []
        checked = 0
        for peer, since in sorted(self.peers.up_since.items()):
            if not self.peers.honest(peer) or since > cutoff:
                continue
            checked += 1
            for tid in due:
                if tid not in self.learned.get(peer, ()):
                    missing.append({"peer": peer, "task": tid})
        return CheckResult(not missing, f"{checked} honest peers x {len(due)} tasks; {len(missing)} missing", missing)


class HonestNotBanned(Check):
    name = "honest-not-banned"
    kinds = ("emit.peer-banned",)

    def __init__(self, peers):
        super().__init__(peers)
        self.bad: list[dict] = []
        self.bans = 0

    def feed(self, t, peer, kind, f):
        self.bans += 1
        target = self.peers.index.get(f.get("peer"))
        if self.peers.honest(peer) and target is not None and self.peers.honest(target):
            self.bad.append({"t": round(t, 3), "by": peer, "banned": target, "reason": f.get("reason")})

    def result(self, end, settle):
        return CheckResult(not self.bad, f"{self.bans} bans, {len(self.bad)} of honest peers by honest peers", self.bad)


class VersionsForward(Check):
    name = "versions-forward"
    kinds = ("emit.version-installed", "start")

    def __init__(self, peers):
        super().__init__(peers)
        self.current: dict[tuple[int, str], int] = {}
        self.bad: list[dict] = []
        self.events = 0

    def feed(self, t, peer, kind, f):
        if kind == "start":
            for key in [k for k in self.current if k[0] == peer]:
                del self.current[key]
            return
        self.events += 1
        key = (peer, f["task_id"])
        version = int(f["version"])
        if key in self.current and version < self.current[key]:
            self.bad.append({"t": round(t, 3), "peer": peer, "task": f["task_id"], "from": self.current[key],
                             "to": version})
        self.current[key] = max(version, self.current.get(key, version))

    def result(self, end, settle):
        return CheckResult(not self.bad, f"{self.events} installs, {len(self.bad)} backwards", self.bad)


class TrainingAdvances(Check):
    """Progress, not only safety: every task whose trainer published a version also published one in the
    last third of the time since (a trainer that lost a batch for good once sat at version 0 for an
    hour while every safety check passed)."""

    name = "training-advances"
    kinds = ("emit.version-published",)

    def __init__(self, peers):
        super().__init__(peers)
        self.first: dict[str, float] = {}  # task -> when its first version was published
        self.last: dict[str, tuple[float, int]] = {}  # task -> (when, version) of its newest

    def feed(self, t, peer, kind, f):
        task = f["task_id"]
        self.first.setdefault(task, t)
        if task not in self.last or int(f["version"]) > self.last[task][1]:
            self.last[task] = (t, int(f["version"]))

    def result(self, end, settle):
        stalled = []
        for task in sorted(self.first):
            since = self.first[task] + (end - self.first[task]) * 2 / 3
            at, version = self.last[task]
            if at < since:
                stalled.append({"task": task, "newest": version, "published_at": round(at, 3),
                                "none_since": round(since, 3)})
        return CheckResult(not stalled, f"{len(self.first)} tasks, {len(stalled)} without a version in the "
                                        f"last third of their run", stalled)


class NoBadTraining(Check):
    name = "no-bad-training"
    kinds = ("emit.rollout-trained", "emit.peer-banned", "job-done")

    def __init__(self, peers):
        super().__init__(peers)
        self.banned_by: dict[int, set[str]] = {}
        self.forgers: set[int] = set()
        self.bad: list[dict] = []
        self.events = 0

    def feed(self, t, peer, kind, f):
        if kind == "emit.peer-banned":
            self.banned_by.setdefault(peer, set()).add(f.get("peer"))
        elif kind == "job-done":
            if f.get("honest") is False:
                self.forgers.add(peer)
        else:
            self.events += 1
            worker_id = f.get("worker")
            worker = self.peers.index.get(worker_id)
            why = ""
            if worker is not None and self.peers.adversary.get(worker):
                why = f"worker is an adversary ({self.peers.adversary[worker]})"
            elif worker is not None and worker in self.forgers:
                why = "worker produced forged job results"
            elif worker_id in self.banned_by.get(peer, ()):
                why = "worker was banned by this trainer"
            if why:
                self.bad.append({"t": round(t, 3), "trainer": peer, "worker": worker_id, "task": f.get("task_id"),
                                 "commitment": f.get("commitment_id"), "why": why})

    def result(self, end, settle):
        return CheckResult(not self.bad, f"{self.events} rollouts trained, {len(self.bad)} from bad sources", self.bad)


class AdversariesBanned(Check):
    name = "adversaries-banned"
    kinds = ("emit.peer-banned",)

    def __init__(self, peers):
        super().__init__(peers)
        self.banned: dict[int, int] = {}

    def feed(self, t, peer, kind, f):
        target = self.peers.index.get(f.get("peer"))
        if target is not None and self.peers.honest(peer) and self.peers.adversary.get(target):
            self.banned[target] = self.banned.get(target, 0) + 1

    def result(self, end, settle):
        expected = sorted(p for p, kind in self.peers.adversary.items()
                          if kind and self.peers.detectable.get(p) and p in self.peers.intervals)
        missing = [{"peer": p, "kind": self.peers.adversary[p]} for p in expected if p not in self.banned]
        return CheckResult(not missing, f"{len(expected) - len(missing)}/{len(expected)} detectable adversaries "
                                        f"banned by honest peers", missing)


class Delivery(Check):
    """Gossip delivery to live honest peers, and latency, for messages honest peers publish.

    A receiver is live for a message if it is honest, its incarnation started JOIN_SETTLE s before
    the publish and it stays up until `grace` after it; the publisher must have been up that long
    too (a peer's first heartbeat is published before it has any connection, so it reaches nobody,
    in gossipsub as here). Messages on the global topics are measured
    (every subscribed peer must get them); status heartbeats are sampled by id in big swarms to bound
    memory. Messages published within `grace` of the end, or while a partition is in force, are not
    measured.
    """

    name = "delivery-complete"
    kinds = ("publish", "deliver", "reject", "partition", "heal")

    def __init__(self, peers, grace: float = 30.0, status_sample: int = 1):
        super().__init__(peers)
        self.grace = grace
        self.status_sample = max(1, status_sample)
        self.msgs: dict[str, list] = {}  # hex -> [t, publisher, topic, {peer: t}]
        self.partitions: list[list[float]] = []

    def feed(self, t, peer, kind, f):
        if kind == "publish":
            topic = f["topic"]
            if topic in GLOBAL_TOPICS and self.peers.honest(peer) and f["m"] not in self.msgs:
                if topic == "swarm/1/status" and int(f["m"][:8], 16) % self.status_sample:
                    return
                self.msgs[f["m"]] = [t, peer, topic, {}]
        elif kind in ("deliver", "reject"):
            rec = self.msgs.get(f["m"])
            if rec is not None and peer not in rec[3]:
                rec[3][peer] = t
        elif kind == "partition":
            self.partitions.append([t, math.inf])
        elif kind == "heal" and self.partitions:
            self.partitions[-1][1] = t

    def _measure(self, end: float) -> tuple[dict, list]:
        latencies: list[float] = []
        by_topic: dict[str, list[int]] = {}
        misses: list[dict] = []
        honest = [p for p in sorted(self.peers.ids) if self.peers.honest(p)]
        measured = 0
        for mid, (t0, publisher, topic, got) in sorted(self.msgs.items(), key=lambda kv: (kv[1][0], kv[0])):
            if t0 + self.grace > end or any(a - self.grace <= t0 <= b for a, b in self.partitions):
                continue
            if not self.peers.up_throughout(publisher, t0 - JOIN_SETTLE, t0):
                continue  # a peer's first heartbeat goes out before it has any link: nobody can get it
            counts = by_topic.setdefault(topic, [0, 0])
            measured += 1
            for p in honest:
                if p == publisher or not self.peers.up_throughout(p, t0 - JOIN_SETTLE, t0 + self.grace):
                    continue
                counts[1] += 1
                at = got.get(p)
                if at is not None and at - t0 <= self.grace:
                    counts[0] += 1
                    latencies.append(at - t0)
                elif len(misses) < 50:
                    misses.append({"m": mid, "topic": topic, "published": round(t0, 3), "peer": p})
        delivered = sum(c[0] for c in by_topic.values())
        expected = sum(c[1] for c in by_topic.values())
        metrics = {
            "messages": measured, "expected": expected, "delivered": delivered,
            "ratio": (delivered / expected) if expected else None,
            "by_topic": {t: {"delivered": c[0], "expected": c[1], "ratio": round(c[0] / c[1], 6) if c[1] else None}
                         for t, c in sorted(by_topic.items())},
            "latency_ms": {q: (round(v * 1000, 3) if (v := percentile(latencies, q)) is not None else None)
                           for q in (50, 90, 99, 100)},
        }
        return metrics, misses

    def result(self, end, settle):
        metrics, misses = self._measure(end)
        ratio = metrics["ratio"]
        return CheckResult(ratio is not None and ratio >= 1.0,
                           f"{metrics['delivered']}/{metrics['expected']} deliveries to live honest peers", misses)

    def metrics(self, end: float) -> dict:
        return self._measure(end)[0]


class VersionSpread:
    """Time for each weight version to reach 95% of the honest peers that follow the weights (workers
    and validators) up at the moment it got there, from its first install."""

    kinds = ("emit.version-installed",)

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers
        self.first: dict[tuple[str, int], float] = {}
        self.holders: dict[tuple[str, int], set[int]] = {}
        self.reached: dict[tuple[str, int], float] = {}

    def feed(self, t, peer, kind, f):
        if not self.peers.honest(peer) or not self.peers.follows_weights(peer):
            return
        key = (f["task_id"], int(f["version"]))
        self.first.setdefault(key, t)
        self.holders.setdefault(key, set()).add(peer)
        if key not in self.reached:
            live = sum(1 for p in self.peers.up_since if self.peers.honest(p) and self.peers.follows_weights(p))
            if live and len(self.holders[key]) >= 0.95 * live:
                self.reached[key] = t - self.first[key]

    def metrics(self) -> dict:
        times = sorted(self.reached.values())
        return {"versions": len(self.first), "reached_95": len(times),
                "seconds_p50": percentile(times, 50), "seconds_max": times[-1] if times else None}


class Training:
    """How busy the roles were: versions published, installs, rollouts trained, verify outcomes."""

    kinds = ("emit.version-published", "emit.version-installed", "emit.rollout-trained", "emit.verdict",
             "emit.rollout-dropped", "emit.shard-rejected", "job-done")

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers
        self.newest = -1
        self.published = 0
        self.installs = 0
        self.trained = 0
        self.trained_forged = 0  # trained rollouts whose worker is an adversary (no-bad-training says why)
        self.verdicts: dict[str, int] = {}  # reason -> count
        self.dropped: dict[str, int] = {}
        self.shard_blame: dict[str, int] = {}
        self.jobs: dict[str, int] = {}  # kind -> finished ok
        self.jobs_failed: dict[str, int] = {}
        self.forged_jobs = 0
        # the mean rollout reward of the first and the latest REWARD_WINDOW steps, and version 0's held-out
        # greedy accuracy (real jobs measure it): does the policy get better?
        self.rewards_first: list[float] = []
        self.rewards_last: deque[float] = deque(maxlen=REWARD_WINDOW)
        self.base_accuracy: float | None = None

    def feed(self, t, peer, kind, f):
        if kind == "emit.version-published":
            self.published += 1
            self.newest = max(self.newest, int(f.get("version", -1)))
            reward = f.get("reward")
            if isinstance(reward, (int, float)):  # the mean reward of the rollouts a step trained on
                if len(self.rewards_first) < REWARD_WINDOW:
                    self.rewards_first.append(float(reward))
                self.rewards_last.append(float(reward))
            if f.get("version") == 0 and isinstance(f.get("heldout_greedy"), (int, float)):
                self.base_accuracy = float(f["heldout_greedy"])
        elif kind == "emit.version-installed":
            self.installs += 1
        elif kind == "emit.rollout-trained":
            self.trained += 1
            worker = self.peers.index.get(f.get("worker"))
            if worker is not None and self.peers.adversary.get(worker):
                self.trained_forged += 1
        elif kind == "emit.verdict":
            reason = "ok" if f.get("passed") else str(f.get("reason"))
            self.verdicts[reason] = self.verdicts.get(reason, 0) + 1
        elif kind == "emit.rollout-dropped":
            reason = str(f.get("reason"))[:40]
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
        elif kind == "emit.shard-rejected":
            reason = str(f.get("reason"))
            self.shard_blame[reason] = self.shard_blame.get(reason, 0) + 1
        else:
            table = self.jobs if f.get("ok") else self.jobs_failed
            table[f.get("kind")] = table.get(f.get("kind"), 0) + 1
            if f.get("honest") is False:
                self.forged_jobs += 1

    def metrics(self) -> dict:
        return {"newest_version": self.newest, "versions_published": self.published, "installs": self.installs,
                "rollouts_trained": self.trained, "rollouts_trained_from_adversaries": self.trained_forged,
                "verdicts": dict(sorted(self.verdicts.items())), "dropped": dict(sorted(self.dropped.items())),
                "shard_blame": dict(sorted(self.shard_blame.items())), "jobs": dict(sorted(self.jobs.items())),
                "jobs_failed": dict(sorted(self.jobs_failed.items())), "forged_jobs": self.forged_jobs,
                "reward_first": _mean(self.rewards_first), "reward_last": _mean(self.rewards_last),
                "base_heldout_greedy": self.base_accuracy}


def _mean(values) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


class Bytes:
    kinds = ("bytes",)

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers
        self.per_peer: dict[int, tuple[int, int]] = {}

    def feed(self, t, peer, kind, f):
        self.per_peer[peer] = (f["in"], f["out"])

    def metrics(self, duration: float) -> dict:
        totals = [a + b for a, b in self.per_peer.values()]
        return {"peers": len(totals), "total": sum(totals),
                "per_peer_mean": round(sum(totals) / len(totals)) if totals else None,
                "per_peer_p50": percentile(totals, 50), "per_peer_p99": percentile(totals, 99),
                "per_peer_max": max(totals) if totals else None,
                "per_peer_mean_Bps": round(sum(totals) / len(totals) / duration, 1) if totals else None}


CHECKS = {c.name: c for c in (TasksLearned, HonestNotBanned, VersionsForward, TrainingAdvances, NoBadTraining,
                              AdversariesBanned, Delivery)}


class Evaluator:
    """All checks and metrics over one trace; `attach(trace)` for live runs, `feed` for files."""

    def __init__(self, grace: float = 30.0, status_sample: int = 1) -> None:
        self.peers = PeerTable()
        self.checks: dict[str, Check] = {}
        for name, cls in CHECKS.items():
            self.checks[name] = cls(self.peers, grace, status_sample) if cls is Delivery else cls(self.peers)
        self.versions = VersionSpread(self.peers)
        self.training = Training(self.peers)
        self.bytes = Bytes(self.peers)
        self._route: dict[str, list] = {}
        for consumer in [self.peers, *self.checks.values(), self.versions, self.training, self.bytes]:
            for kind in consumer.kinds:
                self._route.setdefault(kind, []).append(consumer.feed)

    def attach(self, trace) -> None:
        for kind, fns in self._route.items():
            for fn in fns:
                trace.observe(kind, fn)

    def feed(self, t: float, peer: int, kind: str, fields: dict) -> None:
        for fn in self._route.get(kind, ()):
            fn(t, peer, kind, fields)

    def results(self, end: float, settle: float) -> dict[str, CheckResult]:
        return {name: check.result(end, settle) for name, check in self.checks.items()}

    def metrics(self, end: float, duration: float) -> dict:
        return {"delivery": self.checks["delivery-complete"].metrics(end), "bytes": self.bytes.metrics(duration),
                "version_spread": self.versions.metrics(), "training": self.training.metrics()}


def read_trace(path: str) -> Iterator[tuple[float, int, str, dict]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            yield rec["t"], rec["peer"], rec["ev"], rec["f"]


def evaluate(records: Iterable[tuple[float, int, str, dict]], end: float, settle: float,
             grace: float = 30.0) -> tuple[dict[str, CheckResult], dict]:
    """Checks and metrics over records read back from a trace file."""
    ev = Evaluator(grace)
    for rec in records:
        ev.feed(*rec)
    return ev.results(end, settle), ev.metrics(end, end)
