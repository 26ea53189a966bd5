"""Polls one node's control API from a background thread, so the UI never waits on a socket.

Why a thread of its own: `control.call` is a blocking socket call (up to its timeout when a node
hangs); run on the UI loop it would freeze the screen, and the node must not see more than one status
call per interval however slow the terminal is. The thread makes at most one call per `interval`,
only for the node currently selected, and hands each outcome to `on_result` (which must be
thread-safe: the app puts it on a queue).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class PollResult:
    data_dir: Path
    snapshot: dict | None  # None when the call failed
    error: str | None
    at: float  # time.monotonic() when the answer came


def default_call(data_dir: Path, cmd: str, args: dict | None = None, timeout: float = 10.0) -> Any:
    from node.control import call
    return call(data_dir, cmd, args, timeout=timeout)


class Poller:
    def __init__(self, data_dirs: list[Path], on_result: Callable[[PollResult], None], *, interval: float = 1.0,
                 call: Callable[..., Any] = default_call, timeout: float = 3.0) -> None:
        if not data_dirs:
            raise ValueError("need at least one data dir")
        self.data_dirs = [Path(p) for p in data_dirs]
        self.on_result = on_result
        self.interval = interval
        self.call = call
        self.timeout = timeout
        self._selected = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swarm-tui-poller", daemon=True)
        self.calls = 0  # status calls made (tests check the rate)

    @property
    def selected(self) -> Path:
        return self.data_dirs[self._selected]

    def select(self, index: int) -> None:
        """Watch another node; poll it at once instead of waiting for the next tick."""
        self._selected = index % len(self.data_dirs)
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def poll_once(self) -> PollResult:
        target = self.selected
        self.calls += 1
        try:
            snap = self.call(target, "status", None, timeout=self.timeout)
            if not isinstance(snap, dict):
                raise ValueError(f"status answered {type(snap).__name__}, not a snapshot")
            return PollResult(target, snap, None, time.monotonic())
        except Exception as exc:  # ControlError, a bad reply, anything: show it, keep polling
            return PollResult(target, None, str(exc) or type(exc).__name__, time.monotonic())

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            result = self.poll_once()
            if self._stop.is_set():
                return
            if result.data_dir == self.selected:  # a switch during the call makes this answer stale
                self.on_result(result)
            else:
                continue
            self._wake.wait(max(0.0, self.interval - (time.monotonic() - started)))
            self._wake.clear()
