"""`--job-device cuda`: the job process runs the built-in task's models on a GPU. Its rollouts pass a
CPU validator's checks (fp32 on both sides), and a GPU validator passes CPU rollouts."""

import pytest
import torch

from gossip.assignment import assign_prompts
from swarm.jobs import GenerateJob, InitJob, TrainJob, VerifyJob
from tests.trainer_jobs.conftest import TASK
from trainer.jobs import JobWorker

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

WORKER = b"g" * 32
ASSIGNED = tuple(assign_prompts(TASK.task_id, WORKER, 0, 8, 1 << 30))


def test_a_cuda_job_process_trains_and_its_rollouts_verify_on_cpu_and_back(tmp_path):
    pytest.importorskip("toploc", reason="toploc is built from source by scripts/setup.sh")
    gpu = JobWorker(tmp_path / "blobs", tmp_path / "gpu-state", device="cuda")
    cpu = JobWorker(tmp_path / "blobs", tmp_path / "cpu-state")  # the same blob store: the same version 0
    v0 = cpu.run("init", InitJob(TASK, seed=7))  # test_jobs.py's version 0 (tests/node_jobs inits on a GPU)
    assert next(gpu.models.policy(TASK.model, v0.weights)[0].parameters()).device.type == "cuda"

    def generate(worker, batch):
        prompts = ASSIGNED[batch * 4:batch * 4 + 4]
        return prompts, worker.run("generate", GenerateJob(TASK, 0, v0.weights, prompts, 4, WORKER))

    def verify(worker, prompts, res):
        return worker.run("verify", VerifyJob(TASK, WORKER, 0, v0.weights, res.blob, prompts, 4, res.mean_reward,
                                              res.num_tokens))

    for maker, checker in ((gpu, cpu), (cpu, gpu)):
        for batch in (0, 1):
            prompts, res = generate(maker, batch)
            verdict = verify(checker, prompts, res)
            assert verdict.passed, (maker.device, checker.device, verdict.reason, verdict.detail)
    # the GRPO step on the GPU, on test_jobs.py's batches (known to hold a signal for this version 0)
    rollouts = tuple(gpu.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, b"w" * 32)).blob
                     for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    v1 = gpu.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0))
    assert v1.version == 1 and v1.stats["completions_used"] > 0, v1.stats
    assert v1.weights != v0.weights and v1.stats["grad_norm"] > 0


def test_a_cuda_trainers_checkpoint_continues_on_a_cuda_standby_exactly(tmp_path):
    """The trainer state of a GPU job process (moments on the device) packs to the same format and a
    GPU standby given it takes the step the active trainer would have taken, bit for bit."""
    import shutil

    from swarm.roles.trainerstate import checkpoint_of
    from trainer import checkpoint

    active = JobWorker(tmp_path / "a" / "blobs", tmp_path / "a" / "state", device="cuda")
    v0 = active.run("init", InitJob(TASK, seed=7))
    rollouts = tuple(active.run("generate", GenerateJob(TASK, 0, v0.weights, p, 4, b"w" * 32)).blob
                     for p in ((1, 2), (3, 4), (5, 6), (7, 8)))
    v1 = active.run("train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0, pack_state=True))
    c = checkpoint_of(1.7e9, "0" * 16, 0, 0, v1.state)
    for sub in ("blobs", "shards"):
        shutil.copytree(tmp_path / "a" / sub, tmp_path / "b" / sub)
    standby = JobWorker(tmp_path / "b" / "blobs", tmp_path / "b" / "state", device="cuda")
    taken = standby.run("train", TrainJob(TASK, 1, v1.weights, rollouts, b"", 0, term=1, state=c))
    would_have = active.run("train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"],
                                              v1.manifest["depth"]))
    assert taken.stats["state_restored"] == checkpoint.EXACT
    assert taken.weights == would_have.weights
