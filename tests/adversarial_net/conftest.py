"""The ``victim`` fixture: a victim node process (victim.py), stopped by its PID in bounded time."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 5 s: every process a test starts is gone when it ends."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def victim(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, subprocess.Popen]]:
    """(multiaddr, peer id, process) of a fresh victim node."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "tests.adversarial_net.victim", request.node.name],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().strip() if ready else ""  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("victim node did not start within 30 s")
        yield line, line.rsplit("/", 1)[1], proc
    finally:
        stop(proc)
