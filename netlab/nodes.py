"""Real `swarm-node` processes in the lab: started inside a peer's namespace, listening on its lab
address, and reached through their loopback control API from a thread in that namespace.

    proc, addr = start_node(lab, peer, ["--bootstrap", "--data-dir", str(d), "--roles", "trainer"], d / "node.log")
    snap = node_call(lab, peer, d, "status")

The node's control API listens on 127.0.0.1 of its own namespace, which the test's namespace cannot
reach; `node_call` makes the same call from inside.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from netlab.lab import Lab, Peer
from node import control
from node.procs import start_peer


def start_node(lab: Lab, peer: Peer, args: list[str], log_path: Path,
               ready_timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """`swarm-node start ARGS --host <peer's lab address>` inside the peer's namespace. The lab
    keeps the process and stops it by PID at teardown if the caller has not."""
    proc, addr = start_peer([*args, "--host", peer.ip], log_path, ready_timeout=ready_timeout,
                            wrap=["ip", "netns", "exec", peer.ns])
    lab.procs.append(proc)
    return proc, addr


def node_call(lab: Lab, peer: Peer, data_dir: Path, cmd: str, args: dict | None = None,
              timeout: float = 30.0) -> Any:
    """node.control.call made from inside the peer's namespace (raises ControlError as it does)."""
    return lab.call(peer, control.call, data_dir, cmd, args, timeout=timeout)
