"""The lab's small tools: bounded commands, entering a namespace from a thread, installing iptables.

Every command has a time bound (`run`): a hung `ip` or `apt-get` ends the lab with a clear error
instead of hanging a test. `in_netns` runs a Python function on a fresh thread that has joined a
network namespace (setns(2) changes only the calling thread's namespace, and a socket keeps the
namespace it was made in), so a test can open sockets or call a node's loopback control API inside
a peer's namespace without starting a process.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from typing import Any, Callable

CLONE_NEWNET = 0x40000000
APT_TIMEOUT = 240.0


class LabError(RuntimeError):
    """A lab command failed or timed out; the message says which and why."""


def run(argv: list[str], timeout: float = 10.0, check: bool = True, input: bytes | None = None) -> str:
    """Run `argv` with a time bound; return its stdout. Raises LabError on failure (when `check`)."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise LabError(f"timed out after {timeout:g}s: {' '.join(argv)}") from None
    except FileNotFoundError:
        raise LabError(f"not installed: {argv[0]}") from None
    if check and done.returncode != 0:
        err = (done.stderr or done.stdout).decode(errors="replace").strip()
        raise LabError(f"failed ({done.returncode}): {' '.join(argv)}: {err}")
    return done.stdout.decode(errors="replace")


def in_netns(ns: str, fn: Callable[..., Any], *args: Any, timeout: float = 60.0, **kwargs: Any) -> Any:
    """Call `fn(*args, **kwargs)` on a new thread inside network namespace `ns`; return its result
    (or raise its exception). The caller's own thread stays in its namespace."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            enter_netns(ns)
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=body, name=f"netns:{ns}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise LabError(f"{getattr(fn, '__name__', fn)} in {ns} did not finish within {timeout:g}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def enter_netns(ns: str) -> None:
    """Move the calling thread into network namespace `ns` (as `ip netns exec` does for a process)."""
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise LabError(f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def ensure_iptables(timeout: float = APT_TIMEOUT) -> str:
    """The path of `iptables`, installing Debian's package first when it is missing (a fresh machine
    has none). Raises LabError with what failed: no apt-get, no package index, no network, or time."""
    found = shutil.which("iptables")
    if found:
        return found
    if not shutil.which("apt-get"):
        raise LabError("iptables is not installed and there is no apt-get to install it")
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
    attempt = [*env_cmd, "apt-get", "install", "-y", "--no-install-recommends", "iptables"]
    try:
        run(attempt, timeout=timeout)
    except LabError as first:
        try:  # the package index may be missing or stale: refresh it once and retry
            run([*env_cmd, "apt-get", "update"], timeout=timeout)
            run(attempt, timeout=timeout)
        except LabError as second:
            raise LabError(f"iptables is missing and installing it failed: {second} (first try: {first})") from None
    found = shutil.which("iptables")
    if not found:
        raise LabError("apt-get installed iptables but no iptables binary is on PATH")
    return found
