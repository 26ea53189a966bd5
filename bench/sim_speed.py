"""Simulator speed: simulated seconds per wall second and events per second, at 100 and 1,000 peers.

    python bench/sim_speed.py [--seconds100 600] [--seconds1000 300] [--seed 1]

Both sizes run the shipped `scale` scenario's settings (same links, core and gossip parameters), with
the peer groups scaled down for 100 peers, so the two numbers are comparable. Prints one JSON object.
The 1,000-peer number over a short run is dominated by the join phase (every peer must hear from every
other peer, and in a flash crowd each newcomer heartbeats three times: about 1.6M core calls in the
first 300 s), so it understates the steady-state speed. `us_per_delivery_cpu` (CPU time per gossip
delivery, everything included) and the call counts are less sensitive to other load than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import load  # noqa: E402


def sized(peers: int, seconds: float, seed: int):
    base = load("scale")
    factor = peers / base.total_peers
    groups = tuple(g.model_copy(update={"count": max(1, round(g.count * factor))}) for g in base.peers)
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
            "sim_s_per_wall_s": round(seconds / wall, 3), "events": st["events"],
            "events_per_s": round(st["events"] / wall), "core_calls": st["core_calls"],
            "gossip_deliveries": st["gossip_deliveries"],
            "us_per_delivery_cpu": round(1e6 * st["cpu_s"] / max(1, st["gossip_deliveries"]), 1),
            "trace_hash": result.trace_hash, "checks_ok": result.ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds100", type=float, default=600.0)
    ap.add_argument("--seconds1000", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out = {"bench": "sim_speed", "python": platform.python_version(), "cpus": os.cpu_count(),
           "load_avg": [round(x, 2) for x in os.getloadavg()],
           "runs": [measure(100, args.seconds100, args.seed), measure(1000, args.seconds1000, args.seed)]}
    out["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]  # other work on the machine skews wall times
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
