"""Invariants and metrics over the trace, separate from the system under test.

Checkers see only trace records `(t, peer, kind, fields)`, fed live by the run (`Trace.observe`) or
read back from a JSONL file (`read_trace`), never the simulator's or the cores' state. Each check
returns ok plus the first few violations. The checks a scenario lists in `checks` must hold.

Invariants:
* tasks-learned: every honest peer up at the end, whose current incarnation is older than the settle
  period, has learned (Emit "task-learned") every unexpired task announced before the settle period.
* honest-not-banned: no honest peer emits "peer-banned" about an honest peer.
* versions-forward: per peer incarnation, task and chain term, "version-installed" versions never decrease.
* no-bad-training: no "rollout-trained" names a worker that is an adversary, produced forged job
  results, or was banned by the training peer before it trained.
* bad-training-bounded: the same bad batches, counted per cheater, within what the trainers' spot
  checks bound (check_scaling.py; for scenarios with colluding checkers).
* one-chain, trained-on-own-chain: trainer chains (check_chain.py).
* adversaries-banned: every detectable adversary that ran is banned by at least one honest peer.
* delivery-complete: every measured gossip message reached every live honest peer (see Delivery).

The role invariants (versions-forward, no-bad-training) are only as strong as the run is busy: the
`training` metrics say how many versions were published and installed and how many rollouts were
trained (and how many verify jobs failed, by reason), so a test can insist they are not vacuous.

The checks live in their families: check_roles.py (the role invariants), check_delivery.py (gossip
delivery), check_metrics.py (metrics no check asserts on), over check_base.py's `PeerTable`. This module
composes them into one `Evaluator` and reads trace files.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

from simulator.check_base import Check, CheckResult, PeerTable
from simulator.check_chain import OneChain, TrainedOnOwnChain, TrainerState
from simulator.check_learning import LearningContinues
from simulator.check_delivery import Delivery
from simulator.check_metrics import REWARD_WINDOW, Bytes, Training, VersionSpread
from simulator.check_scaling import BadTrainingBounded, Throughput
from simulator.check_roles import (AdversariesBanned, HonestNotBanned, NoBadTraining, TasksLearned, TrainingAdvances,
                                   VersionsForward)

__all__ = ["CHECKS", "REWARD_WINDOW", "Check", "CheckResult", "Evaluator", "PeerTable", "evaluate",
           "read_trace"]


CHECKS = {c.name: c for c in (TasksLearned, HonestNotBanned, VersionsForward, TrainingAdvances, NoBadTraining,
                              AdversariesBanned, Delivery, OneChain, TrainedOnOwnChain, LearningContinues,
                              BadTrainingBounded)}


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
        self.state = TrainerState(self.peers)
        self.throughput = Throughput(self.peers)
        self._route: dict[str, list] = {}
        for consumer in [self.peers, *self.checks.values(), self.versions, self.training, self.bytes, self.state,
                         self.throughput]:
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
                "version_spread": self.versions.metrics(), "training": self.training.metrics(),
                "trainer_state": self.state.metrics(), "throughput": self.throughput.metrics(end)}


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
