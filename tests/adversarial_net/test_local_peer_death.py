"""Issue 20 item 10: `swarm-node local --restart-dead` keeps the swarm training through a worker kill
and a trainer kill. The launcher says which peer died and that the others keep running, restarts the
dead peer on its data dir, the restarted trainer publishes versions again, and a killed peer's job
process dies with it without a traceback. Real processes, each stopped by PID in a finally."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from node.records import read_records

from ..node.helpers import wait_while_running as wait_for
from ..node.test_local_resume import TASK

pytestmark = pytest.mark.slow


def launch(base, task_file, log):
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "node.cli", "local", "--peers", "3", "--base-dir", str(base),
                             "--task", str(task_file), "--heartbeat-interval", "0.5", "--restart-dead"], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def pid_of(out: str, peer: int) -> int:
    pids = re.findall(rf"peer{peer} (?:started|restarted) \(pid (\d+)" if peer else
                      r"(?:bootstrap peer listening \S+ \(pid |peer0 restarted \(pid )(\d+)", out)
    return int(pids[-1])


def children(pid: int) -> list[int]:
    """The peer's child processes (its job process, and multiprocessing's helpers)."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(") ", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie not yet reaped by a dead parent's reaper counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def test_local_keeps_training_through_a_worker_kill_and_a_trainer_kill(tmp_path):
    base, task_file, log_path = tmp_path / "run", tmp_path / "task.toml", tmp_path / "local.log"
    task_file.write_text(TASK)
    out = lambda: log_path.read_text(errors="replace")  # noqa: E731
    versions = lambda: list(read_records(base / "peer0", "version-published"))  # noqa: E731
    with open(log_path, "wb") as log:
        proc = launch(base, task_file, log)
        try:
            wait_for(lambda: versions(), proc, 300, "version 0")
            worker = pid_of(out(), 2)
            worker_jobs = wait_for(lambda: children(worker), proc, 60, "peer2's job process")
            os.kill(worker, signal.SIGKILL)
            wait_for(lambda: "peer2 exited" in out() and "peer2 restarted" in out(), proc, 90, "peer2's restart")
            assert "the other 2 peers keep running" in out()
            wait_for(lambda: all(gone(p) for p in worker_jobs), proc, 10, "peer2's job process to die with it")

            wait_for(lambda: [r for r in versions() if r["version"] >= 2], proc, 240, "version 2")
            before = len(versions())
            last = max(r["version"] for r in versions())
            trainer = pid_of(out(), 0)
            trainer_jobs = wait_for(lambda: children(trainer), proc, 60, "the trainer's job process")
            os.kill(trainer, signal.SIGKILL)
            wait_for(lambda: "peer0 restarted" in out(), proc, 90, "the trainer's restart")
            wait_for(lambda: all(gone(p) for p in trainer_jobs), proc, 10, "the trainer's job process to die")
            wait_for(lambda: [r for r in versions()[before:] if r["version"] > last], proc, 240,
                     "a version after the last one the killed trainer published")
            after = versions()[before:]
            assert min(r["version"] for r in after) >= last  # resumed, not started over from version 0
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    assert code == 0, out()[-3000:]
    for peer in ("peer0", "peer2"):
        text = (base / peer / "node.log").read_text(errors="replace")
        assert "BrokenPipeError" not in text and "Traceback" not in text, text[-3000:]
    print(re.findall(r"\[local\] peer\d (?:exited|restarted).*", out()))
