"""Staleness, a standby's checking, or CPU sharing: which one costs learning per version (issue 25)?

On real processes (bench/learning.py) every peer shares the same cores, so a standby trainer with
`standby_checks` slows every job, and a slower trainer step changes how old the rollouts it trains on
are. The simulator's real-jobs mode separates the causes: the jobs are the real ones (the built-in
model, GRPO, TOPLOC, the sampling replay), the durations virtual, so CPU sharing cannot exist and a
seed replays exactly. Variants, each from the same seed(s):

  base      1 trainer + 3 workers (the 4-peer bench's shape)
  standby   the same plus a standby trainer with standby_checks (tasks trainers = 2: the 5-peer
            --kill-trainer-at bench's shape, never killed)
  slowtrain base with the train job's virtual duration raised (`--slow-train`, seconds), as CPU sharing
            made the trainer's step a larger share of a version's period on the real runs: staler rollouts

Per variant it prints versions, the staleness of every trained rollout (trained_into - policy_version
- 1: 0 = generated with the version the step started from; exact, from the rollout-trained records)
as a mean and a histogram, rollouts dropped too-old, and the mean rollout reward (the version-published
records' `reward`, 256 completions a version) over versions 1-10, the last 10, and its least-squares
slope per version. --out writes the JSON.

    .venv/bin/python bench/staleness.py [--variants base,standby,slowtrain] [--seeds 1] [--duration 400] [--versions 90]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator import compose  # noqa: E402
from simulator.run import prepare  # noqa: E402
from simulator.scenario import Scenario  # noqa: E402
from simulator.trace import Trace  # noqa: E402

# the built-in task's params (node/examples/digit-sort.toml), as learning.toml runs them
PARAMS = {**compose.LEARNING, "lr_decay_start": 500, "lr_decay_steps": 1000, "lr_min": 1.2e-5}


def scenario(name: str, seed: int, duration: float, trainers: int, train_s: float, gen_s: float,
             verify_s: float) -> Scenario:
    params = {**PARAMS, **({"standby_checks": True, "republish_interval": 5.0} if trainers > 1 else {})}
    return compose.scenario(name, duration=duration, seed=seed, settle=0,
                            peers=[compose.trainer(trainers), compose.workers(3, join_spread=10, churn=False)],
                            tasks=[compose.task(trainers=trainers, params=params)],
                            jobs=compose.real_jobs(generate=gen_s, train=train_s, verify=verify_s))


def slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else None


def slope_se(xs: list[float], ys: list[float]) -> float | None:
    """The slope's standard error from the residuals (version-to-version noise of the reward)."""
    b = slope(xs, ys)
    if b is None or len(xs) < 3:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    res = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys))
    return (res / (len(xs) - 2) / sum((x - mx) ** 2 for x in xs)) ** 0.5


def mean(xs):
    return round(sum(xs) / len(xs), 4) if xs else None


