"""`swarm-sim`: run a scenario, list the shipped ones.

    swarm-sim list
    swarm-sim run smoke [--seed N] [--json] [--trace FILE] [--quiet] [--work-dir DIR]

The seed and the fault settings derived from it are printed first (stderr), so any failing run can be
replayed exactly with `--seed`. Exit status: 0 when every check the scenario requires holds, 1 when
one fails, 2 for a bad scenario or usage. Heavy modules are imported only when running, so `--help`
and `list` are instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _progress(stream):
    state = {"last": -1}

    def show(t: float, end: float) -> None:
        pct = int(100 * t / end) if end else 100
        if pct == state["last"]:
            return
        state["last"] = pct
        filled = pct * 30 // 100
        stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {pct:3d}%  t={t:,.0f}/{end:,.0f} s simulated")
        stream.flush()
    return show


def _summary(result) -> str:
    from simulator.checkers import REWARD_WINDOW

    m = result.metrics
    d, b = m["delivery"], m["bytes"]
    lines = [f"scenario {result.scenario}  seed {result.seed}  {result.duration:g} s simulated  "
             f"in {result.stats['wall_s']:.1f} s wall ({result.stats['sim_s_per_wall_s']} sim-s/s, "
             f"{result.stats['events']:,} events)",
             f"trace_hash {result.trace_hash}",
             f"peers: {result.stats['peers_created']} created, {result.stats['peers_live_at_end']} live at the end"]
    if d["ratio"] is not None:
        lat = d["latency_ms"]
        lines.append(f"gossip delivery to live honest peers: {d['delivered']}/{d['expected']} "
                     f"({100 * d['ratio']:.3f}%), latency p50 {lat[50]} ms, p99 {lat[99]} ms, max {lat[100]} ms")
    if b["peers"]:
        lines.append(f"bytes on the wire per peer: mean {b['per_peer_mean']:,} (p99 {b['per_peer_p99']:,}), "
                     f"{b['per_peer_mean_Bps']:,} B/s")
    vs = m["version_spread"]
    lines.append(f"weight versions: {vs['versions']} seen, {vs['reached_95']} reached 95% of peers"
                 + (f" (p50 {vs['seconds_p50']:.1f} s)" if vs["seconds_p50"] is not None else ""))
    tr = m.get("training")
    if tr is not None:
        lines.append(f"training: newest version {tr['newest_version']}, {tr['rollouts_trained']} rollouts trained "
                     f"({tr['rollouts_trained_from_adversaries']} from adversaries), {tr['installs']} installs, "
                     f"verdicts {json.dumps(tr['verdicts'], sort_keys=True)}")
        tp = m.get("throughput")
        if tp is not None and tp["batches_committed"]:
            fraction = "n/a" if tp["trained_fraction"] is None else f"{tp['trained_fraction']:.3f}"
            lines.append(f"throughput: {tp['batches_trained']} of {tp['batches_committed']} batches committed trained "
                         f"({tp['batches_lost']} dropped or refused, {tp['batches_in_flight_at_end']} in flight at the "
                         f"end: trained fraction {fraction}); the trainer training "
                         f"{tp['trainer_train_fraction']:.0%} of the time, checking {tp['trainer_check_fraction']:.0%}")
        if tr["reward_first"] is not None:
            base = tr["base_heldout_greedy"]
            line = (f"mean rollout reward: {tr['reward_first']:.3f} over the first {REWARD_WINDOW} steps, "
                    f"{tr['reward_last']:.3f} over the latest {REWARD_WINDOW}")
            if base is not None:
                line += f" (version 0 held-out greedy accuracy {base:.3f})"
            lines.append(line)
    for name, check in result.checks.items():
        req = name in result.required
        mark = ("PASS" if check.ok else "FAIL") if req else ("pass" if check.ok else "info")
        lines.append(f"  {mark:4}  {name:20} {check.detail}")
        if req and not check.ok:
            for v in check.violations[:5]:
                lines.append(f"          {json.dumps(v, sort_keys=True)}")
    lines.append("OK" if result.ok else f"FAILED: {', '.join(result.failed)}")
    return "\n".join(lines)


def _run(args) -> int:
    from simulator.run import run_scenario
    from simulator.scenario import ScenarioError, load, with_seed
    try:
        scenario = with_seed(load(args.scenario), args.seed)
    except ScenarioError as exc:
        print(f"swarm-sim: {exc}", file=sys.stderr)
        return 2
    err = sys.stderr

    def on_start(faults: dict) -> None:
        print(f"swarm-sim: scenario {scenario.name}, seed {scenario.seed} (replay with --seed {scenario.seed}), "
              f"{scenario.total_peers} peers, {scenario.duration:g} s", file=err)
        print(f"swarm-sim: faults {json.dumps(faults, sort_keys=True)}", file=err)

    show = None if args.quiet or not err.isatty() and not args.progress else _progress(err)
    kwargs = {}
    if args.work_dir:
        from simulator.scenario import real_role_jobs
        if not real_role_jobs(scenario):
            print(f"swarm-sim: --work-dir keeps the data dirs of real role jobs, and scenario {scenario.name} runs "
                  "its jobs on the cost model (no files); drop --work-dir or set mode = \"real\" in its [jobs.*]",
                  file=sys.stderr)
            return 2
        os.makedirs(args.work_dir, exist_ok=True)
        if os.listdir(args.work_dir):
            print(f"swarm-sim: --work-dir {args.work_dir} is not empty; name a new or empty directory", file=sys.stderr)
            return 2
        kwargs["workdir"] = args.work_dir
    result = run_scenario(scenario, trace_path=args.trace, on_progress=show, on_start=on_start, **kwargs)
    if show is not None:
        err.write("\n")
    if args.json:
        print(json.dumps(result.as_dict(), sort_keys=True, default=str))
    else:
        print(_summary(result))
    return 0 if result.ok else 1


def _list(args) -> int:
    from simulator.scenario import ScenarioError, load, shipped
    for name in shipped():
        try:
            s = load(name)
            print(f"{name:12} {s.total_peers:5} peers  {s.duration:7g} s  {s.description}")
        except ScenarioError as exc:
            print(f"{name:12} BROKEN: {exc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swarm-sim", description="Deterministic swarm simulator: the real "
                                     "PeerCore on a virtual network with churn, faults and adversaries.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario (a .toml file or a shipped name)")
    run.add_argument("scenario")
    run.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    run.add_argument("--trace", metavar="FILE", help="write the JSONL trace here")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--work-dir", metavar="DIR", help="real role jobs: keep every peer's data dir (blobs, shards, "
                     "trainer state) in DIR (new or empty) instead of a temporary dir deleted at the end")
    run.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    run.set_defaults(fn=_run)
    lst = sub.add_parser("list", help="list the shipped scenarios")
    lst.set_defaults(fn=_list)
    args = parser.parse_args(argv)
    if getattr(args, "seed", None) is not None and not 0 <= args.seed < 2**63:
        parser.error("--seed must be in [0, 2**63)")
    rc = args.fn(args)
    if argv is None and args.command == "run":
        # The process entry point (console script or `python -m`), and its work is done: skip the
        # interpreter's teardown, a full collection and freeing of the millions of objects a big run
        # leaves (4 s at scale). The trace file is closed and the outputs are flushed first.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
