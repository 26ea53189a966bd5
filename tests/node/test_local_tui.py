"""`swarm-node local --tui`: the terminal UI opens over the local swarm in a real terminal (a pty),
shows its peers, and quitting it stops every peer. Progress goes to <base>/local.log meanwhile, so
nothing scribbles over the UI. The launcher is stopped in a finally (SIGINT, then SIGKILL to its
process group), and the peers it started must be gone by PID afterwards."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]")


def drain(fd, seen: bytearray, wait: float) -> None:
    """Read what the terminal shows. The UI blocks on a full pty, so the test never stops reading."""
    ready, _, _ = select.select([fd], [], [], wait)
    if ready:
        try:
            seen += os.read(fd, 65536)
        except OSError:  # the pty closes when the launcher exits
            pass


def read_until(fd, proc, pattern: bytes, timeout: float, seen: bytearray) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pattern in ANSI.sub(b"", bytes(seen)):
            return
        assert proc.poll() is None, f"launcher exited early: {ANSI.sub(b'', bytes(seen))[-2000:]!r}"
        drain(fd, seen, 0.5)
    raise AssertionError(f"no {pattern!r} on screen after {timeout} s: {ANSI.sub(b'', bytes(seen))[-2000:]!r}")


def wait_exit(fd, proc, timeout: float, seen: bytearray) -> int:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        drain(fd, seen, 0.2)
    assert proc.poll() is not None, f"launcher still running {timeout} s after q: {ANSI.sub(b'', bytes(seen))[-2000:]!r}"
    return proc.returncode


def peer_pids(base) -> list[int]:
    return [json.loads((d / "control.json").read_text())["pid"] for d in sorted(base.glob("peer*"))]


def alive(pid: int) -> bool:
    """Running and not a zombie (a stopped peer its parent has not reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_local_tui_shows_the_swarm_and_q_stops_it(tmp_path):
    base = tmp_path / "run"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TERM": "xterm-256color", "COLUMNS": "140", "LINES": "40"}
    main, child = pty.openpty()
    os.set_blocking(main, False)
    proc = subprocess.Popen([sys.executable, "-m", "node.cli", "local", "--peers", "2", "--base-dir", str(base),
                             "--heartbeat-interval", "0.5", "--tui"], stdin=child, stdout=child, stderr=child, env=env,
                            start_new_session=True)
    os.close(child)
    seen = bytearray()
    pids: list[int] = []
    try:
        read_until(main, proc, b"opening the TUI", 90, seen)
        pids = peer_pids(base)
        assert len(pids) == 2
        read_until(main, proc, b"Overview", 60, seen)
        read_until(main, proc, b"connected", 60, seen)  # the header once the first poll answered
        os.write(main, b"q")
        assert wait_exit(main, proc, 60, seen) == 0
        assert b"stopped 2 peers" in ANSI.sub(b"", bytes(seen))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        os.close(main)
    log = (base / "local.log").read_text()
    assert "announced task" not in log  # announced before the UI opened, on the terminal
    assert "peers alive per node" in log  # supervision kept reporting, into the file
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)], "peers still running after the UI quit"
