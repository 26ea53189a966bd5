"""One weight version spreading over real peer processes on 127.0.0.1 (bench/weights.py, tests).

    result = run_localhost(peers=8, size_mb=50, mode="swarm", workdir=Path("runs/weights"))

A seed node (`swarm-node start`, relay role) announces a task naming itself as trainer, writes a
version's shards (incompressible random bytes, the size of a packed version) into its shard store
and publishes the signed manifest (control command `publish-version`). `peers` other nodes run the
`mirror` role: they download the version through the shard exchange from everyone who has it, and
record `shards-complete` with a wall-clock timestamp. `mode="star"` runs them as `leech`es (download
only, serve nothing): the single-origin baseline. Every process is stopped by PID before returning.

`upload_mbps` gives every process (the seed too) an emulated uplink for shard answers (node/uplink.py,
`swarm-node start --upload-mbps`): all peers share this machine's cores, so unthrottled the swarm
measures the aggregate Noise + yamux throughput of the CPU; with uplinks whose sum the cores can
carry, it measures the protocol, as the simulator's per-peer links do.

Each peer's node CPU seconds while the version spreads are reported beside the MB it served and
fetched (`cpu_per_peer`, `cpu_s_per_mb_moved`): on a 2-core machine the exchange is CPU-bound, and
this says where.

`launcher` places the processes elsewhere: netlab/shardbench.py starts each one in its own network
namespace with kernel-shaped links (bench/weights.py --netlab).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

import psutil

from node.control import ControlError, call
from node.procs import start_peer, stop_processes
from gossip.hashing import blake2b256
from node.records import read_records
from swarm.pieces import DEFAULT_PIECE_SIZE

SHARD = 1 << 20


def _wait(what: str, cond, timeout: float, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = cond()
        except ControlError:
            value = None
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out waiting for {what}")


class Launcher(Protocol):
    """Starts a named peer (`seed`, `peer0`, ...: its data dir's name) and calls its control API."""

    def start(self, name: str, args: list[str], log_path: Path) -> tuple[Any, str]: ...

    def call(self, data_dir: Path, cmd: str, args: dict | None = None) -> Any: ...


class LocalLauncher:
    """Every peer on 127.0.0.1 of this machine."""

    def start(self, name: str, args: list[str], log_path: Path) -> tuple[Any, str]:
        return start_peer(args, log_path)

    def call(self, data_dir: Path, cmd: str, args: dict | None = None) -> Any:
        return call(data_dir, cmd, args)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0.0 once it is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def cpu_per_mb(cpu: dict[str, float], served_pieces: dict[str, int], fetched_mb: dict[str, float],
               piece_size: int) -> dict[str, dict]:
    """Per peer: CPU seconds spent while the version spread, MB it served and fetched, and CPU seconds
    per MB moved (served + fetched): where the exchange's cost per byte goes, peer by peer."""
    out = {}
    for name, seconds in cpu.items():
        served = served_pieces.get(name, 0) * piece_size / 1e6
        fetched = fetched_mb.get(name, 0.0)
        moved = served + fetched
        out[name] = {"cpu_s": round(seconds, 3), "served_mb": round(served, 2), "fetched_mb": round(fetched, 2),
                     "cpu_s_per_mb": round(seconds / moved, 4) if moved else None}
    return out


def run_localhost(peers: int, size_mb: float, mode: str, workdir: Path, timeout: float = 300.0,
                  shard_size: int = SHARD, base_port: int = 0, upload_mbps: float | None = None,
                  piece_size: int = DEFAULT_PIECE_SIZE, launcher: Launcher | None = None) -> dict:
    if mode not in ("swarm", "star"):
        raise ValueError("mode is 'swarm' or 'star'")
    launcher = launcher or LocalLauncher()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    link = ["--upload-mbps", str(upload_mbps)] if upload_mbps else []  # every peer, the seed included
    procs = []
    try:
        seed_dir = workdir / "seed"
        proc, addr = launcher.start("seed", ["--bootstrap", "--port", str(base_port), "--data-dir", str(seed_dir),
                                             "--roles", "relay", *link], seed_dir / "node.log")
        procs.append(proc)
        dirs = []
        for i in range(peers):
            d = workdir / f"peer{i}"
            role = "mirror" if mode == "swarm" else "leech"
            proc, _ = launcher.start(d.name, ["--join", addr, "--port", "0", "--data-dir", str(d),
                                              "--roles", role, *link], d / "node.log")
            procs.append(proc)
            dirs.append(d)
        table = {"task": {"name": "weights-bench", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                          "async_level": 2, "trainers": ["self"]}}
        task_id = launcher.call(seed_dir, "announce-task", {"task": table})["task_id"]
        for d in dirs:  # every peer knows the task and has at least one link
            _wait(f"{d.name} to learn the task", lambda d=d: any(
                t["task_id"] == task_id for t in launcher.call(d, "status")["tasks"])
                and launcher.call(d, "status")["connected"], 60)
        if mode == "swarm" and peers > 1:  # let peer exchange link the mirrors to each other too
            _wait("mirrors to link up", lambda: all(len(launcher.call(d, "status")["connected"]) >= min(peers, 3)
                                                    for d in dirs), 30)
        size = int(size_mb * 1e6)
        payload = os.urandom(size)  # incompressible, like a packed (already compressed) version
        shards = [payload[i:i + shard_size] for i in range(0, size, shard_size)]
        (seed_dir / "shards").mkdir(parents=True, exist_ok=True)
        hashes = []
        for s in shards:
            h = blake2b256(s)
            (seed_dir / "shards" / h.hex()).write_bytes(s)
            hashes.append(h)
        pieces = [blake2b256(payload[i:i + piece_size]) for i in range(0, size, piece_size)]
        manifest = {"task_id": task_id, "version": 1, "parent_version": -1, "parent_root": "", "encoding": "full",
                    "dtype": "bf16", "root": blake2b256(b"bench" + b"".join(hashes)).hex(), "shard_size": shard_size,
                    "raw_size": size, "compressed_size": size, "shard_hashes": [h.hex() for h in hashes],
                    "piece_size": piece_size, "piece_hashes": [h.hex() for h in pieces],
                    "tensors": [], "created_at": 0.0}
        names = ["seed", *(d.name for d in dirs)]
        cpu_before = {name: cpu_seconds(proc.pid) for name, proc in zip(names, procs)}
        t0 = time.time()
        launcher.call(seed_dir, "publish-version", {"manifest": manifest})

        def finished():
            out = {}
            for d in dirs:
                done = [r for r in read_records(d, "shards-complete") if r.get("task_id") == task_id]
                if done:
                    out[d.name] = done[0]["ts"] - t0
            return out if len(out) == peers else None
        times = _wait("every peer to hold the version", finished, timeout, every=0.25)
        cpu = {name: cpu_seconds(proc.pid) - cpu_before[name] for name, proc in zip(names, procs)}
        for d in dirs:  # nothing unverified on disk: every stored shard hashes to its name
            for f in (d / "shards").iterdir():
                if not f.name.startswith("."):
                    assert blake2b256(f.read_bytes()).hex() == f.name, f"{f} does not match its name"
        served = {d.name: launcher.call(d, "status")["host"]["driver"].get("pieces-served", 0)
                  for d in [seed_dir, *dirs]}
        per_peer_cpu = cpu_per_mb(cpu, served, {d.name: size / 1e6 for d in dirs}, piece_size)
        by_seed = served.pop("seed")
        moved = sum(v["served_mb"] + v["fetched_mb"] for v in per_peer_cpu.values())
        return {"mode": mode, "peers": peers, "size_mb": size_mb, "shards": len(shards), "pieces": len(pieces),
                "upload_mbps": upload_mbps,
                # every byte counts twice: where it was served and where it was fetched
                "cpu_s_per_mb_moved": round(sum(cpu.values()) / moved, 4) if moved else None,
                "cpu_per_peer": per_peer_cpu,
                "reach_all_s": round(max(times.values()), 3), "per_peer_s": {k: round(v, 3) for k, v in sorted(times.items())},
                "pieces_served_by_peers": sum(served.values()), "pieces_served_by_seed": by_seed,
                "pieces_served_per_peer": served}
    finally:
        codes = stop_processes(procs)
        (workdir / "exit-codes.json").write_text(json.dumps(codes))
