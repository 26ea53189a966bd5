"""`swarm-node local --trainers 2`: real peer processes; peer1 runs as the standby trainer, the task
ranks peer0 then peer1, and the progress lines name the active trainer and its term."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from node.cli import main
from tests.node.test_local_resume import TASK

pytestmark = pytest.mark.slow


def test_local_with_two_trainers_ranks_them_and_reports_the_active_one(tmp_path, capsys):
    task_file = tmp_path / "task.toml"
    task_file.write_text(TASK)
    base = tmp_path / "swarm"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "node.cli", "local", "--peers", "3", "--trainers", "2",
                          "--base-dir", str(base), "--task", str(task_file), "--heartbeat-interval", "0.5",
                          "--duration", "20"], capture_output=True, text=True, env=env, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "peer1 started" in out.stdout and "as a standby trainer" in out.stdout
    assert "active trainer: peer0 (rank 0, term 0" in out.stdout, out.stdout[-2000:]
    trainers = json.loads((base / "task.json").read_text())["task"]["task"]["trainers"]
    assert main(["id", "--data-dir", str(base / "peer1")]) == 0
    assert trainers == ["self", capsys.readouterr().out.strip()]  # rank 0 the announcer, rank 1 peer1
    assert "exit codes [0, 0, 0]" in out.stdout
