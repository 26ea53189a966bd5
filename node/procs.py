"""Child peer processes: started with a bounded wait for readiness, always stopped by PID."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Linux: get `sig` when the parent dies instead of living on as an orphan (a peer whose launcher
    was killed; a job process whose peer was killed, which otherwise wrote BrokenPipeError tracebacks
    into a dead pipe). A parent that died before this call (ppid no longer `parent_pid`) is caught too.
    Linux sends it when the *thread* that forked the child exits, not only the process: start children
    from a thread that lives as long as they should (not a pool's worker thread, which retires when idle)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def _lower_priority(nice: int) -> None:
    """Run this process and its children at `nice`. Each peer starts a session of its own, and Linux
    gives every session its own scheduling group (autogroup) whose weight the process's nice value
    does not change: with nice alone, four local peers still got a quarter of the CPU each. The
    group's nice is set through /proc/self/autogroup (raising it needs no privilege)."""
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:
        pass  # no autogroups (another OS, or a kernel without them): the process nice is what counts


def start_peer(args: list[str], log_path: Path, ready_timeout: float = 60.0,
               nice: int = 0, wrap: list[str] | tuple[str, ...] = (),
               env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Run `swarm-node start ARGS` (at `nice` scheduling priority, job process included); return the
    process and the multiaddr it printed. `wrap` goes before the command and must exec it in place
    (netlab: `ip netns exec NS`), so the pid stays the node's. `env`: variables added to its environment."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    env = {**os.environ, **CHILD_ENV, **(env or {})}
    launcher = os.getpid()
    proc = subprocess.Popen([*wrap, sys.executable, "-m", "node.cli", "start", *args], stdout=subprocess.PIPE,
                            stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                            preexec_fn=lambda: (die_with_parent(launcher), _lower_priority(nice) if nice else None))
    log.close()
    deadline = time.monotonic() + ready_timeout
    line = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
            if b"\n" in line:
                first = line.split(b"\n", 1)[0].decode(errors="replace")
                if first.startswith("listening "):
                    return proc, first.split(" ", 1)[1].strip()
                break
        elif proc.poll() is not None:
            break
    stop_processes([proc])
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    raise RuntimeError(f"peer did not start (see {log_path}):\n{tail}")


def stop_processes(procs: list[subprocess.Popen], grace: float = 5.0) -> list[int | None]:
    """SIGINT each, wait up to `grace` seconds in total, SIGKILL what is left. Returns exit codes."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # stuck in the kernel (uninterruptible): reported, not waited on
                pass
    for proc in procs:
        if proc.stdout:
            proc.stdout.close()
    return [proc.returncode for proc in procs]
