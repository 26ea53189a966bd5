"""`swarm-node local` stopped with Ctrl-C and started again on the same base dir resumes the run:
the same task id is announced again and the trainer continues from the last version it trained
(published, or finished just as Ctrl-C came; not version 0). Real peer processes on 127.0.0.1 with a small, fast task; every process is
stopped in a finally (SIGINT to the launcher, which stops its peers by PID; SIGKILL to its group
as a last resort)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from node.records import read_records
from tests.node.helpers import wait_while_running as wait_for

pytestmark = pytest.mark.slow
TASK = """[task]
name = "digit-sort-resume"
model = "builtin:digit-sort-tiny"
env = "digit-sort"
async_level = 2
lifetime_hours = 1
trainers = ["self"]

[task.params]
group_size = 4
prompts_per_commit = 2
prompts_per_step = 4
warmup_steps = 2
eval_prompts = 0
max_new_tokens = 10
"""


def launch(base, task_file, log):
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "node.cli", "local", "--peers", "2", "--base-dir", str(base),
                             "--task", str(task_file), "--heartbeat-interval", "0.5"], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def versions(base):
    return list(read_records(base / "peer0", "version-published"))


def ctrl_c(proc):
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_local_run_stopped_with_ctrl_c_resumes_from_its_last_version(tmp_path):
    base, task_file = tmp_path / "run", tmp_path / "task.toml"
    task_file.write_text(TASK)
    with open(tmp_path / "first.log", "wb") as log:
        proc = launch(base, task_file, log)
        try:
            wait_for(lambda: [r for r in versions(base) if r["version"] >= 2], proc, 240, "version 2")
        finally:
            assert ctrl_c(proc) == 0
    first = versions(base)
    saved = json.loads((base / "task.json").read_text())
    task_id = saved["task_id"]
    assert {r["task_id"] for r in first} == {task_id}
    state = json.loads(next((base / "peer0" / "state").glob("*/trainer.json")).read_text())
    # what the stopped trainer published last, or the version after it: trainer.json is written
    # before a version is published, so a train job that Ctrl-C let finish leaves one not yet published
    assert state["version"] in (first[-1]["version"], first[-1]["version"] + 1)
    # the job process wrote the moments and master weights of that version as it stopped (between
    # stops it writes them only every trainer.jobs.SAVE_EVERY seconds)
    moments = json.loads(next((base / "peer0" / "state").glob("*/optimizer.json")).read_text())
    assert (moments["version"], moments["weights"]) == (state["version"], state["weights"])

    with open(tmp_path / "second.log", "wb") as log:
        proc = launch(base, task_file, log)
        try:
            again = wait_for(lambda: [r for r in versions(base)[len(first):] if r["version"] > state["version"]],
                             proc, 240, "a version after the resumed one")
        finally:
            assert ctrl_c(proc) == 0
    second = versions(base)[len(first):]
    assert second[0]["version"] == state["version"] and second[0].get("resumed") == 1.0
    assert second[0]["weights"] == state["weights"]  # the same weights, published again
    assert again[0]["version"] == state["version"] + 1 and {r["task_id"] for r in second} == {task_id}
    out = (tmp_path / "second.log").read_text()
    assert f"resuming task {task_id}" in out and "stopped 2 peers (exit codes [0, 0])" in out
