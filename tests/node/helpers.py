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
