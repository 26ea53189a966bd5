"""What `swarm-node local` does when one of its peers dies: keep the others running and say so, and
(with --restart-dead) start it again on its own data dir.

A swarm is meant to outlive any one peer: when a worker dies the others go on, and a trainer started
again on its data dir resumes from its last version. The launcher used to stop every peer as soon as
one exited, which turned one crash into the whole swarm's. Stopping is now only for when no peer is
left.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from node.procs import start_peer

MAX_RESTARTS = 5  # per peer: a peer that keeps dying has a problem a restart will not fix
RESTART_BACKOFF = 2.0  # seconds after a failed restart before the next try

PeerSpec = tuple[list[str], Path, int]  # `swarm-node start` args, log path, nice


class Keeper:
    """Watches the peer processes of a local swarm; ``procs`` is updated in place on a restart, so
    whoever stops the swarm by PID stops the live processes."""

    def __init__(self, procs: list[subprocess.Popen], dirs: list[Path], specs: list[PeerSpec], restart_dead: bool,
                 on_bootstrap_restart: Callable[[], None], log: Callable[[str], None]) -> None:
        self.procs, self.dirs, self.specs = procs, dirs, specs
        self.restart_dead = restart_dead
        self.on_bootstrap_restart = on_bootstrap_restart
        self.log = log
        self.restarts = [0] * len(procs)
        self._reported: set[int] = set()
        self._next_try = [0.0] * len(procs)

    def alive(self) -> int:
        return sum(1 for p in self.procs if p.poll() is None)

    def check(self) -> None:
        """Report newly dead peers, restart them if asked; RuntimeError when no peer is left."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is None:
                continue
            if i not in self._reported:
                self._reported.add(i)
                self._report_death(i, proc.returncode)
            if self.restart_dead and self.restarts[i] < MAX_RESTARTS and time.monotonic() >= self._next_try[i]:
                self._restart(i)
        if self.alive() == 0:
            raise RuntimeError(f"every peer has exited; see {self.dirs[0].parent}/peer*/node.log")

    def _report_death(self, i: int, code: int | None) -> None:
        others = self.alive()
        then = ("restarting it on its data dir" if self.restart_dead and self.restarts[i] < MAX_RESTARTS
                else "not restarting it (--restart-dead would)" if not self.restart_dead
                else f"not restarting it again after {MAX_RESTARTS} restarts")
        self.log(f"peer{i} exited with code {code} (see {self.dirs[i] / 'node.log'}); "
                 f"the other {others} peers keep running; {then}")

    def _restart(self, i: int) -> None:
        args, log_path, nice = self.specs[i]
        self.restarts[i] += 1
        old = self.procs[i]
        try:
            proc, addr = start_peer(args, log_path, nice=nice)
        except RuntimeError as exc:
            self._next_try[i] = time.monotonic() + RESTART_BACKOFF
            first = str(exc).splitlines()[0]
            self.log(f"peer{i} did not restart (try {self.restarts[i]} of {MAX_RESTARTS}): {first}")
            return
        if old.stdout:
            old.stdout.close()
        self.procs[i] = proc
        self._reported.discard(i)
        self.log(f"peer{i} restarted (pid {proc.pid}, restart {self.restarts[i]}) listening {addr}")
        if i == 0:
            try:
                self.on_bootstrap_restart()
            except Exception as exc:  # noqa: BLE001 - the swarm goes on; the operator is told
                self.log(f"could not announce the task again to the restarted peer0: {exc}")
