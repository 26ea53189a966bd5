"""Check quorums between real peer processes on 127.0.0.1 (swarm/roles/quorum.py): the trainer asks
workers over /swarm/check/1 to check each other's batches once they have had work trained, trains on
their passes, and an other-model cheater is caught by an honest worker's check and banned after the
trainer's own second opinion; none of its rollouts is trained on. Every process is stopped by PID."""

from __future__ import annotations

import pytest

from node import control
from node.procs import stop_processes
from node.records import read_records
from tests.node.helpers import start_trainer_with_workers, wait_for

pytestmark = pytest.mark.slow
TASK = {"task": {"name": "digit-sort-quorum", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                 "async_level": 4, "lifetime_hours": 1, "trainers": ["self"], "validators": [],
                 "params": {"group_size": 8, "prompts_per_commit": 2, "prompts_per_step": 4, "warmup_steps": 10,
                            "eval_prompts": 16, "max_new_tokens": 10, "lr": 3e-5, "check_quorum": 1,
                            "spot_check": 0.0, "peer_checks": True, "max_prompts_per_step": 8}}}


def test_workers_check_each_other_for_the_trainer_and_a_cheater_is_caught(tmp_path):
    trainer, a, b, cheater = (tmp_path / name for name in ("trainer", "a", "b", "cheater"))
    procs = []
    try:
        ids = start_trainer_with_workers(procs, trainer, [(a, [], None), (b, [], None),
                                                          (cheater, ["--malicious", "other-model"], None)])
        control.call(trainer, "announce-task", {"task": TASK})

        def by_quorum() -> int:
            tasks = control.call(trainer, "status")["work"]["trainer"]
            return sum(t["by_quorum"] for t in tasks.values())

        def settled():
            return ids[cheater] in control.call(trainer, "status")["banned"] and by_quorum() >= 4
        wait_for(settled, 180, "the cheater banned and batches trained on workers' checks")

        trained = list(read_records(trainer, "rollout-trained"))
        assert ids[cheater] not in {r["worker"] for r in trained}
        checked_by = {d: [r for r in read_records(d, "verdict")] for d in (a, b)}
        assert all(checked_by.values()), "both honest workers checked batches they were asked about"
        assert all(r["worker"] != ids[d] for d in (a, b) for r in checked_by[d])  # never their own
        own = sum(t["own_checks"] for t in control.call(trainer, "status")["work"]["trainer"].values())
        assert own < len(trained)  # the trainer did not check everything itself
        ban = [r for r in read_records(trainer, "peer-banned") if r["peer"] == ids[cheater]]
        assert ban and ban[0]["reason"].startswith("failed ")  # its own check: first, or a second opinion
        for d in (trainer, a, b):
            assert set(control.call(d, "status")["banned"]) <= {ids[cheater]}
    finally:
        codes = stop_processes(procs)
    assert codes == [0, 0, 0, 0]
