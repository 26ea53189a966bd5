"""Job round trips with the tiny built-in model: init -> generate -> train -> resume, and bad input."""

import dataclasses
import shutil

import pytest
import torch

from gossip.assignment import sample_seed
from gossip.hashing import blake2b256
from proofs.toploc import proof_size
from swarm.jobs import GenerateJob, GenerateResult, InitJob, TaskSpec, TrainJob, VersionResult
from tests.trainer_jobs.conftest import TASK
from trainer.batch_codec import decode
from trainer.jobs import JobError, JobWorker
from trainer.policy import base_model, load_weights

WORKER = b"w" * 32


def gen(worker, v0, version=0, prompts=(11, 42), task=TASK, worker_key=WORKER):
    return worker.run("generate", GenerateJob(task, version, v0.weights, prompts, 4, worker_key))


def test_init_stores_a_checked_weights_blob(initialised):
    worker, blobs, _, v0 = initialised
    assert isinstance(v0, VersionResult) and v0.version == 0
    data = (blobs / v0.weights.hex()).read_bytes()
    assert blake2b256(data) == v0.weights and len(data) == v0.size
    assert 0.0 <= v0.stats["heldout_greedy"] <= 1.0 and v0.stats["warmup_loss"] > 0
    model, _ = base_model(TASK.model, 0)
    load_weights(model, data)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # same task and seed -> same version 0 on every trainer
    again = JobWorker(blobs, blobs.parent / "other-state").run("init", InitJob(TASK, seed=7))
    assert again.weights == v0.weights


def test_generate_is_seeded_scored_and_decodable(initialised):
    worker, blobs, _, v0 = initialised
    res = gen(worker, v0)
    assert isinstance(res, GenerateResult)
    batch = decode((blobs / res.blob.hex()).read_bytes())
    assert batch.task_id == TASK.task_id and batch.prompt_indices == (11, 42) and batch.samples_per_prompt == 4
    assert batch.worker_key == WORKER and batch.version == 0
    assert [s.seed for s in batch.samples] == [sample_seed(TASK.task_id, WORKER, 0, p, s)
                                                for p in (11, 42) for s in range(4)]
    assert res.num_tokens == batch.num_tokens > 0 and res.mean_reward == pytest.approx(batch.mean_reward)
    for s in batch.samples:
        assert s.reward in (0.0, 1.0) and len(s.logprobs) == len(s.token_ids)
        assert len(s.proof) == proof_size(len(s.token_ids))  # one TOPLOC proof per completion
    # replayable: the same job in another job process gives the same bytes
    assert gen(JobWorker(blobs, blobs.parent / "state-again"), v0).blob == res.blob
    assert gen(worker, v0, worker_key=b"x" * 32).blob != res.blob


def test_a_slice_generated_before_a_restart_is_not_generated_again(initialised):
    """A restarted worker's batch counter starts at 0 again; committing a slice twice would get it
    banned as a replayer, so the job answers `repeated` for a slice its state dir says it made."""
    worker, blobs, state, v0 = initialised
    first = gen(worker, v0, prompts=(101, 102))
    assert not first.repeated and first.blob
    restarted = JobWorker(blobs, state)  # a new job process on the same data dir
    again = gen(restarted, v0, prompts=(101, 102))
    assert again.repeated and again.blob == b"" and again.num_tokens == 0
    assert not gen(restarted, v0, prompts=(103, 104)).repeated  # the next slice is generated
    assert not gen(restarted, v0, prompts=(101, 102), worker_key=b"y" * 32).repeated  # another worker's slice


def test_a_failed_generation_is_not_recorded(initialised, monkeypatch):
    worker, _, _, v0 = initialised
    from trainer.envs import DigitSort

    def broken(self, prompt, text, finished=True):
        raise ZeroDivisionError("checker bug")

    with monkeypatch.context() as m:
        m.setattr(DigitSort, "reward", broken)
        with pytest.raises(JobError):
            gen(worker, v0, prompts=(201, 202))
    assert not gen(worker, v0, prompts=(201, 202)).repeated


