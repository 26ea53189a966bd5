"""Shared by the multi-process node tests: polling a running node through its control API."""

from __future__ import annotations

import time

from node import control


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
