"""A rolling upgrade between real peer processes on 127.0.0.1: the trainer and one worker run the
simulated next release (SWARM_RELEASE=next: protocol 1.1, a new kind on its own topic and a new
heartbeat field), the other worker this one. Training goes on with both workers' rollouts, nobody is
banned or charged for speaking another release, and the old worker never sees the new kind. Every
process is stopped by PID."""

from __future__ import annotations

import pytest

from gossip.release import UPTIME, UPTIME_TOPIC
from node import control
from node.procs import stop_processes
from node.records import read_records
from node.config import RELEASE_ENV
from tests.node.helpers import start_trainer_with_workers, wait_for

pytestmark = pytest.mark.slow
TASK = {"task": {"name": "digit-sort-upgrade", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                 "async_level": 4, "lifetime_hours": 1, "trainers": ["self"], "validators": [],
                 "params": {"group_size": 8, "prompts_per_commit": 2, "prompts_per_step": 4, "warmup_steps": 0,
                            "eval_prompts": 0, "max_new_tokens": 10, "lr": 3e-5}}}
FOREIGN = {"unknown-kind", "schema", "other-major", "newer-kind", "malformed"}


def test_old_and_new_releases_train_together(tmp_path):
    trainer, new, old = dirs = [tmp_path / name for name in ("trainer", "new", "old")]
    nxt = {RELEASE_ENV: "next"}
    procs = []
    try:
        ids = start_trainer_with_workers(procs, trainer, [(new, [], nxt), (old, [], {RELEASE_ENV: "current"})],
                                         trainer_env=nxt)
        control.call(trainer, "announce-task", {"task": TASK})

        def both_trained():
            workers = {r["worker"] for r in read_records(trainer, "rollout-trained")}
            return {ids[new], ids[old]} <= workers and max(control.call(trainer, "status")["versions"].values()) >= 1
        wait_for(both_trained, 120, "rollouts of both releases trained on")

        snaps = {d: control.call(d, "status") for d in dirs}
        assert [snaps[d]["protocol"] for d in dirs] == ["1.1 [uptime]", "1.1 [uptime]", "1.0"]
        for d, snap in snaps.items():
            assert snap["banned"] == [], (d.name, snap["banned"])
            assert not FOREIGN & set(snap["penalties"]), (d.name, snap["penalties"])
            proto = {p["peer_id"]: p["proto"] for p in snap["peers"] if p["state"] == "alive"}
            assert proto == {ids[o]: ("1.0" if o == old else "1.1 [uptime]") for o in dirs if o != d}, d.name
        assert UPTIME not in snaps[old]["gossip"]["delivered"] and UPTIME_TOPIC not in snaps[old]["gossip"]["topics"]
        assert snaps[new]["gossip"]["delivered"].get(UPTIME, 0) > 0  # the newer peers hear each other's new kind
        # the old worker installs the versions the newer trainer publishes
        wait_for(lambda: max(control.call(old, "status")["versions"].values()) >= 1, 60, "the old worker on version 1")
    finally:
        codes = stop_processes(procs)
    assert codes == [0, 0, 0]
