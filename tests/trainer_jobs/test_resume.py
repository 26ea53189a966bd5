"""A trainer restarted on its data dirs resumes: init answers the last version it published (not
version 0), and the next step is bit-identical to the one the stopped trainer would have taken."""

import json
import shutil

import pytest

from swarm.jobs import GenerateJob, InitJob, TrainJob
from tests.trainer_jobs.conftest import TASK
from trainer.jobs import JobWorker

pytestmark = pytest.mark.slow  # job processes that import torch, and several trained versions

WORKER = b"w" * 32  # with these prompts, as in test_jobs: batches known to hold a signal


def test_init_resumes_from_the_last_published_version(tmp_path):
    blobs, state = tmp_path / "blobs", tmp_path / "state"
    first = JobWorker(blobs, state)
    v0 = first.run("init", InitJob(TASK, seed=7))
    rollouts = tuple(first.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, WORKER)).blob
                     for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    v1 = first.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0))
    v2 = first.run("train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"], v1.manifest["depth"]))
    assert v1.stats["completions_used"] > 0 and v2.weights != v1.weights
    shutil.copytree(state, tmp_path / "state-at-v2")
    shutil.copytree(state, tmp_path / "state-at-v2-again")

    restarted = JobWorker(blobs, tmp_path / "state-at-v2")
    again = restarted.run("init", InitJob(TASK, seed=7))
    assert (again.version, again.weights) == (2, v2.weights) and again.stats == {"resumed": 1.0, "term": 0.0}
    assert again.manifest["encoding"] == "full"  # peers that rejoin need no ancestor to rebuild it
    # the stopped trainer's next step and the restarted one's are the same step: master weights
    # and optimizer moments come back from the state dir
    job3 = TrainJob(TASK, 2, v2.weights, rollouts, again.manifest["root"], 0)
    assert restarted.run("train", job3).weights == first.run("train", job3).weights

    # without its state dir a trainer starts over at version 0 (the same seeded base model)
    assert JobWorker(blobs, tmp_path / "empty").run("init", InitJob(TASK, seed=7)).weights == v0.weights
    # a state file whose weights blob is gone starts over too, rather than fail the task
    (blobs / v2.weights.hex()).rename(tmp_path / "moved")
    assert JobWorker(blobs, tmp_path / "state-at-v2-again").run("init", InitJob(TASK, seed=7)).version == 0


def test_a_corrupt_state_file_without_a_backup_is_set_aside_with_a_clear_message(tmp_path, capfd):
    """(A data dir from before trainer.backup.json; tests/trainer_jobs/test_crash_points.py has the backup.)"""
    (tmp_path / "state" / "t-jobs").mkdir(parents=True)
    (tmp_path / "state" / "t-jobs" / "trainer.json").write_text("{half a record")
    assert JobWorker(tmp_path / "blobs", tmp_path / "state").run("init", InitJob(TASK, seed=7)).version == 0
    err = capfd.readouterr().err
    assert "state-file-discarded" in err and "unreadable" in err and "starts this task again from version 0" in err
    assert (tmp_path / "state" / "t-jobs" / "trainer.json.damaged").read_text() == "{half a record"


def test_a_job_process_writes_moments_after_answering_and_a_crash_before_costs_only_the_moments(tmp_path):
    blobs, state = tmp_path / "blobs", tmp_path / "state"
    worker = JobWorker(blobs, state, defer_saves=True)  # as in node/jobrunner.py's job process
    v0 = worker.run("init", InitJob(TASK, seed=7))
    rollouts = tuple(worker.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, WORKER)).blob
                     for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    v1 = worker.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0))
    task_dir = state / "t-jobs"
    assert json.loads((task_dir / "trainer.json").read_text())["version"] == 1  # before the answer
    assert not (task_dir / "optimizer.json").exists()  # not yet: the answer goes first
    shutil.copytree(state, tmp_path / "crashed")  # the process dies right after answering
    worker.flush()
    assert json.loads((task_dir / "optimizer.json").read_text())["version"] == 1

    crashed = JobWorker(blobs, tmp_path / "crashed")
    again = crashed.run("init", InitJob(TASK, seed=7))
    assert (again.version, again.weights) == (1, v1.weights)  # the version is never lost
    job2 = TrainJob(TASK, 1, v1.weights, rollouts, again.manifest["root"], 0)
    fresh = crashed.run("train", job2)  # fresh moments: a valid step, not the bit-identical one
    assert fresh.version == 2 and fresh.weights != worker.run("train", job2).weights


def test_a_job_process_saves_state_every_so_often_and_when_it_closes(tmp_path):
    """With `save_every`, a step saves master weights and moments only if the last save is that old;
    `close` (the job process stopping) writes the rest, so a stopped trainer still resumes bit-exactly,
    and a crash before it costs the moments of the steps since the last save, never a version."""
    blobs, state = tmp_path / "blobs", tmp_path / "state"
    worker = JobWorker(blobs, state, defer_saves=True, save_every=3600.0)
    v0 = worker.run("init", InitJob(TASK, seed=7))
    rollouts = tuple(worker.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, WORKER)).blob
                     for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    v1 = worker.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0))
    v2 = worker.run("train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"], v1.manifest["depth"]))
    worker.flush()
    task_dir = state / "t-jobs"
    assert json.loads((task_dir / "trainer.json").read_text())["version"] == 2  # every step
    assert json.loads((task_dir / "optimizer.json").read_text())["version"] == 1  # the first step only
    shutil.copytree(state, tmp_path / "crashed")
    worker.close()
    assert json.loads((task_dir / "optimizer.json").read_text())["version"] == 2
    shutil.copytree(state, tmp_path / "stopped")

    job3 = TrainJob(TASK, 2, v2.weights, rollouts, v2.manifest["root"], v2.manifest["depth"])
    expected = worker.run("train", job3).weights
    resumed = JobWorker(blobs, tmp_path / "stopped")
    again = resumed.run("init", InitJob(TASK, seed=7))
    assert (again.version, again.weights) == (2, v2.weights)
    assert resumed.run("train", TrainJob(TASK, 2, v2.weights, rollouts, again.manifest["root"], 0)).weights == expected

    crashed = JobWorker(blobs, tmp_path / "crashed")
    again = crashed.run("init", InitJob(TASK, seed=7))
    assert (again.version, again.weights) == (2, v2.weights)  # the version is never lost
    fresh = crashed.run("train", TrainJob(TASK, 2, v2.weights, rollouts, again.manifest["root"], 0))
    assert fresh.version == 3 and fresh.weights != expected  # moments and master of version 1 do not fit 2


def test_saves_are_spaced_by_what_they_cost(tmp_path):
    """A save that takes 3 s is followed by none for 60 s, however short `save_every` is; 0 still
    means every step; and a job process records what its saves took."""
    from trainer.trainjob import SAVE_SHARE, save_interval

    assert save_interval(30.0, 3.0) == 3.0 * SAVE_SHARE == 60.0
    assert save_interval(30.0, 0.5) == 30.0
    assert save_interval(0.0, 3.0) == 0.0
    worker = JobWorker(tmp_path / "blobs", tmp_path / "state", defer_saves=True, save_every=30.0)
    v0 = worker.run("init", InitJob(TASK, seed=7))
    rollouts = tuple(worker.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, WORKER)).blob
                     for p in ((1, 2), (3, 4)))
    worker.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0))
    worker.flush()
    (trainer,) = worker.training._trainers.values()
    assert trainer.save_s > 0 and not trainer.unsaved
