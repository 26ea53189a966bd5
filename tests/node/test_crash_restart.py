"""A real trainer node killed mid-pack of a version (SWARM_CRASH_AT, trainer/crashpoints.py) and
restarted on its data dir: the half-packed version is never served, its state is valid, and it
publishes again the last version it had published, nothing lost.

The data dir is prepared in-process first (versions 0-2 trained by a JobWorker for the task the
node will announce, as a trainer that ran before leaves it), so the node's first job is the
resume, whose republication is what the crash point kills: one job process start per node run,
not a run of training. Every point of a step, in-process: tests/trainer_jobs/test_crash_points.py."""

import time

import pytest

from gossip.hashing import blake2b256
from node import control
from node.keystore import load_or_create_identity
from node.procs import start_peer, stop_processes
from node.records import read_records
from node.taskfile import task_from_dict
from swarm.jobs import GenerateJob, InitJob, TrainJob
from swarm.taskparams import task_spec
from tests.node.helpers import wait_for

pytestmark = pytest.mark.slow
TABLE = {"task": {"name": "digit-sort-crash", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                  "async_level": 2, "lifetime_hours": 1, "trainers": ["self"],
                  "params": {"group_size": 4, "prompts_per_step": 2, "warmup_steps": 1, "eval_prompts": 0,
                             "format_weight": 1.0, "lr": 1e-4, "max_new_tokens": 10}}}


def _trained_before(data, created_at):
    """What a trainer that published versions 0-2 of the task leaves in its data dir; their weights."""
    from trainer.jobs import JobWorker

    task = task_spec(task_from_dict(TABLE, load_or_create_identity(data), created_at))
    worker = JobWorker(data / "blobs", data / "state")
    v = worker.run("init", InitJob(task, seed=7))
    rollouts = (worker.run("generate", GenerateJob(task, 0, v.weights, (1, 2), 4, b"w" * 32)).blob,)
    published = [v.weights]
    for _ in range(2):
        v = worker.run("train", TrainJob(task, v.version, v.weights, rollouts, v.manifest["root"], v.manifest["depth"]))
        published.append(v.weights)
    return task.task_id, published


def _run(data, log, created_at, crash_at=None, monkeypatch=None):
    if crash_at:
        monkeypatch.setenv("SWARM_CRASH_AT", crash_at)
    try:
        proc, _ = start_peer(["--bootstrap", "--port", "0", "--data-dir", str(data), "--roles", "trainer"], log)
    finally:
        if crash_at:
            monkeypatch.delenv("SWARM_CRASH_AT")
    control.call_when_up(data, "announce-task", {"task": TABLE, "created_at": created_at})
    return proc


def _servable_names_hash_right(data):
    for d in (data / "blobs", data / "shards"):
        for f in d.iterdir():
            if not f.name.startswith("."):
                assert blake2b256(f.read_bytes()).hex() == f.name, f"{f} is half-written under a servable name"


def test_a_trainer_node_killed_mid_pack_restarts_and_loses_nothing_it_published(tmp_path, monkeypatch):
    data, created_at = tmp_path / "node", float(int(time.time()))
    task_id, published = _trained_before(data, created_at)

    proc = _run(data, tmp_path / "crashed.log", created_at, "version-pack", monkeypatch)
    try:
        proc.wait(timeout=180)
    finally:
        stop_processes([proc])
    crashed = (tmp_path / "crashed.log").read_text()
    assert proc.returncode == -9 and "crash-point point=version-pack" in crashed
    assert "version-published" not in crashed  # it died packing, before publishing anything
    _servable_names_hash_right(data)

    proc = _run(data, tmp_path / "restarted.log", created_at)
    try:
        again = wait_for(lambda: list(read_records(data, "version-published")), 180, "the version published again")
        snap = control.call(data, "status")
    finally:
        stop_processes([proc])
    assert [(r["task_id"], r["version"], r["weights"], r.get("resumed")) for r in again] == \
        [(task_id, 2, published[2].hex(), 1.0)]
    trainer = snap["work"]["trainer"][task_id]
    assert trainer["version"] == 2 and trainer["active"]
    for weights in published:  # every version published before the crash is still whole on disk
        assert blake2b256((data / "blobs" / weights.hex()).read_bytes()) == weights
    _servable_names_hash_right(data)
    assert "Traceback" not in (tmp_path / "restarted.log").read_text()
