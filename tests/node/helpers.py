"""Shared by the multi-process node tests: starting a trainer with its workers, and polling a running
node through its control API."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from node import control
from node.procs import start_peer

FAST = ["--heartbeat-interval", "0.5", "--gone-after", "4"]


def start_trainer_with_workers(procs: list[subprocess.Popen], trainer: Path,
                               workers: list[tuple[Path, list[str], dict | None]],
                               trainer_env: dict | None = None) -> dict[Path, str]:
    """Start `trainer` (the bootstrap, role trainer) and each worker (data dir, extra flags, environment)
    joining it, appending each process to `procs` as soon as it runs (the caller stops them all in a
    finally, whatever fails later); wait until the trainer hears every worker; return each data dir's
    peer id."""
    proc, boot = start_peer(["--bootstrap", "--data-dir", str(trainer), "--roles", "trainer", *FAST],
                            trainer / "node.log", env=trainer_env)
    procs.append(proc)
    for data_dir, extra, env in workers:
        proc, _ = start_peer(["--join", boot, "--data-dir", str(data_dir), "--roles", "worker", *FAST, *extra],
                             data_dir / "node.log", env=env)
        procs.append(proc)
    ids = {d: control.call(d, "status")["peer_id"] for d in [trainer, *(w[0] for w in workers)]}
    wait_for(lambda: len(control.call(trainer, "status")["alive"]) == len(workers), 30, "the workers to join")
    return ids


def wait_for(predicate, timeout: float, what: str, step: float = 0.25):
    """Poll `predicate` until it returns something true; a node not answering yet counts as false."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except control.ControlError:
            pass
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def wait_while_running(predicate, proc, timeout: float, what: str):
    """`predicate`'s first true value, polled while `proc` (a `swarm-node local`) keeps running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"swarm-node local exited while waiting for {what}"
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
