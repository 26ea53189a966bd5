"""Does a swarm learn faster with more workers? The simulator with the cost model, 1 to 64 workers.

For each worker count N: one trainer, N workers and, with --checkers validators (the default),
ceil(N * verify/generate / 0.9) trusted validators so checking capacity grows with the work (with
--checkers peers, no validators: workers check each other's batches; with --checkers trainer, the
trainer checks everything itself, the design before check quorums). The cost model's ratios are the
measured ones (simulator/rolejobs.py DEFAULTS: generate 20 s a batch of 8 prompts, verify 7.4 s =
0.37x, train 12 s per 16 prompts, growing with the prompts a step trains on). Reported per N:
versions and completions trained per simulated hour, the speedup over 1 worker, the trainer's time
training / checking / idle, the fraction of committed batches trained on, and bad batches trained
per cheater (--cheaters adds an other-model worker and a rubber-stamp checker colluding with it).

    .venv/bin/python bench/scaling.py [--workers 1,2,4,8,16,32,64] [--minutes 30] [--checkers validators]
    .venv/bin/python bench/scaling.py --real --workers 1,4,16 --minutes 8   # real jobs: time to a reward
                                                                            # (N workers run minutes * max(1/3, 1/N))

With --real, a train step's virtual time is --train-seconds per 16 prompts (default 0.6 against 1.0 s
to generate a batch of 8: the built-in model's ratio on this CPU), a third more with the decoupled
objective that growing steps use. One trainer can then take about 2.5x one worker's rollouts, which
caps any speedup; 0.33 is SmolLM2-135M's ratio on an H100 (a GRPO step over 128 completions 0.57 s,
generating them 3.5 s: docs/benchmarks.md), about 4.5x. The learning figure is the simulated time
from version 0 until the mean reward of the newest --reward-window base steps' worth of rollouts
trained on reaches --reward-target. --parallel runs the worker counts at once, one process each (on a
machine with the cores), still one run and one baseline. --seeds 1,2,3 runs every count at each seed
and reports the mean time per count and its ratio to 1 worker's mean (`summary`): one seed's time to
the reward varies about 2x with the same configuration.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator import compose  # noqa: E402
from simulator.rolejobs import DEFAULTS  # noqa: E402
from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import Scenario  # noqa: E402
from swarm import jobs  # noqa: E402

GENERATE, VERIFY = DEFAULTS[jobs.GENERATE][0], DEFAULTS[jobs.VERIFY][0]
CHECKER_LOAD = 0.9  # validators per worker: enough that checking never waits


def scenario(workers: int, minutes: float, checkers: str, cheaters: bool, real: bool, seed: int,
             max_step: int, async_level: int, spot: float, train_s: float = 0.6) -> Scenario:
    validators = math.ceil(workers * VERIFY / GENERATE / CHECKER_LOAD) if checkers == "validators" else 0
    peers = [compose.trainer(), compose.workers(workers)]
    if validators:
        peers.append(compose.validators(validators))
    if cheaters:
        peers += [compose.group("other-model", role="worker", adversary="other-model", join_at=60),
                  compose.group("rubber-stamp", role="worker", adversary="rubber-stamp")]
    params = {**(compose.LEARNING if real else compose.STEP), "check_quorum": 0 if checkers == "trainer" else 1,
              "spot_check": spot, "peer_checks": checkers == "peers", "max_prompts_per_step": max_step}
    task = compose.task(async_level=async_level, validators=["validator"] if validators else [], params=params)
    return compose.scenario(f"scaling-{workers}", duration=minutes * 60, seed=seed, settle=60,
                            checks=["honest-not-banned", "versions-forward", "bad-training-bounded"],
                            peers=peers, tasks=[task], jobs=compose.real_jobs(train=train_s) if real else {})


def run_one(workers: int, seed: int, args) -> dict:
    # real jobs cost CPU for every simulated batch: a bigger swarm runs a third of the time at least,
    # which is enough to see whether it reaches the reward target in a quarter of 1 worker's time
    minutes = args.minutes * max(1 / 3, 1 / workers) if args.real else args.minutes
    s = scenario(workers, minutes, args.checkers, args.cheaters, args.real, seed, args.max_step,
                 args.async_level, args.spot_check, args.train_seconds)
    started = time.monotonic()
    workdir = Path(args.workdir) / f"workers-{workers}-seed-{seed}"
    if args.real:  # a fresh dir per run: a peer's files (its generated slices, the trainer's state) from
        shutil.rmtree(workdir, ignore_errors=True)  # an earlier run would carry over into this one
    result = run_scenario(s, **({"workdir": str(workdir)} if args.real else {}))
    if args.real:  # a real run's files are gigabytes (every version's weights): only its figures are kept
        shutil.rmtree(workdir, ignore_errors=True)
    m = result.metrics
    tp, tr = m["throughput"], m["training"]
    row = {"workers": workers, "seed": seed, "ok": result.ok, "failed": result.failed,
           **{k: v for k, v in tp.items() if k not in ("since", "reward_curve")},
           "dropped": tr["dropped"], "verdicts": tr["verdicts"], "wall_s": round(time.monotonic() - started, 1),
           "bad_trained": result.checks["bad-training-bounded"].detail}
    if args.real:
        row["reward_first"], row["reward_last"] = tr["reward_first"], tr["reward_last"]
        row["since"], row["duration"] = tp["since"], s.duration
        window = args.reward_window * s.tasks[0].params["prompts_per_step"] * s.tasks[0].params["group_size"]
        row["time_to_reward"] = time_to(tp["reward_curve"], args.reward_target, window)
        # from version 0 on: the model build before it (init) takes as long whatever the swarm's size
        row["training_time_to_reward"] = (round(row["time_to_reward"] - tp["since"], 3)
                                          if row["time_to_reward"] is not None and tp["since"] is not None else None)
        row["reward_curve"] = tp["reward_curve"]
    return row


def _run_and_say(workers: int, seed: int, args) -> dict:
    row = run_one(workers, seed, args)
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def time_to(curve, target: float, completions: int) -> float | None:
    """Simulated seconds until the mean reward of the newest `completions` rollouts trained on reached
    `target` (each step's mean weighted by its completions). A window of completions, not of steps: a
    swarm's steps grow with it, and five steps of 4,096 completions average over 16 times the rollouts,
    and 16 times the time, of five steps of 256, so a window of steps would hold the bigger swarm to a
    later, staler figure."""
    for i, (t, _, _) in enumerate(curve):
        total = weighted = 0.0
        for _, reward, n in reversed(curve[:i + 1]):
            total, weighted = total + n, weighted + reward * n
            if total >= completions:
                break
        if total >= completions and weighted / total >= target:
            return t
    return None


def seed_summary(rows: list[dict], counts: list[int]) -> list[dict]:
    """Per worker count over the seeds: the mean time to the reward from version 0, and its ratio to the
    first count's mean; a seed that never reached the reward is counted as reaching it at the end of its
    run (so the mean is a lower bound, flagged by `not_reached`)."""
    out = []
    for n in counts:
        mine = [r for r in rows if r["workers"] == n]
        times = [r["training_time_to_reward"] if r["training_time_to_reward"] is not None
                 else r["duration"] - (r["since"] or 0.0) for r in mine]
        out.append({"workers": n, "seeds": [r["seed"] for r in mine], "times": times,
                    "not_reached": sum(r["training_time_to_reward"] is None for r in mine),
                    "mean_time_to_reward": round(sum(times) / len(times), 3),
                    "per_seed_vs_1_worker": [r["training_time_vs_1_worker"] for r in mine]})
    for entry in out:
        entry["mean_vs_1_worker"] = round(entry["mean_time_to_reward"] / out[0]["mean_time_to_reward"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4,8,16,32,64")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--checkers", choices=("validators", "peers", "trainer"), default="validators")
    ap.add_argument("--cheaters", action="store_true")
    ap.add_argument("--max-step", type=int, default=64,
                    help="the task's max_prompts_per_step (64: docs/operating.md's task for many workers)")
    ap.add_argument("--async-level", type=int, default=4)
    ap.add_argument("--spot-check", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", help="several seeds, e.g. 1,2,3: every worker count runs at each, and --real "
                                    "reports the mean time to the reward (one seed's time varies about 2x)")
    ap.add_argument("--real", action="store_true", help="real jobs: the built-in model learns")
    ap.add_argument("--reward-target", type=float, default=0.3)
    ap.add_argument("--reward-window", type=int, default=5,
                    help="--real: the reward is the mean over this many prompts_per_step steps' worth of rollouts")
    ap.add_argument("--train-seconds", type=float, default=0.6,
                    help="--real: virtual seconds of a train step per 16 prompts (generating 8 takes 1.0)")
    ap.add_argument("--parallel", action="store_true", help="run the worker counts at once, a process each")
    ap.add_argument("--workdir", default="runs/scaling")
    ap.add_argument("--out")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    runs = [(n, seed) for seed in seeds for n in counts]
    if args.parallel:  # as many processes as worker counts: one seed's runs share the machine alike
        with multiprocessing.get_context("spawn").Pool(len(counts)) as pool:
            rows = pool.starmap(_run_and_say, [(n, seed, args) for n, seed in runs])
    else:
        rows = [_run_and_say(n, seed, args) for n, seed in runs]
    for row in rows:  # against 1 worker's run (the first count) of the same seed
        base = next(r for r in rows if r["seed"] == row["seed"] and r["workers"] == counts[0])
        one = base["completions_trained_per_hour"] or 0
        row["speedup"] = round(row["completions_trained_per_hour"] / one, 2) if one else None
        row["per_worker_efficiency"] = (round(row["speedup"] * base["workers"] / row["workers"], 3)
                                        if row["speedup"] is not None else None)
        if args.real:
            one, this = base["training_time_to_reward"], row["training_time_to_reward"]
            row["training_time_vs_1_worker"] = round(this / one, 3) if one and this is not None else None
    summary = seed_summary(rows, counts) if args.real and len(seeds) > 1 else None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:  # no git where it ran (a copied tree): the rows still count
        commit = ""
    out = {"bench": "scaling", "date": time.strftime("%Y-%m-%d"), "commit": commit, "command": " ".join(sys.argv),
           "machine": platform.machine(), "cost_model": {k: DEFAULTS[k][0] for k in DEFAULTS},
           **({"real_train_seconds": args.train_seconds} if args.real else {}), "rows": rows,
           **({"summary": summary} if summary else {})}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