def run_variant(variant: str, seed: int, duration: float, train_s: float, gen_s: float, verify_s: float,
                slow_train: float, stop_at: int | None = None) -> dict:
    trainers = 2 if variant == "standby" else 1
    t_train = slow_train if variant == "slowtrain" else train_s
    s = scenario(f"staleness-{variant}", seed, duration, trainers, t_train, gen_s, verify_s)
    trace = Trace()
    published, trained, dropped = [], [], {}
    trace.observe("emit.version-published",
                  lambda t, peer, k, f: published.append((t, peer, f["version"], f.get("reward"), f.get("term"))))
    trace.observe("emit.rollout-trained",
                  lambda t, peer, k, f: trained.append((peer, f["policy_version"], f["trained_into"])))
    trace.observe("emit.rollout-dropped",
                  lambda t, peer, k, f: dropped.__setitem__(f["reason"], dropped.get(f["reason"], 0) + 1))
    wall, cpu = time.perf_counter(), time.process_time()
    sim, _ = prepare(s, trace)
    t = 0.0
    while t < duration and (stop_at is None or not published or max(v for _, _, v, *_ in published) < stop_at):
        t = min(duration, t + 5.0)
        sim.loop.run(t)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    raw = {"variant": variant, "seed": seed, "simulated_s": t, "stop_at_version": stop_at, "trainers": trainers,
           "publishers": sorted({p for _, p, *_ in published}),
           "durations_s": {"generate": gen_s, "train": t_train, "verify": verify_s},
           "published": [[round(t, 3), v, r] for t, _, v, r, _ in published if isinstance(r, (int, float))],
           "trained": [[pv, into] for _, pv, into in trained], "rollouts_dropped": dropped,
           "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    return summarize(raw)


def summarize(raw: dict) -> dict:
    """The figures over versions 1..stop_at (a run may overshoot it by a few versions in its last chunk)."""
    last = raw["stop_at_version"] or max(v for _, v, _ in raw["published"])
    versions = sorted((v, r, t) for t, v, r in raw["published"] if 1 <= v <= last)
    rewards = [r for _, r, _ in versions]
    stale = [into - pv - 1 for pv, into in raw["trained"] if into <= last]
    hist: dict[str, int] = {}
    for s in stale:
        hist[str(s)] = hist.get(str(s), 0) + 1
    times = [t for *_, t in versions]
    return {
        **{k: raw[k] for k in ("variant", "seed", "trainers", "publishers", "durations_s")},
        "versions": len(versions), "simulated_s_to_last": times[-1] if times else None,
        "seconds_per_version": round((times[-1] - times[0]) / (len(times) - 1), 3) if len(times) > 1 else None,
        "rollouts_trained": len(stale), "rollouts_dropped": raw["rollouts_dropped"],
        "staleness_mean": mean(stale), "staleness_hist": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
        "reward_first10": mean(rewards[:10]), "reward_last10": mean(rewards[-10:]), "reward_mean": mean(rewards),
        "reward_slope_per_version": round(slope([v for v, _, _ in versions], rewards), 6) if len(rewards) > 1 else None,
        "reward_slope_se": round(slope_se([v for v, _, _ in versions], rewards), 6) if len(rewards) > 2 else None,
        "wall_s": raw["wall_s"], "cpu_s": raw["cpu_s"], "raw": raw,
    }


def compare(runs: list[dict]) -> list[dict]:
    """Each run against the base run of the same seed: reward and staleness differences."""
    base = {r["seed"]: r for r in runs if r["variant"] == "base"}
    rows = []
    for r in runs:
        b = base.get(r["seed"])
        if b is None or r is b:
            continue
        rows.append({"variant": r["variant"], "seed": r["seed"],
                     "staleness_mean_minus_base": round(r["staleness_mean"] - b["staleness_mean"], 4),
                     "reward_mean_minus_base": round(r["reward_mean"] - b["reward_mean"], 4),
                     "reward_last10_minus_base": round(r["reward_last10"] - b["reward_last10"], 4),
                     "slope_ratio_to_base": round(r["reward_slope_per_version"] / b["reward_slope_per_version"], 3)
                     if b["reward_slope_per_version"] else None})
    seeds = sorted(base)
    if len(seeds) > 1:  # the same variant from another seed: the noise floor of these figures
        a, b = base[seeds[0]], base[seeds[1]]
        rows.append({"variant": f"base seed {seeds[1]} vs seed {seeds[0]} (noise floor)",
                     "staleness_mean_minus_base": round(b["staleness_mean"] - a["staleness_mean"], 4),
                     "reward_mean_minus_base": round(b["reward_mean"] - a["reward_mean"], 4),
                     "reward_last10_minus_base": round(b["reward_last10"] - a["reward_last10"], 4),
                     "slope_ratio_to_base": round(b["reward_slope_per_version"] / a["reward_slope_per_version"], 3)
                     if a["reward_slope_per_version"] else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="base,standby,slowtrain")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    ap.add_argument("--duration", type=float, default=300.0, help="simulated seconds per run (default 300)")
    ap.add_argument("--generate-s", type=float, default=1.0, help="virtual generate job seconds (learning.toml)")
    ap.add_argument("--train-s", type=float, default=0.6, help="virtual train job seconds (learning.toml)")
    ap.add_argument("--verify-s", type=float, default=0.3, help="virtual verify job seconds (learning.toml)")
    ap.add_argument("--slow-train", type=float, default=2.0, help="the slowtrain variant's train job seconds")
    ap.add_argument("--versions", type=int, help="stop a run once this version is published (before --duration)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                    help="run nothing: summarize the runs of earlier --out files (parallel processes) together")
    args = ap.parse_args(argv)
    runs = []
    for path in args.merge or []:
        runs += [summarize(r["raw"]) for r in json.loads(path.read_text())["runs"]]
    for seed in [] if args.merge else [int(s) for s in args.seeds.split(",")]:
        for variant in args.variants.split(","):
            r = run_variant(variant, seed, args.duration, args.train_s, args.generate_s, args.verify_s,
                            args.slow_train, args.versions)
            print(json.dumps({k: v for k, v in r.items() if k != "raw"}), file=sys.stderr, flush=True)
            runs.append(r)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = {"bench": "staleness", "commit": commit, "argv": sys.argv[1:], "load_average_end": list(os.getloadavg()),
           "compare": compare(runs), "runs": runs}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
