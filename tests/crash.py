"""Shared by the crash tests: run a piece of work in a forked child armed with a crash point
(trainer/crashpoints.py) and check that it died there, killed, leaving its files as they were."""

from __future__ import annotations

import os
import signal
import time


def crash_in_child(point: str, work, timeout: float = 60.0) -> None:
    """Fork; the child arms `point` and runs `work()`; assert it was SIGKILLed at the point (a child
    that finishes, or fails, never reached it). Forking keeps the parent's imports and models: no
    second torch start per crash point."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            from trainer import crashpoints

            crashpoints.arm(point)
            work()
            code = 0
        except BaseException:  # noqa: BLE001 - reported by the exit code
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"crash point {point}: the child ran past {timeout} s")
        time.sleep(0.02)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"crash point {point} was never reached (exit status {os.waitstatus_to_exitcode(status)})")