def test_train_makes_version_one_and_resumes_from_state_dir(initialised):
    worker, blobs, state, v0 = initialised
    rollouts = tuple(gen(worker, v0, prompts=p).blob for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    v1 = worker.run("train", TrainJob(TASK, 0, v0.weights, rollouts))
    assert v1.version == 1 and v1.weights != v0.weights and blake2b256((blobs / v1.weights.hex()).read_bytes()) == v1.weights
    assert v1.stats["completions"] == 32 and 0 <= v1.stats["completions_used"] <= 32
    assert v1.stats["completions_used"] > 0 and {"loss", "reward", "clip_frac", "grad_norm"} <= set(v1.stats)
    # step 2 reuses version 0's rollouts (one version of lag, as async workers deliver them): the
    # barely trained policy rarely scores, and these batches are known to hold a signal
    job2 = TrainJob(TASK, 1, v1.weights, rollouts)
    # what a trainer killed right after v1 left (step 2 deletes v1's master weights, so the blobs too)
    shutil.copytree(state, state.parent / "after-v1")
    shutil.copytree(blobs, blobs.parent / "blobs-after-v1")
    in_memory = worker.run("train", job2)
    # a restarted trainer (new worker, the dirs it left) resumes with the saved optimizer: bit-identical
    resumed = JobWorker(blobs.parent / "blobs-after-v1", state.parent / "after-v1").run("train", job2)
    assert resumed.version == in_memory.version == 2 and resumed.weights == in_memory.weights
    # without the saved optimizer moments the step differs (so the check above means something)
    fresh = JobWorker(blobs, state.parent / "empty-state").run("train", job2)
    assert in_memory.stats["completions_used"] > 0 and fresh.weights != in_memory.weights


def test_train_refuses_batches_of_another_task(initialised):
    worker, _, _, v0 = initialised
    other = dataclasses.replace(TASK, task_id="other-task")
    blob = gen(worker, v0, task=other).blob
    with pytest.raises(JobError, match="belongs to task 'other-task'"):
        worker.run("train", TrainJob(TASK, 0, v0.weights, (blob,)))


def test_missing_and_corrupt_blobs(initialised):
    worker, blobs, _, v0 = initialised
    with pytest.raises(JobError, match="not in"):
        worker.run("generate", GenerateJob(TASK, 0, b"\x01" * 32, (1,), 2, WORKER))
    fake = blake2b256(b"x")
    (blobs / fake.hex()).write_bytes(b"y")
    with pytest.raises(JobError, match="corrupt"):
        worker.run("train", TrainJob(TASK, 0, v0.weights, (fake,)))


def test_bad_models_and_environments(initialised, tmp_path):
    worker, _, _, v0 = initialised
    with pytest.raises(JobError, match="unknown model 'gpt-17'.*builtin:digit-sort-tiny"):
        worker.run("init", InitJob(dataclasses.replace(TASK, model="gpt-17"), 0))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{not json")
    with pytest.raises(JobError, match="not valid JSON"):
        worker.run("init", InitJob(dataclasses.replace(TASK, model=f"dir:{tmp_path / 'm'}"), 0))
    with pytest.raises(JobError, match="unknown environment"):
        worker.run("init", InitJob(dataclasses.replace(TASK, env="chess"), 0))
    with pytest.raises(JobError, match="task param lr"):
        gen(worker, v0, task=dataclasses.replace(TASK, params={**TASK.params, "lr": "fast"}))
    with pytest.raises(JobError, match="unknown job kind"):
        worker.run("mine-bitcoin", None)


def test_environment_that_raises_is_a_clear_error(initialised, monkeypatch):
    worker, _, _, v0 = initialised
    from trainer.envs import DigitSort

    def broken(self, prompt, text, finished=True):
        raise ZeroDivisionError("checker bug")

    monkeypatch.setattr(DigitSort, "reward", broken)
    with pytest.raises(JobError, match="environment 'digit-sort' raised ZeroDivisionError.*checker bug"):
        gen(worker, v0, prompts=(301, 302))
