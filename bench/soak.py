"""Benchmark: does a local swarm run for an hour with peers killed and restarted, without anything
growing? Prints JSON.

The swarm (real processes on 127.0.0.1, the built-in digit-sort task of node/examples/digit-sort.toml):
peer0 the active trainer (the bootstrap, which announces the task), peer1 its standby, peer2 a
validator the task names, peer3 a mirror, and `--workers` workers. Every `--kill-every` seconds the
next peer of the kill rotation (a worker, the validator, the active trainer: the standby takes over,
the mirror, the other workers but the last) is SIGKILLed (its job process dies with it) and started
again `--down` seconds later on its own data dir and port, joining through every other peer.

Every `--sample-every` seconds, per peer: RSS and open fds of the node process and of its job
process (psutil), the sizes of its tables from its status answer (peers, alive, connections,
tasks, versions, reputation entries, bans, downloads), the bytes of its data dir (blobs, shards,
records, logs), and for a trainer its phase (active or standby). Samples go to
`<base-dir>/samples.jsonl` as they are taken. The report (bench/soak_report.py): per peer and per
quantity, the least-squares slope per hour over that process lifetime (and phase: a standby's
takeover starts a new series) after `--warmup` seconds of it, and as a % of its level; the target
(issue 28) is RSS and fd growth under 5% per hour for every series judged, every table bounded (the
largest value seen is reported beside the cap the code holds it to). Also: versions trained,
takeovers, bans (an honest swarm: there should be none), restarts.

    python bench/soak.py --minutes 60 --out bench/results/DATE-soak-COMMIT.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.soak_report import growth, verdict  # noqa: E402
from node.control import call, call_when_up  # noqa: E402
from node.local import WORKER_NICE  # noqa: E402
from node.procs import start_peer, stop_processes  # noqa: E402
from node.records import read_records  # noqa: E402
from node.taskfile import EXAMPLE, fill_pins  # noqa: E402
from gossip.reputation import ReputationLedger  # noqa: E402
from swarm.core import CoreConfig  # noqa: E402
from swarm.membership import MembershipConfig  # noqa: E402

# The caps the code holds each table to, reported beside the largest size seen.
CAPS = {"peers": MembershipConfig().max_peers, "tasks": CoreConfig().max_tasks,
        "reputation": ReputationLedger().capacity}
STATUS_TABLES = ("peers", "alive", "connected", "tasks", "versions", "reputation", "banned", "downloads")


class Peer:
    def __init__(self, index: int, role: str, base: Path, heartbeat: float) -> None:
        self.index, self.role = index, role
        self.name = f"peer{index}"
        self.dir = base / self.name
        self.args = ["--data-dir", str(self.dir), "--heartbeat-interval", str(heartbeat),
                     "--roles", "trainer" if role in ("trainer", "standby") else role]
        self.nice = WORKER_NICE if role == "worker" else 0
        self.proc: subprocess.Popen | None = None
        self.addr = ""
        self.restarts = 0

    def start(self, extra: list[str]) -> None:
        self.proc, self.addr = start_peer(self.args + extra, self.dir / "node.log", nice=self.nice)
        port = self.addr.split("/")[4]
        if "--port" not in self.args:  # later starts take the same port, so others' join lists hold
            self.args += ["--port", port]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="wall time of the run (default 60)")
    ap.add_argument("--workers", type=int, default=3, help="worker peers (default 3)")
    ap.add_argument("--kill-every", type=float, default=600.0, help="seconds between kills (default 600; 0: none)")
    ap.add_argument("--down", type=float, default=20.0, help="seconds a killed peer stays down (default 20)")
    ap.add_argument("--sample-every", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--warmup", type=float, default=600.0,
                    help="seconds of each process lifetime left out of the slopes (default 600)")
    ap.add_argument("--heartbeat", type=float, default=2.0, help="peers' heartbeat interval (default 2)")
    ap.add_argument("--base-dir", type=Path, help="where the peers' data dirs go (default runs/soak/<time>)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    base = args.base_dir or ROOT / "runs" / "soak" / time.strftime("%Y%m%d-%H%M%S")
    base.mkdir(parents=True, exist_ok=True)
    roles = ["trainer", "standby", "validator", "mirror"] + ["worker"] * args.workers
    peers = [Peer(i, role, base, args.heartbeat) for i, role in enumerate(roles)]
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    samples: list[dict] = []
    events: list[dict] = []
    started = time.time()
    try:
        boot = peers[0]
        boot.start(["--bootstrap"])
        for p in peers[1:]:
            p.start(["--join", boot.addr])
        _log(f"{len(peers)} peers up in {base}")
        ids = {p.name: call_when_up(p.dir, "status")["peer_id"] for p in peers}
        table = fill_pins(tomllib.loads(EXAMPLE.read_text()), where=str(EXAMPLE))
        table["task"]["trainers"] = ["self", ids["peer1"]]
        table["task"]["validators"] = [ids["peer2"]]
        created_at = time.time()
        task_id = call_when_up(boot.dir, "announce-task", {"task": table, "created_at": created_at})["task_id"]
        _log(f"announced task {task_id}")
        # a worker, the validator, the active trainer (half-way through an hour), the mirror, the other
        # workers: the standby and the last worker are never killed, so they give whole-hour series
        workers = [p for p in peers if p.role == "worker"]
        rotation = [workers[0], peers[2], peers[0], peers[3]] + workers[1:-1]
        run_s = args.minutes * 60.0
        next_sample, next_kill, kills = time.monotonic(), time.monotonic() + (args.kill_every or float("inf")), 0
        down: list[tuple[float, Peer]] = []
        t0 = time.monotonic()
        with open(base / "samples.jsonl", "a") as out:
            while not stop.is_set() and time.monotonic() - t0 < run_s:
                now = time.monotonic()
                if now >= next_kill:
                    victim = rotation[kills % len(rotation)]
                    kills += 1
                    next_kill += args.kill_every
                    if victim.proc and victim.proc.poll() is None:
                        victim.proc.send_signal(signal.SIGKILL)
                        victim.proc.wait(10)
                        events.append({"t": round(now - t0, 1), "event": "killed", "peer": victim.name})
                        _log(f"killed {victim.name} ({victim.role}) at {now - t0:.0f} s")
                        down.append((now + args.down, victim))
                for when, p in list(down):
                    if now >= when:
                        down.remove((when, p))
                        _restart(p, peers, events, now - t0)
                        if p is boot:  # the same table and created_at: the same task id, resumed
                            call_when_up(boot.dir, "announce-task", {"task": table, "created_at": created_at})
                if now >= next_sample:
                    next_sample += args.sample_every
                    for p in peers:
                        s = _sample(p, now - t0)
                        if s is not None:
                            samples.append(s)
                            out.write(json.dumps(s) + "\n")
                    out.flush()
                    if int(now - t0) % 300 < args.sample_every:
                        _log(f"{now - t0:.0f} s: {_brief(samples, peers)}")
                time.sleep(0.5)
    finally:
        codes = stop_processes([p.proc for p in peers if p.proc is not None])
    report = _report(args, peers, samples, events, started, codes)
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if report["verdict"]["met"] and report["tables_within_caps"] else 1


def _restart(p: Peer, peers: list[Peer], events: list[dict], t: float) -> None:
    join = [arg for q in peers if q is not p and q.proc and q.proc.poll() is None for arg in ("--join", q.addr)]
    try:
        p.start(join)
    except RuntimeError as exc:
        events.append({"t": round(t, 1), "event": "restart-failed", "peer": p.name, "why": str(exc)[:200]})
        _log(f"{p.name} did not restart: {str(exc).splitlines()[0]}")
        return
    p.restarts += 1
    events.append({"t": round(t, 1), "event": "restarted", "peer": p.name})
    _log(f"restarted {p.name} at {t:.0f} s")


def _sample(p: Peer, t: float) -> dict | None:
    """One peer's quantities now; None while it is down or not answering."""
    if p.proc is None or p.proc.poll() is not None:
        return None
    try:
        node = psutil.Process(p.proc.pid)
        jobs = node.children(recursive=True)
        values = {"node_rss_mb": node.memory_info().rss / 2**20, "node_fds": node.num_fds(),
                  "job_rss_mb": sum(c.memory_info().rss for c in jobs) / 2**20,
                  "job_fds": sum(c.num_fds() for c in jobs), "threads": node.num_threads()}
    except psutil.Error:
        return None
    try:
        snap = call(p.dir, "status", timeout=5)
    except Exception:  # noqa: BLE001 - a busy or restarting node: its process figures still count
        snap = {}
    for key in STATUS_TABLES:
        if isinstance(snap.get(key), (dict, list)):
            values[key] = len(snap[key])
    if isinstance(snap.get("host"), dict):
        values["host_connected"] = len(snap["host"].get("connected", []))
    for name, size in _dir_sizes(p.dir).items():
        values[f"{name}_mb"] = size / 2**20
    sample = {"t": round(t, 1), "peer": p.name, "role": p.role, "pid": p.proc.pid,
              "values": {k: round(v, 3) for k, v in values.items()}}
    phase = _trainer_state(snap)
    if phase:
        sample["phase"] = phase
    return sample


