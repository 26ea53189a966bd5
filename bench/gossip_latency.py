"""Gossip delivery on a 6-process localhost swarm: 1 KB messages at 10 and 100 msg/s.

Prints JSON: per rate, the delivery ratio (deliveries / (messages x other peers)), p50/p99 latency
(sender's timestamp to acceptance by the receiver's core, all on one clock) and each node's CPU
milliseconds per message it accepted (its own publishes and forwarding included); the 100 msg/s
figures are also given as ratios to the 10 msg/s baseline measured in the same run.

    .venv/bin/python bench/gossip_latency.py [--peers 6] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node import control  # noqa: E402
from node.procs import start_peer, stop_processes  # noqa: E402
from node.shardbench import cpu_seconds  # noqa: E402
from swarm.stats import percentile  # noqa: E402


def delivered(dirs) -> list[int]:
    return [control.call(d, "status")["gossip"]["delivered"].get("probe", 0) for d in dirs]


def run_rate(dirs, pids, rate: float, seconds: float) -> dict:
    before = delivered(dirs)
    cpu_before = [cpu_seconds(pid) for pid in pids]
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        target = start + sent / rate
        time.sleep(max(0.0, target - time.monotonic()))
        control.call(dirs[sent % len(dirs)], "probe", {"size": 1024})
        sent += 1
    actual_rate = sent / (time.monotonic() - start)
    time.sleep(2.0)  # let stragglers arrive
    wall = time.monotonic() - start
    after = delivered(dirs)
    cpu = [cpu_seconds(pid) - b for pid, b in zip(pids, cpu_before)]
    samples = []
    for d, b, a in zip(dirs, before, after):
        new = a - b
        samples += control.call(d, "latency").get("probe", [])[-new:] if new else []
    expected = sent * (len(dirs) - 1)
    return {"rate_target": rate, "rate_actual": round(actual_rate, 1), "messages": sent,
            "delivery_ratio": round(sum(after) - sum(before), 0) / expected if expected else None,
            "p50_ms": round(percentile(samples, 50) * 1000, 2), "p99_ms": round(percentile(samples, 99) * 1000, 2),
            "cpu_ms_per_delivered": [round(1000 * c / (a - b), 3) if a > b else None
                                     for c, a, b in zip(cpu, after, before)],
            "cpu_s_per_s": round(sum(cpu) / wall, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gossip-bench-"))
    dirs = [base / f"p{i}" for i in range(args.peers)]
    procs = []
    try:
        proc, boot = start_peer(["--bootstrap", "--data-dir", str(dirs[0])], dirs[0] / "log")
        procs.append(proc)
        for d in dirs[1:]:
            procs.append(start_peer(["--join", boot, "--data-dir", str(d)], d / "log")[0])
        deadline = time.monotonic() + 60
        while any(len(control.call(d, "status")["alive"]) < args.peers - 1 for d in dirs):
            if time.monotonic() > deadline:
                raise SystemExit("peers did not all meet within 60 s")
            time.sleep(0.5)
        time.sleep(2)  # gossipsub meshes settle over a couple of heartbeats
        pids = [p.pid for p in procs]
        slow = run_rate(dirs, pids, 10, args.seconds)
        fast = run_rate(dirs, pids, 100, args.seconds)
    finally:
        stop_processes(procs)
    print(json.dumps({
        "benchmark": "gossip_latency", "peers": args.peers, "message_bytes": 1024, "seconds_per_rate": args.seconds,
        "at_10_per_s": slow, "at_100_per_s": fast,
        "ratio_100_vs_10": {"p50": round(fast["p50_ms"] / slow["p50_ms"], 2),
                            "p99": round(fast["p99_ms"] / slow["p99_ms"], 2),
                            "delivery": round(fast["delivery_ratio"] / slow["delivery_ratio"], 3)},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
