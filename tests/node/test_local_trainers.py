"""`swarm-node local --trainers 2`: real peer processes; peer1 runs as the standby trainer, the task
ranks peer0 then peer1, and the progress lines name the active trainer and its term."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from node.cli import main
from tests.node.helpers import wait_while_running
from tests.node.test_local_resume import TASK, ctrl_c

pytestmark = pytest.mark.slow


def test_local_with_two_trainers_ranks_them_and_reports_the_active_one(tmp_path, capsys):
    task_file = tmp_path / "task.toml"
    task_file.write_text(TASK)
    base, log_path = tmp_path / "swarm", tmp_path / "local.log"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "node.cli", "local", "--peers", "3", "--trainers", "2",
                                 "--base-dir", str(base), "--task", str(task_file), "--heartbeat-interval", "0.5"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            # waits for what it checks, not a fixed duration: version 0 takes longer on a loaded machine
            wait_while_running(lambda: "active trainer: peer0 (rank 0, term 0" in log_path.read_text(), proc, 180,
                               "the active-trainer line")
        finally:
            code = ctrl_c(proc)
    out = log_path.read_text()
    assert code == 0, out[-2000:]
    assert "peer1 started" in out and "as a standby trainer" in out
    trainers = json.loads((base / "task.json").read_text())["task"]["task"]["trainers"]
    assert main(["id", "--data-dir", str(base / "peer1")]) == 0
    assert trainers == ["self", capsys.readouterr().out.strip()]  # rank 0 the announcer, rank 1 peer1
    assert "exit codes [0, 0, 0]" in out