def _trainer_state(snap: dict) -> str | None:
    """'active' or 'standby' for a task's trainer (status `tasks[].trainer_chain.self.state`), else None.
    A standby that takes over starts training in its job process: a new phase of the process, whose
    memory steps up once and is judged from there (bench/soak_report.py)."""
    for task in snap.get("tasks") or ():
        state = ((task.get("trainer_chain") or {}).get("self") or {}).get("state") if isinstance(task, dict) else None
        if state:
            return state
    return None


def _dir_sizes(data_dir: Path) -> dict[str, int]:
    """Bytes under each top-level entry of the data dir (a file counts under its own name), and in all."""
    sizes: dict[str, int] = {}
    for entry in data_dir.iterdir() if data_dir.exists() else []:
        key = entry.name.replace(".", "_").replace("-", "_")
        try:
            sizes[key] = entry.stat().st_size if entry.is_file() else sum(
                f.stat().st_size for f in entry.rglob("*") if f.is_file())
        except OSError:  # a file replaced under us: the next sample counts it
            continue
    sizes["data_dir"] = sum(sizes.values())
    return sizes


def _report(args, peers: list[Peer], samples: list[dict], events: list[dict], started: float, codes) -> dict:
    per_peer = growth(samples, args.warmup)
    for p in peers:
        per_peer.setdefault(p.name, {})["role"] = p.role
        per_peer[p.name]["restarts"] = p.restarts
    versions = [r for p in peers if p.role in ("trainer", "standby") for r in read_records(p.dir, "version-published")]
    bans = [{"by": p.name, **r} for p in peers for r in read_records(p.dir, "peer-banned")]
    takeovers = [{"by": p.name, "ts": r["ts"], "from": r.get("from_version")}
                 for p in peers for r in read_records(p.dir, "trainer-takeover")]
    return {"bench": "soak", "minutes": args.minutes, "wall_s": round(time.time() - started, 1),
            "peers": len(peers), "kill_every_s": args.kill_every, "down_s": args.down, "warmup_s": args.warmup,
            "samples": len(samples), "events": events, "versions_published": len(versions),
            "highest_version": max((r["version"] for r in versions), default=None),
            "takeovers": takeovers, "bans": bans, "exit_codes": codes, "load_avg": os.getloadavg(),
            "table_caps": CAPS, "tables_within_caps": all(
                entry.get("max", {}).get(key, 0) <= cap for entry in per_peer.values() for key, cap in CAPS.items()),
            "per_peer": per_peer, "verdict": verdict(per_peer)}


def _brief(samples: list[dict], peers: list[Peer]) -> str:
    last = {s["peer"]: s["values"] for s in samples[-len(peers):]}
    return ", ".join(f"{name} {v.get('node_rss_mb', 0):.0f}+{v.get('job_rss_mb', 0):.0f} MB "
                     f"{v.get('node_fds', 0):.0f} fds" for name, v in sorted(last.items()))


def _log(text: str) -> None:
    print(f"soak: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
