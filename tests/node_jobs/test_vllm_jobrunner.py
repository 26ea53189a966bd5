"""A node's job process generating with vLLM (`--inference vllm`): the engine runs inside the spawned
daemon child (no engine-core process of its own, which a daemon may not start), is kept up across
versions, and its batches pass the torch checks of the trainer's other job process. Needs vllm: run by
scripts/test_vllm.sh (SWARM_REQUIRE_VLLM=1: an import error fails the lane), skipped elsewhere."""

import os

import pytest
import trio

if os.environ.get("SWARM_REQUIRE_VLLM"):
    import vllm  # noqa: F401
else:
    pytest.importorskip("vllm", reason="needs vllm: bash scripts/test_vllm.sh runs this in .venv-vllm")

from node.jobrunner import JobRunner  # noqa: E402
from swarm.io import JobFinished, RunJob  # noqa: E402
from swarm.jobs import GenerateJob, InitJob, TaskSpec, TrainJob, VerifyJob  # noqa: E402

pytestmark = pytest.mark.slow

TASK = TaskSpec("t-vllm-runner", "builtin:digit-sort-tiny", "digit-sort",
                {"warmup_steps": 2, "eval_prompts": 0, "group_size": 4, "prompts_per_commit": 2,
                 "prompts_per_step": 2, "format_weight": 1.0, "lr": 1e-4})
WORKER = b"w" * 32


async def test_a_vllm_job_process_generates_across_versions_and_its_batches_pass_torch_checks(tmp_path):
    from gossip.assignment import assign_prompts

    done: list[JobFinished] = []
    gen = JobRunner(tmp_path / "blobs", tmp_path / "state", done.append, inference="vllm")
    check = JobRunner(tmp_path / "blobs", tmp_path / "state-check", done.append)

    async def run(runner, job_id, kind, payload, timeout=240):
        runner.submit(RunJob(job_id, kind, payload))
        with trio.fail_after(timeout):
            while not any(d.job_id == job_id for d in done):
                await trio.sleep(0.05)
        d = next(d for d in done if d.job_id == job_id)
        assert d.ok, d.error
        return d.result

    async with trio.open_nursery() as nursery:
        await nursery.start(gen.run)
        await nursery.start(check.run)
        v = await run(check, 1, "init", InitJob(TASK, seed=3))
        pid = gen.pid
        for version in (0, 1):
            assigned = tuple(assign_prompts(TASK.task_id, WORKER, version, 2, 1 << 30))
            res = await run(gen, 10 + version, "generate", GenerateJob(TASK, version, v.weights, assigned, 4, WORKER))
            verdict = await run(check, 20 + version, "verify", VerifyJob(
                TASK, WORKER, version, v.weights, res.blob, assigned, 4, res.mean_reward, res.num_tokens))
            assert (verdict.passed, verdict.reason) == (True, "ok"), verdict
            if version == 0:  # a GRPO step makes version 1, whose weights the engine loads in place
                v = await run(check, 30, "train", TrainJob(TASK, 0, v.weights, (res.blob,), v.manifest["root"]))
                assert v.version == 1
        assert gen.pid == pid and gen.restarts == 0  # one job process, one engine, both versions
        nursery.cancel_scope.cancel()
