"""What more peers buy: throughput figures, and how many bad batches a check quorum let through.

`Throughput` (metrics, no check): batches committed and trained, the fraction of the settled ones
(trained, or dropped or refused by a trainer; not those still in flight when the run ends) that were
trained on, versions and prompts trained per simulated hour, and the active trainer's time
split into training (its main job lane), checking (its check lane: node/runtime.py gives its verify
jobs a second job process, simulator/jobqueue.py a second lane) and idle.

`bad-training-bounded` (check): with a check quorum a cheater may get a few batches trained before
it is caught (docs/security.md derives how many). Bad batches trained, counted per cheating worker
as no-bad-training defines them, must stay within the bound that holds at 99.9% even if every
checker asked colluded: the trainer's spot checks alone catch a bad batch with probability p each,
so the count before the catch is geometric, P(n or more) = (1 - p)^n.
"""

from __future__ import annotations

import math

from simulator.check_base import CheckResult
from simulator.check_roles import NoBadTraining

CONFIDENCE = 1e-3


def bound_for(spot_check: float) -> int:
    """Bad batches a cheater gets trained on, at most, with probability 1 - CONFIDENCE (every checker
    colluding; honest checkers only make it fewer)."""
    if spot_check >= 1.0:
        return 0
    if spot_check <= 0.0:
        return 10**9
    return math.ceil(math.log(CONFIDENCE) / math.log(1.0 - spot_check))


class BadTrainingBounded(NoBadTraining):
    name = "bad-training-bounded"
    kinds = NoBadTraining.kinds + ("emit.trainer-starting",)

    def __init__(self, peers):
        super().__init__(peers)
        self.spot_check = 1.0  # the smallest share among the trainers' tasks (no quorum: they check all)

    def feed(self, t, peer, kind, f):
        if kind == "emit.trainer-starting":
            if f.get("check_quorum"):
                self.spot_check = min(self.spot_check, float(f.get("spot_check", 1.0)))
            return
        super().feed(t, peer, kind, f)

    def per_worker(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for bad in self.bad:
            counts[bad["worker"]] = counts.get(bad["worker"], 0) + 1
        return counts

    def result(self, end, settle):
        counts, bound = self.per_worker(), bound_for(self.spot_check)
        over = [{"worker": w, "bad_trained": n, "bound": bound} for w, n in sorted(counts.items()) if n > bound]
        return CheckResult(not over, f"{self.events} rollouts trained, bad ones per cheater {counts or 0} "
                                     f"(bound {bound} at spot_check {self.spot_check:g})", over)


class Throughput:
    kinds = ("emit.rollouts-committed", "emit.rollout-trained", "emit.version-published", "emit.trainer-starting",
             "emit.trainer-takeover", "emit.rollout-dropped", "emit.message-rejected", "job-queued", "job-done")
    REFUSED = ("too-old", "other-chain", "capacity", "out-of-window")  # a trainer's refusals of commitments

    def __init__(self, peers) -> None:
        self.peers = peers
        self.committed = 0
        self.trained = 0
        self.prompts_trained = 0
        self.versions = 0
        self.first_version_at: float | None = None
        self.trainers: set[int] = set()
        self.queued: dict[tuple[int, object], float] = {}
        self.busy: dict[str, float] = {"train": 0.0, "verify": 0.0}
        self.lost = 0  # batches a trainer dropped or refused (never trained)
        self.rewards: list[tuple[float, float, int]] = []  # (t, the mean rollout reward a step trained on, its completions)

    def feed(self, t, peer, kind, f):
        if kind == "emit.rollouts-committed":
            self.committed += 1
        elif kind == "emit.rollout-trained":
            self.trained += 1
        elif kind == "emit.version-published":
            self.versions += 1
            if self.first_version_at is None:
                self.first_version_at = t
            completions = int(f.get("step_completions", 0) or 0)
            self.prompts_trained += completions
            if isinstance(f.get("reward"), (int, float)):
                self.rewards.append((round(t, 3), round(float(f["reward"]), 4), completions))
        elif kind in ("emit.trainer-starting", "emit.trainer-takeover"):
            self.trainers.add(peer)
        elif kind == "emit.rollout-dropped" or kind == "emit.message-rejected":
            if peer in self.trainers and (kind == "emit.rollout-dropped" or f.get("reason") in self.REFUSED):
                self.lost += 1
        elif peer in self.trainers:
            key = (peer, str(f.get("job")))
            if kind == "job-queued":
                self.queued[key] = t
            elif key in self.queued and f.get("kind") in self.busy:
                self.busy[f["kind"]] += t - self.queued.pop(key)

    def metrics(self, end: float) -> dict:
        span = max(1e-9, end - (self.first_version_at if self.first_version_at is not None else end))
        hours = span / 3600.0
        train, check = self.busy["train"] / span, self.busy["verify"] / span
        settled = self.trained + self.lost  # the rest were still being checked or waiting at the end
        return {"batches_committed": self.committed, "batches_trained": self.trained, "batches_lost": self.lost,
                "batches_in_flight_at_end": max(0, self.committed - settled),
                "trained_fraction": round(self.trained / settled, 4) if settled else None,
                "versions_per_hour": round(max(0, self.versions - 1) / hours, 2) if hours else None,
                "completions_trained_per_hour": round(self.prompts_trained / hours, 1) if hours else None,
                "trainer_train_fraction": round(train, 4), "trainer_check_fraction": round(check, 4),
                "trainer_idle_fraction": round(max(0.0, 1.0 - train), 4), "since": self.first_version_at,
                "reward_curve": self.rewards}

