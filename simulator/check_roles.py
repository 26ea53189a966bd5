"""The role invariants over the trace: tasks learned, bans, weight versions, training inputs.

Each is a `Check` fed only trace records; simulator/checkers.py lists them and documents what each
one asserts. Kept apart from gossip delivery (check_delivery.py) and the metrics (check_metrics.py).
"""

from __future__ import annotations

import math

from simulator.check_base import Check, CheckResult

CHECKING_CHEATS = ("lying-validator", "rubber-stamp")  # cheats in checks: their own rollouts are honest


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
        key = (peer, f["task_id"], int(f.get("term", 0)))  # a better chain may restart lower (forkchoice.py)
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
    hour while every safety check passed), and no two consecutive versions (by any of its trainers)
    are further apart than `takeover_after` plus two version periods (the median gap): a standby's
    silence before taking over, then its first step."""

    name = "training-advances"
    kinds = ("emit.version-published", "emit.trainer-starting", "emit.trainer-standby")

    def __init__(self, peers):
        super().__init__(peers)
        self.times: dict[str, list[float]] = {}  # task -> when each version was published
        self.last: dict[str, tuple[float, int]] = {}  # task -> (when, version) of its latest publication
        self.takeover: dict[str, float] = {}

    def feed(self, t, peer, kind, f):
        task = f["task_id"]
        if kind != "emit.version-published":
            self.takeover[task] = float(f.get("takeover_after", 0.0))
            return
        self.times.setdefault(task, []).append(t)
        self.last[task] = (t, int(f["version"]))

    def longest_gap(self, task: str) -> tuple[float, float]:
        """(longest gap between publications, its bound)."""
        times = self.times[task]
        gaps = sorted(b - a for a, b in zip(times, times[1:]))
        if not gaps:
            return 0.0, float("inf")
        return gaps[-1], self.takeover.get(task, 0.0) + 2 * gaps[len(gaps) // 2]

    def result(self, end, settle):
        stalled, figures = [], []
        for task in sorted(self.times):
            first = self.times[task][0]
            since = first + (end - first) * 2 / 3
            at, version = self.last[task]
            gap, bound = self.longest_gap(task)
            figures.append(f"{gap:.1f} s (bound {bound:.1f})")
            if at < since:
                stalled.append({"task": task, "newest": version, "published_at": round(at, 3),
                                "none_since": round(since, 3)})
            if gap > bound:
                stalled.append({"task": task, "longest_gap": round(gap, 3), "bound": round(bound, 3)})
        return CheckResult(not stalled, f"{len(self.times)} tasks, longest gap {', '.join(figures)}, "
                                        f"{len(stalled)} stalled", stalled)


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
            if f.get("honest") is False and f.get("kind") == "generate":
                self.forgers.add(peer)
        else:
            self.events += 1
            worker_id = f.get("worker")
            worker = self.peers.index.get(worker_id)
            why = ""
            if worker is not None and self.peers.adversary.get(worker) not in (None, "", *CHECKING_CHEATS):
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
