"""An environment from another package: examples/swarm-env-example, installed with pip (no network)
into a folder on the job process's path, registers "digit-reverse" in the `swarm.environments`
entry-point group; a task names it, its version is pinned and checked, and the jobs run on it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.jobs import TaskSpec
from trainer.jobenv import TaskRefused, task_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "swarm-env-example"

# Run with the plugin installed: pins, init, generate, verify, and a task pinning another version.
SCRIPT = r"""
import json, sys
from pathlib import Path
from gossip.assignment import assign_prompts
from swarm.jobs import GenerateJob, InitJob, TaskSpec, VerifyJob
from trainer.jobs import JobError, JobWorker
from trainer.pins import pins_for

root = Path(sys.argv[1])
out = {"pins": pins_for("builtin:digit-sort-tiny", "digit-reverse", {"env.max_len": 6})}
params = {"env.max_len": 6, **out["pins"], "warmup_steps": 2, "eval_prompts": 4, "group_size": 2,
          "max_new_tokens": 8}
task = TaskSpec("plugin", "builtin:digit-sort-tiny", "digit-reverse", params)
worker = JobWorker(root / "blobs", root / "state")
v0 = worker.run("init", InitJob(task, seed=1))
mine = tuple(assign_prompts(task.task_id, b"w" * 32, 0, 4, 1 << 30))  # what a validator checks
batch = worker.run("generate", GenerateJob(task, 0, v0.weights, mine, 2, b"w" * 32))
verdict = worker.run("verify", VerifyJob(task, b"w" * 32, 0, v0.weights, batch.blob, mine, 2,
                                         batch.mean_reward, batch.num_tokens))
out["verify"] = [verdict.passed, verdict.reason]
old = TaskSpec("plugin-old", task.model, task.env, {**params, "env_version": "swarm-env-example==0.0.9"})
try:
    worker.run("generate", GenerateJob(old, 0, v0.weights, (3, 4), 2, b"w" * 32))
except JobError as exc:
    out["old"] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The example package installed by pip from a copy of its folder (the build leaves files there)."""
    tmp = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(EXAMPLE, tmp / "src")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(tmp / "site"), str(source)],
                   check=True, capture_output=True, timeout=300)
    return tmp / "site"


def test_an_installed_plugin_environment_is_pinned_and_runs_jobs(site, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["pins"] == {"env_version": "swarm-env-example==0.1.0"}
    assert out["verify"] == [True, "ok"]  # a validator rebuilds the plugin's prompts and rewards
    assert "needs swarm-env-example==0.0.9, this peer has swarm-env-example==0.1.0" in out["old"]
    assert "pip install 'swarm-env-example==0.0.9'" in out["old"]


def test_a_peer_without_the_plugin_refuses_saying_what_to_install():
    spec = TaskSpec("no-plugin", "builtin:digit-sort-tiny", "digit-reverse",
                    {"env_version": "swarm-env-example==0.1.0"})
    with pytest.raises(TaskRefused, match=r"unknown environment 'digit-reverse'.*swarm\.environments.*"
                                          r"pip install 'swarm-env-example==0\.1\.0'"):
        task_env(spec)
