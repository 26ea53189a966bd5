"""One torch thread (the machine is shared) and one tiny initialised task shared by the job tests."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

from swarm.jobs import InitJob, TaskSpec  # noqa: E402

torch.set_num_threads(1)

# A few warm-up steps and a small evaluation keep init well under the per-test budget; the format
# reward gives this barely trained model mixed rewards, so GRPO steps have a signal.
PARAMS = {"warmup_steps": 3, "eval_prompts": 16, "group_size": 4, "prompts_per_step": 2, "format_weight": 1.0,
          "lr": 1e-4, "max_new_tokens": 10}
TASK = TaskSpec("t-jobs", "builtin:digit-sort-tiny", "digit-sort", PARAMS)


@pytest.fixture(scope="module")
def initialised(tmp_path_factory):
    """(worker, blob dir, state dir, VersionResult of version 0), shared within a test module."""
    from trainer.jobs import JobWorker

    root = tmp_path_factory.mktemp("jobs")
    worker = JobWorker(root / "blobs", root / "state")
    return worker, root / "blobs", root / "state", worker.run("init", InitJob(TASK, seed=7))
