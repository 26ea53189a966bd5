"""A trainer's job process killed at every crash point of a step (trainer/crashpoints.py), then
restarted on the same dirs: its state is valid, nothing it published before is lost, and it trains on.

Each crash is a forked child of this process armed with one point, SIGKILLed there with the file it
was writing half-written; the "restart" is a fresh JobWorker on the dirs it left, as the node's next
job process would be. One run walks through every point in turn, each restart's trainer being the
next crash's, so the step after the last restart shows training going on.
"""

import dataclasses
import shutil

import pytest

from gossip.hashing import blake2b256
from swarm.jobs import GenerateJob, InitJob, TrainJob, UnpackJob
from tests.crash import crash_in_child
from tests.trainer_jobs.conftest import TASK as JOBS_TASK
from tests.trainer_jobs.test_versions import signed_form
from trainer.jobs import JobWorker

pytestmark = pytest.mark.slow  # a trained task, and a torch step per crash point
TASK = dataclasses.replace(JOBS_TASK, params={**JOBS_TASK.params, "eval_prompts": 0})
WORKER = b"w" * 32
# (point, whether the step's version is recorded in trainer.json when it dies there, so that the
# restarted trainer resumes it), in the order a step reaches them: pack the version (shards, blob),
# record it (trainer.json, then its backup), save master weights and moments, pack a checkpoint
STEP_POINTS = (("shard", False), ("version-pack", False), ("blob", False), ("trainer-json", False),
               ("trainer-json:2", True), ("blob:2", True), ("master-weights", True), ("optimizer", True),
               ("optimizer-json", True), ("checkpoint-pack", True))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A trainer's dirs after version 0 was published, and rollouts with a signal: (root, v0, rollouts)."""
    root = tmp_path_factory.mktemp("published")
    worker = JobWorker(root / "blobs", root / "state")
    v0 = worker.run("init", InitJob(TASK, seed=7))
    rollouts = tuple(worker.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, WORKER)).blob
                     for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    return root, v0, rollouts


def _dirs(published, tmp_path):
    root, v0, rollouts = published
    shutil.copytree(root, tmp_path / "node")
    return tmp_path / "node" / "blobs", tmp_path / "node" / "state", v0, rollouts


def _servable_names_hash_right(blobs, shards):
    """What the stores would serve (hex names; temp files are dot-names) is whole: every file hashes to its name."""
    for d in (blobs, shards):
        for f in d.iterdir():
            if not f.name.startswith("."):
                assert blake2b256(f.read_bytes()).hex() == f.name, f"{f} is half-written under a servable name"


def test_a_trainer_killed_at_every_crash_point_resumes_valid_and_keeps_what_it_published(published, tmp_path, capfd):
    blobs, state, last, rollouts = _dirs(published, tmp_path)
    for point, recorded in STEP_POINTS:
        step = TrainJob(TASK, last.version, last.weights, rollouts, last.manifest["root"], last.manifest["depth"],
                        pack_state=point == "checkpoint-pack")
        crash_in_child(point, lambda: JobWorker(blobs, state).run("train", step))
        assert f"crash-point point={point.split(':')[0]}" in capfd.readouterr().err
        restarted = JobWorker(blobs, state)
        resumed = restarted.run("init", InitJob(TASK, seed=7))
        assert resumed.version == last.version + recorded, point
        # nothing published before the crash is lost: that version still rebuilds from its shards,
        # checked against its manifest, to its weights (what a follower fetching it now gets)
        again = restarted.run("unpack", UnpackJob(TASK.task_id, last.version, signed_form(last), b""))
        assert again.weights == last.weights, point
        _servable_names_hash_right(blobs, blobs.parent / "shards")
        last = resumed
    nxt = restarted.run("train", TrainJob(TASK, last.version, last.weights, rollouts, last.manifest["root"], 0))
    assert nxt.version == last.version + 1 and nxt.stats["completions_used"] > 0  # training goes on


def test_a_worker_killed_while_recording_a_slice_generates_it_again(published, tmp_path):
    blobs, state, v0, _ = _dirs(published, tmp_path)
    job = GenerateJob(TASK, 0, v0.weights, (11, 12), 4, WORKER)
    crash_in_child("generated", lambda: JobWorker(blobs, state).run("generate", job))
    # the record of generated slices is the old one: the slice was never committed, so it is not
    # "generated before a restart"; the batch is made again, the same (seeded), and stored whole
    res = JobWorker(blobs, state).run("generate", job)
    assert not res.repeated and blake2b256((blobs / res.blob.hex()).read_bytes()) == res.blob


def test_damaged_state_files_are_set_aside_with_a_log_line_and_the_trainer_goes_on(published, tmp_path, capfd):
    blobs, state, v0, rollouts = _dirs(published, tmp_path)
    v1 = JobWorker(blobs, state).run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0))
    task_dir = state / TASK.task_id
    # a damaged trainer.json gives way to its backup: the version is not lost (with no backup, or a
    # damaged one, it starts the task again from version 0, saying so: tests/trainer_jobs/test_resume.py)
    for text in ("{half a rec", '{"version": 1, "weights": "not hex"}'):
        (task_dir / "trainer.json").write_text(text)
        resumed = JobWorker(blobs, state).run("init", InitJob(TASK, seed=7))
        assert (resumed.version, resumed.weights) == (1, v1.weights), text
        err = capfd.readouterr().err
        assert "state-file-discarded" in err and "trainer.json" in err, text
        assert (task_dir / "trainer.json.damaged").read_text() == text  # kept for the operator
    # damaged moments and master weights: fresh moments from the published weights, not a stuck trainer
    (task_dir / "optimizer.json").write_text("not json")
    (task_dir / "master-weights").write_text("zz")
    nxt = JobWorker(blobs, state).run("train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"], 0))
    assert nxt.version == 2
    err = capfd.readouterr().err
    assert err.count("state-file-discarded") == 2 and "fresh optimizer moments" in err
    # a moments file cut short under its record: both go aside, the next step runs with fresh moments
    moments = next(task_dir.glob("optimizer-*.safetensors"))
    moments.write_bytes(moments.read_bytes()[:100])
    assert JobWorker(blobs, state).run("train", TrainJob(TASK, 2, nxt.weights, rollouts, b"", 0)).version == 3
    assert f"state-file-discarded path={moments}" in capfd.readouterr().err
