"""Trainer checkpoints: a standby given the active trainer's checkpoint continues its run exactly.

The claim of issue 19's trainer state: with the checkpoint of the version it continues from, a
standby's first step is bit-identical to the step the active trainer would have taken (master
weights, moments, step and RNG all carried); with an older checkpoint it gets the moments; with an
unreadable one it goes on with fresh moments instead of failing the takeover.
"""

import shutil

import pytest

from gossip.messages import TrainerCheckpoint
from swarm.jobs import GenerateJob, InitJob, TrainJob
from swarm.roles.trainerstate import checkpoint_of
from tests.trainer_jobs.conftest import TASK
from trainer import checkpoint
from trainer.jobs import JobWorker

pytestmark = pytest.mark.slow  # job processes that import torch, and several trained versions

WORKER = b"w" * 32
NOW = 1_700_000_000.0


def _rollouts(worker, v0):
    return tuple(worker.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, WORKER)).blob
                 for p in ((1, 2), (3, 4), (5, 6), (7, 8)))


def _standby(tmp_path, name):
    """Another trainer's job process: the same blobs (weights and rollouts it fetched), the shards it
    fetched, no state dir of its own."""
    root = tmp_path / name
    shutil.copytree(tmp_path / "a" / "blobs", root / "blobs")
    shutil.copytree(tmp_path / "a" / "shards", root / "shards")
    return JobWorker(root / "blobs", root / "state")


def test_a_standby_with_the_checkpoint_takes_the_step_the_active_trainer_would_have_taken(tmp_path):
    active = JobWorker(tmp_path / "a" / "blobs", tmp_path / "a" / "state")
    v0 = active.run("init", InitJob(TASK, seed=7))
    rollouts = _rollouts(active, v0)
    v1 = active.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0, term=0))
    assert v1.state is None  # not asked to pack
    v2 = active.run("train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"], v1.manifest["depth"],
                                      term=0, pack_state=True))
    assert v2.state is not None and v2.state["version"] == 2 and v2.state["weights_root"] == v2.manifest["root"]
    c = checkpoint_of(NOW, "0" * 16, 0, 0, v2.state)  # a task id as the wire has them
    # every shard hashes to the signed checkpoint and rebuilds its tensors (checked by hash)
    tensors = checkpoint.read(c, active.versions.shards.read)
    assert {"rng.torch", "weights"} <= set(tensors) and any(k.startswith("exp_avg_sq.") for k in tensors)
    steps = {int(v.item()) for k, v in tensors.items() if k.startswith("step.")}
    assert isinstance(c, TrainerCheckpoint) and steps == {c.step} and c.step >= 2  # optimizer steps, 1+ per version

    standby = _standby(tmp_path, "b")
    fresh = _standby(tmp_path, "c")
    # the standby continues from version 2 in term 1, numbering its version above any heard
    job = TrainJob(TASK, 2, v2.weights, rollouts, b"", 0, term=1, state=c)
    taken = standby.run("train", job)
    would_have = active.run("train", TrainJob(TASK, 2, v2.weights, rollouts, v2.manifest["root"],
                                              v2.manifest["depth"], term=0))
    assert taken.stats["state_restored"] == checkpoint.EXACT
    assert taken.weights == would_have.weights  # bit-identical: master weights, moments, step and RNG
    without = fresh.run("train", TrainJob(TASK, 2, v2.weights, rollouts, b"", 0, term=1))
    assert without.weights != would_have.weights and "state_restored" not in without.stats


def test_an_older_checkpoint_gives_the_moments_and_a_damaged_one_fresh_moments(tmp_path):
    active = JobWorker(tmp_path / "a" / "blobs", tmp_path / "a" / "state")
    v0 = active.run("init", InitJob(TASK, seed=7))
    rollouts = _rollouts(active, v0)
    v1 = active.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0, pack_state=True))
    v2 = active.run("train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"], v1.manifest["depth"]))
    c = checkpoint_of(NOW, "0" * 16, 0, 0, v1.state)
    older = _standby(tmp_path, "b").run("train", TrainJob(TASK, 2, v2.weights, rollouts, b"", 0, term=1, state=c))
    assert older.stats["state_restored"] == checkpoint.MOMENTS and older.version == 3

    damaged = _standby(tmp_path, "c")
    (tmp_path / "c" / "shards" / c.shard_hashes[0].hex()).write_bytes(b"not the shard")
    result = damaged.run("train", TrainJob(TASK, 2, v2.weights, rollouts, b"", 0, term=1, state=c))
    assert result.stats["state_restored"] == -1 and result.version == 3  # the takeover goes on


def test_the_term_is_recorded_with_each_version_and_comes_back_on_resume(tmp_path):
    worker = JobWorker(tmp_path / "blobs", tmp_path / "state")
    v0 = worker.run("init", InitJob(TASK, seed=7))
    rollouts = _rollouts(worker, v0)
    worker.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0, term=3))
    again = JobWorker(tmp_path / "blobs", tmp_path / "state").run("init", InitJob(TASK, seed=7))
    assert again.version == 1 and again.stats["term"] == 3.0
