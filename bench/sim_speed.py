"""Simulator speed and per-peer cost as the swarm grows: 1,000, 3,000 and 10,000 peers by default.

    python bench/sim_speed.py [--sizes 1000,3000,10000] [--seconds 300] [--seed 1]

Every size runs the shipped `scale` scenario's settings (links, core and gossip parameters, the same
task with its 10 members: trainers, validators, workers) with only the relay group grown or shrunk, so
what changes is the swarm around one task. For each size it reports deliveries per peer per simulated
second (issue 27: flat in N, within 1.5x from 1,000 to 10,000, is the target), wall seconds per
simulated second, events, core calls, CPU per delivery and peak memory so far. Short runs are mostly the
join phase (every peer joins in the first 2 minutes), which is when the per-peer cost is highest.
Prints one JSON object, with `growth` (each size's per-peer deliveries over the smallest size's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import load  # noqa: E402


def sized(peers: int, seconds: float, seed: int):
    """`scale` with its relay group resized so the swarm has `peers` peers."""
    base = load("scale")
    others = sum(g.count for g in base.peers if g.roles != ("relay",))
    if peers <= others:
        raise SystemExit(f"sim_speed: {peers} peers leave no room for relays beside the task's {others} members")
    groups = tuple(g.model_copy(update={"count": peers - others}) if g.roles == ("relay",) else g for g in base.peers)
    return base.model_copy(update={"peers": groups, "duration": seconds, "settle": min(base.settle, seconds / 4),
                                   "tasks": tuple(t.model_copy(update={"at": min(t.at, seconds / 3)})
                                                  for t in base.tasks), "seed": seed})


def measure(peers: int, seconds: float, seed: int) -> dict:
    scenario = sized(peers, seconds, seed)
    t0 = time.perf_counter()
    result = run_scenario(scenario)
    wall = time.perf_counter() - t0
    st = result.stats
    return {"peers": scenario.total_peers, "simulated_s": seconds, "wall_s": round(wall, 2), "cpu_s": st["cpu_s"],
            "wall_s_per_sim_s": round(wall / seconds, 4), "events": st["events"],
            "events_per_s": round(st["events"] / wall), "core_calls": st["core_calls"],
            "gossip_deliveries": st["gossip_deliveries"],
            "deliveries_per_peer_per_sim_s": round(st["gossip_deliveries"] / scenario.total_peers / seconds, 4),
            "us_per_delivery_cpu": round(1e6 * st["cpu_s"] / max(1, st["gossip_deliveries"]), 1),
            "peak_rss_mb_so_far": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "trace_hash": result.trace_hash, "checks_ok": result.ok, "failed": result.failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,3000,10000", help="comma-separated peer counts (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=300.0, help="simulated seconds per size (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    out = {"bench": "sim_speed", "python": platform.python_version(), "cpus": os.cpu_count(),
           "load_avg": [round(x, 2) for x in os.getloadavg()], "runs": []}
    for peers in sizes:
        out["runs"].append(measure(peers, args.seconds, args.seed))
        print(f"sim_speed: {peers} peers done in {out['runs'][-1]['wall_s']} s", file=sys.stderr, flush=True)
    first = out["runs"][0]["deliveries_per_peer_per_sim_s"]
    out["growth"] = {str(r["peers"]): round(r["deliveries_per_peer_per_sim_s"] / first, 3) for r in out["runs"]}
    out["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]  # other work on the machine skews wall times
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
