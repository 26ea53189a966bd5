"""Benchmark: does the swarm learn as well and as fast as one process? Prints JSON.

Two runs from the same base policy, each for `--budget` seconds of reinforcement learning:

  - swarm: `swarm-node local --peers 4` (1 trainer + 3 workers, real libp2p on 127.0.0.1, the
    built-in digit-sort task of node/examples/digit-sort.toml, async level 2, every batch checked
    by the trainer's verify job). The clock starts when the trainer publishes version 0 (its
    init job: built-in model, seeded warm-up) and stops `--budget` seconds later with Ctrl-C
    (SIGINT), as an operator would stop it.
  - single: trainer/single.py's loop (generate, score, train in one process, same GRPO settings
    from the task's params) starting from the swarm's version 0 weights, so both runs start from
    the same policy; `--single-threads` torch threads (default 2: the machine's cores).

Neither run evaluates while it runs. The swarm's versions are read back from the trainer's
records (`version-published`: time, version, completions trained, weights hash) and copied from
its blob store while the run goes on; the single run's weights are copied at the same schedule
(with its clock stopped). Afterwards every copy is scored on the same held-out prompts
(trainer/evaluate.py): greedy (one argmax completion per prompt) and sampled (one seeded
temperature-1 sample per prompt). Completions sampled are counted from the workers'
`rollouts-committed` records (all generated completions, whether trained on or not); the single
run samples prompts_per_step x group_size per step.

Targets (issue 4): base policy greedy 0.25-0.40; the swarm reaches >= 0.85 greedy; at equal
completions sampled the swarm's greedy accuracy is at most 0.05 below the single run's
(single's curve interpolated, every swarm point where both have data); the swarm's wall time to
0.85 is at most 1.5x the single run's. Each is reported as met, missed, or not measurable (a run
that never reached 0.85 in its budget). Load averages are recorded: the machine is shared.

`--control` runs the single loop once more from the same version 0 with other seeds (prompt
assignment and sampling keyed by another task id) and reports the same pointwise gap between the
two single runs: two runs of one algorithm with no swarm involved, the floor under the 0.05 target.

`--kill-trainer-at SECONDS` (issue 19) replaces the single-process comparison: the swarm runs twice
with one standby trainer more than `--peers` (`local --trainers 2`: peer0 active, peer1 standby), first
undisturbed, then with peer0's node SIGKILLed SECONDS after version 0 (its job process dies with it).
The second run reuses the first's peer identities and task record, so both train the same task id from
the same version 0. The versions after the takeover are read from the standby's records and blob
store. It reports both runs' time to 0.85 greedy and their ratio (target: at most 1.2x), the
takeover (when, from which version, the training gap, versions lost) and each run's usual fields.

Another model and task (issue 26): `--model smollm2-135m --env reasoning-gym:<task> [--param KEY=VALUE ...]`
(or `--task FILE`) runs the same comparison on that task (the swarm gets it as a task file in the base
dir); the targets are then relative: the best held-out greedy accuracy at least +0.10 over the base and
above the noise floor (the largest pointwise gap between the two single runs of --control), and the
swarm's time to the single run's best at most 1.5x the single run's. `--parallel-singles` runs the two
single runs at once, one torch thread each (a 135M model's runs are long); `--no-swarm` runs only them,
from the model's own weights, and `--no-singles` only the swarm (its curve, densely scored, against its
own version 0); `--greedy-only` halves the scoring. `--screen` trains nothing: it scores
the base model greedy on the settings of bench/learning_screen.py (or on --env with its --param options),
to pick a task where the base is right sometimes.

Run: `python bench/learning.py --budget 600 [--control] [--out FILE]` (about 2 x budget + 2 min, one
budget more with --control); `--kill-trainer-at S` takes about the same.
Progress goes to stderr, the JSON to stdout (and FILE).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
os.environ.update({k: os.environ.get(k, v) for k, v in ENV.items()})
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node.records import read_records  # noqa: E402
from node.taskfile import EXAMPLE, flat_params  # noqa: E402

TARGETS = {"base_greedy": (0.25, 0.40), "swarm_greedy": 0.85, "gap_at_equal_completions": 0.05,
           "time_to_085_ratio": 1.5}
# another model or environment (issue 26): the gain over the base, and the swarm's time to the single run's best
GAIN_TARGETS = {"gain_over_base": 0.10, "time_to_single_best_ratio": 1.5}


def task_table(task_file: Path, model: str | None = None, env: str | None = None,
               params: list[str] | None = None) -> dict:
    """The [task] table of `task_file` with `--model`, `--env` and `--param KEY=VALUE` (a TOML value)
    put in; params flattened as announced (env.<task>.<option> keys). Another model or env on the
    built-in example keeps none of its params (they are tuned for the tiny model): only --param's."""
    table = tomllib.loads(task_file.read_text())["task"]
    flat = flat_params(table.get("params") or {}, str(task_file))
    if task_file == EXAMPLE and (model or env):
        flat = {}
        table["name"] = "bench-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in (env or table["env"]))
    for item in params or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"--param {item!r}: write KEY=VALUE")
        try:
            flat[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            flat[key.strip()] = value.strip()  # a bare string
    return {**table, "model": model or table["model"], "env": env or table["env"], "params": flat}


def write_task(table: dict, path: Path) -> Path:
    """`table` as a task file for `swarm-node local --task` (scalars only, as task params are)."""
    def value(v):
        return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v) if isinstance(v, (str, list)) else repr(v)

    lines = ["[task]"] + [f"{k} = {value(v)}" for k, v in table.items() if k != "params"] + ["", "[task.params]"]
    lines += [f"{json.dumps(k)} = {value(v)}" for k, v in table["params"].items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def is_example(table: dict) -> bool:
    """The built-in task, whose targets (issue 4) are absolute accuracies."""
    return table["model"] == "builtin:digit-sort-tiny" and table["env"] == "digit-sort"


def say(text: str) -> None:
    print(f"[learning {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------------------------ swarm

def run_swarm(base: Path, peers: int, budget: float, points: int, task_file: Path, start_timeout: float,
              name: str = "swarm", trainers: int = 1, kill_at: float | None = None,
              same_peers_as: Path | None = None) -> dict:
    """Run `swarm-node local`, copy version weights on the checkpoint schedule, stop it with SIGINT.

    `trainers` > 1: peers 1..K-1 are standby trainers. `kill_at`: SIGKILL the active trainer's node
    (peer0) that many seconds after version 0; the chain goes on in a standby's records. `same_peers_as`
    (an earlier run's dir): the peers take its identities and its task record, so the task id, the
    base policy (version 0 is seeded by the task id) and the prompt draws are the same."""
    import learning_takeover as takeover  # the swarm's modules (keys, libp2p): not needed by --no-swarm

    run_dir = base / name
    copies = base / f"{name}-weights"
    copies.mkdir(parents=True)
    trainer_dirs = [run_dir / f"peer{i}" for i in range(trainers)]
    if same_peers_as is not None:
        takeover.reuse_peers(same_peers_as, run_dir, peers)
    log = open(base / f"{name}-local.log", "w")
    cmd = [sys.executable, "-m", "node.cli", "local", "--peers", str(peers), "--trainers", str(trainers),
           "--base-dir", str(run_dir), "--task", str(task_file)]
    say(f"{name}: {' '.join(cmd[1:])}")
    # SIGINT back to its default: a shell starting this bench in the background ignores SIGINT, the
    # launcher would inherit that, and Ctrl-C (what stops the run) would do nothing
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **ENV}, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    launched = time.time()
    t0, checkpoints, copied, missing, scheduled = None, [], {}, [], 0
    last_report, stopped_at, exit_code, killed_at, took_over = 0.0, None, None, None, False
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"swarm-node local exited early ({proc.returncode}); see {log.name}")
            versions = takeover.chain(trainer_dirs)
            if t0 is None:
                if versions:
                    t0 = versions[0]["ts"]
                    checkpoints = [t0 + budget * k / points for k in range(points + 1)]
                    say(f"{name}: version 0 published {t0 - launched:.0f} s after launch; training for {budget:.0f} s")
                elif time.time() - launched > start_timeout:
                    raise RuntimeError(f"no version 0 within {start_timeout:.0f} s; see {run_dir}/peer*/node.log")
            if t0 is not None:
                for r in versions:  # the first version at or after each checkpoint time (and the newest)
                    due = sum(1 for c in checkpoints if c <= r["ts"])
                    if due > scheduled and r["version"] not in copied:
                        _copy_version(r["dir"], r, copies, copied, missing)
                        scheduled += 1
                now = time.time()
                if kill_at is not None and killed_at is None and now >= t0 + kill_at:
                    if versions and versions[-1]["version"] not in copied:  # the curve's last point before
                        _copy_version(versions[-1]["dir"], versions[-1], copies, copied, missing)
                    killed_at = takeover.kill_node(trainer_dirs[0])
                    say(f"{name}: SIGKILLed the active trainer (peer0) at t={killed_at - t0:.0f}s, "
                        f"version {versions[-1]['version'] if versions else None}")
                new = next((r for r in versions if r["peer"] != 0), None) if killed_at is not None else None
                if new is not None and not took_over:  # the curve's first point after: the new trainer's first
                    if new["version"] not in copied:
                        _copy_version(new["dir"], new, copies, copied, missing)
                    took_over = True
                    say(f"{name}: peer{new['peer']} published version {new['version']} "
                        f"{new['ts'] - killed_at:.1f} s after the kill")
                if now - last_report >= 15 and versions:
                    v = versions[-1]
                    say(f"{name}: t={now - t0:5.0f}s version {v['version']:4d} reward {v.get('reward', 0):.3f} "
                        f"completions trained {v.get('completions', 0)} load {load()}")
                    last_report = now
                if now >= t0 + budget:
                    break
            time.sleep(1.0)
        stopped_at = time.time()
        versions = takeover.chain(trainer_dirs)
        if versions and versions[-1]["version"] not in copied:
            _copy_version(versions[-1]["dir"], versions[-1], copies, copied, missing)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C does: local stops every peer by PID
            try:
                exit_code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                exit_code = proc.wait()
        log.close()
    stop_s = round(time.time() - stopped_at, 1)
    say(f"{name}: stopped with SIGINT in {stop_s} s (exit {exit_code})")
    params = tomllib.loads(task_file.read_text())["task"].get("params", {})
    facts = _swarm_facts(run_dir, peers, trainers, t0, versions, copied, missing, exit_code, stop_s,
                         flat_params(params))
    if killed_at is not None:
        facts["takeover"] = takeover.takeover_facts(trainer_dirs, t0, killed_at, versions)
    return facts


def _copy_version(trainer: Path, record: dict, copies: Path, copied: dict, missing: list) -> None:
    digest = record.get("weights")
    src = trainer / "blobs" / str(digest)
    if not digest or not src.exists():
        missing.append(record["version"])
        copied[record["version"]] = None
        return
    dst = copies / f"v{record['version']:05d}.safetensors"
    shutil.copyfile(src, dst)
    copied[record["version"]] = dst


def _swarm_facts(run_dir: Path, peers: int, trainers: int, t0: float, versions: list[dict], copied: dict,
                 missing: list, exit_code, stop_s: float, params: dict) -> dict:
    per_commit = int(params.get("prompts_per_commit", 4)) * int(params.get("group_size", 16))
    commits = sorted(r["ts"] for i in range(trainers, peers) for r in read_records(run_dir / f"peer{i}",
                                                                                     "rollouts-committed"))
    trainer_dirs = [run_dir / f"peer{i}" for i in range(trainers)]
    dropped: dict[str, int] = {}
    for r in (r for d in trainer_dirs for r in read_records(d, "rollout-dropped")):
        dropped[r.get("reason", "?")] = dropped.get(r.get("reason", "?"), 0) + 1
    failed: dict[str, int] = {}
    bans = []  # every peer here is honest: any ban is a false accusation (and costs the swarm a worker)
    for i in range(peers):
        for r in read_records(run_dir / f"peer{i}", "job-failed"):
            key = f"{r.get('kind')}: {str(r.get('error'))[:80]}"
            failed[key] = failed.get(key, 0) + 1
        bans += [{"by": f"peer{i}", "peer": r.get("peer"), "reason": r.get("reason"), "wall_s": round(r["ts"] - t0, 1)}
                 for r in read_records(run_dir / f"peer{i}", "peer-banned")]
    by_version = {r["version"]: r for r in versions}
    points = []
    for version, path in sorted(copied.items()):
        r = by_version[version]
        points.append({"version": version, "wall_s": round(r["ts"] - t0, 1), "weights": path,
                       "weights_hash": r.get("weights"), "published_by": f"peer{r['peer']}",
                       "completions_trained": int(r.get("completions", 0)),
                       "completions_sampled": per_commit * sum(1 for ts in commits if ts <= r["ts"]),
                       "reward": r.get("reward")})
    steps = [r for r in versions if r["version"] > 0]
    mean = (lambda key: round(sum(float(r.get(key, 0)) for r in steps) / len(steps), 3) if steps else None)
    end = t0 + (points[-1]["wall_s"] if points else 0)
    trained = sum(1 for d in trainer_dirs for _ in read_records(d, "rollout-trained"))
    return {
        "points": points, "versions_published": len(versions), "missing_weights": missing,
        "commitments": len(commits), "completions_sampled": per_commit * len(commits),
        "completions_trained": int(versions[-1].get("completions", 0)) if versions else 0,
        "rollouts_trained": trained,
        # of the batches committed, the share trained on (those still in flight when the run stopped count
        # as not trained: a lower bound)
        "trained_fraction": round(trained / len(commits), 3) if commits else None,
        "rollouts_dropped": dropped, "jobs_failed": failed, "honest_peers_banned": bans,
        "trainer_train_s_mean": mean("train_s"), "completions_used_mean": mean("completions_used"),
        "seconds_per_version": round((end - t0) / max(1, len(steps)), 2) if steps else None,
        "exit_code": exit_code, "sigint_stop_s": stop_s,
    }


# ------------------------------------------------------------------------------------------ single

def run_single_baseline(table: dict, base_weights: bytes | None, budget: float, points: int, threads: int,
                        copies: Path, task_id: str = "bench-single", name: str = "single",
                        device: str = "cpu") -> dict:
    """`base_weights` None: the model's own weights (a model from disk is its own version 0).
    Checkpoint weights are written to files under `copies` (a 135M model's are 0.5 GB each)."""
    import torch

    from swarm.taskparams import env_options
    from trainer.envs import get_env
    from trainer.policy import base_model, load_weights, weights_bytes
    from trainer.single import SingleConfig, run_single
    from trainer.taskconfig import grpo_config

    torch.set_num_threads(threads)
    model, tokenizer = base_model(table["model"], 0)
    if base_weights is not None:
        load_weights(model, base_weights)
    model = model.to(device)
    copies.mkdir(parents=True, exist_ok=True)
    g = grpo_config(table["params"])
    schedule = [budget * k / points for k in range(points + 1)]
    kept: list[dict] = []
    last_report = [time.monotonic()]

    def checkpoint(record: dict, m) -> None:
        due = sum(1 for c in schedule if c <= record["elapsed_s"])
        if len(kept) < due or record["elapsed_s"] >= budget:
            path = copies / f"step{record['step']:05d}.safetensors"
            path.write_bytes(weights_bytes(m))
            kept.append({"step": record["step"], "wall_s": record["elapsed_s"], "weights": str(path),
                         "completions_sampled": record["step"] * g.prompts_per_step * g.group_size,
                         "reward": record.get("reward")})
        if time.monotonic() - last_report[0] >= 15:
            say(f"{name}: t={record['elapsed_s']:5.0f}s step {record['step']:4d} reward {record.get('reward', 0):.3f} "
                f"gen {record.get('gen_s', 0):.2f}s train {record.get('train_s', 0):.2f}s load {load()}")
            last_report[0] = time.monotonic()

    say(f"{name}: {budget:.0f} s on {device}, {threads} torch threads, prompts and samples seeded by {task_id!r}")
    history = run_single(model, tokenizer, get_env(table["env"], env_options(table["params"])),
                         SingleConfig(grpo=g, seconds=budget, eval_every=0, task_id=task_id),
                         checkpoint=checkpoint)
    steps = history[1:]
    used = [r for r in steps if r.get("used")]
    return {"points": kept, "steps": len(steps), "threads": threads, "device": device,
            "completions_sampled": len(steps) * g.prompts_per_step * g.group_size,
            "gen_s_mean": round(sum(r["gen_s"] for r in steps) / max(1, len(steps)), 3),
            "train_s_mean": round(sum(r["train_s"] for r in steps) / max(1, len(steps)), 3),
            "completions_used_mean": round(sum(r["used"] for r in used) / max(1, len(steps)), 1),
            "seconds_per_step": round(steps[-1]["elapsed_s"] / len(steps), 2) if steps else None}


# ------------------------------------------------------------------------------------------ scoring

def evaluate_points(table: dict, name: str, points: list[dict], n_heldout: int, threads: int,
                    sampled: bool = True, cache: dict | None = None, device: str = "cpu") -> None:
    """Score each point's weights in place; `cache` (weights digest -> scores) skips weights already
    scored (every run's first point is the same version 0)."""
    import torch

    from trainer.evaluate import evaluate_weights

    max_new = int(table["params"].get("max_new_tokens", 10))
    torch.set_num_threads(threads)
    for p in points:
        w = p.pop("weights")
        if w is None:
            p["greedy"] = p["greedy_exact"] = p["sampled"] = None
            continue
        data = w if isinstance(w, bytes) else Path(w).read_bytes()
        digest = _tensors_digest(data)
        acc = (cache or {}).get(digest) or evaluate_weights(data, table["model"], table["env"], n_heldout, max_new,
                                                            seed_tag="bench-eval", params=table["params"],
                                                            sampled=sampled, device=device)
        if cache is not None:
            cache[digest] = acc
        p["greedy"] = round(acc["greedy"], 4)
        p["greedy_exact"] = round(acc["greedy_exact"], 4)
        p["sampled"] = round(acc["sampled"], 4) if acc["sampled"] is not None else None
        say(f"eval {name}: wall {p['wall_s']:6.1f}s completions {p['completions_sampled']:6d} "
            f"greedy {p['greedy']:.3f} (full marks {p['greedy_exact']:.3f}) sampled {p['sampled']}")


def _tensors_digest(data: bytes) -> str:
    """The weights' values (names and tensors), not the file's bytes: the swarm's version 0 blob and a
    single run's copy of the same weights are the same policy, scored once."""
    import hashlib

    from safetensors.torch import load

    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(load(data).items()):
        h.update(name.encode())
        h.update(tensor.float().contiguous().numpy().tobytes())
    return h.hexdigest()


def first_reaching(points: list[dict], level: float) -> dict | None:
    return next((p for p in points if p.get("greedy") is not None and p["greedy"] >= level), None)


def interpolate(points: list[dict], x: float, key: str = "completions_sampled") -> float | None:
    pts = [(p[key], p["greedy"]) for p in points if p.get("greedy") is not None]
    if not pts or x < pts[0][0] or x > pts[-1][0]:
        return None
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]


def gaps_at_equal_completions(run: list[dict], reference: list[dict], name: str = "swarm") -> list[dict]:
    """`run`'s greedy accuracy minus `reference`'s (interpolated) at each of `run`'s points."""
    gaps = []
    for p in run:
        ref = interpolate(reference, p["completions_sampled"]) if p.get("greedy") is not None else None
        if ref is not None:
            gaps.append({"completions_sampled": p["completions_sampled"], name: p["greedy"],
                         "single": round(ref, 4), "gap": round(p["greedy"] - ref, 4)})
    return gaps


def control_gaps(control: dict, single: dict) -> dict:
    """The same pointwise rule between two single-process runs that differ only in their seeds:
    how far apart two runs of one algorithm on one machine land, with no swarm involved."""
    gaps = gaps_at_equal_completions(control["points"], single["points"], "control")
    worst = min((g["gap"] for g in gaps), default=None)
    return {"worst": worst, "worst_abs": max((abs(g["gap"]) for g in gaps), default=None),
            "mean": round(sum(g["gap"] for g in gaps) / len(gaps), 4) if gaps else None,
            "within_005": worst is not None and worst >= -TARGETS["gap_at_equal_completions"],
            "best_greedy": max((p["greedy"] for p in control["points"] if p.get("greedy") is not None), default=None),
            "points": gaps}


def verdicts(swarm: dict, single: dict) -> dict:
    sw, si = swarm["points"], single["points"]
    base = sw[0]["greedy"] if sw and sw[0]["version"] == 0 else None
    lo, hi = TARGETS["base_greedy"]
    best = max((p["greedy"] for p in sw if p.get("greedy") is not None), default=None)
    gaps = gaps_at_equal_completions(sw, si)
    worst = min((g["gap"] for g in gaps), default=None)
    t_sw, t_si = first_reaching(sw, TARGETS["swarm_greedy"]), first_reaching(si, TARGETS["swarm_greedy"])
    ratio = round(t_sw["wall_s"] / t_si["wall_s"], 3) if t_sw and t_si and t_si["wall_s"] > 0 else None

    def met(ok, measurable=True):
        return "met" if measurable and ok else "missed" if measurable else "not measurable"

    return {
        "base_greedy": {"value": base, "target": [lo, hi], "result": met(base is not None and lo <= base <= hi)},
        "swarm_best_greedy": {"value": best, "target": TARGETS["swarm_greedy"],
                              "result": met(best is not None and best >= TARGETS["swarm_greedy"])},
        "gap_at_equal_completions": {
            "worst": worst, "mean": round(sum(g["gap"] for g in gaps) / len(gaps), 4) if gaps else None,
            "target": f">= -{TARGETS['gap_at_equal_completions']} at every swarm point within single's range",
            "result": met(worst is not None and worst >= -TARGETS["gap_at_equal_completions"], bool(gaps)),
            "points": gaps},
        "time_to_085": {"swarm_s": t_sw["wall_s"] if t_sw else None, "single_s": t_si["wall_s"] if t_si else None,
                        "ratio_swarm_over_single": ratio, "target": TARGETS["time_to_085_ratio"],
                        "result": (met(ratio <= TARGETS["time_to_085_ratio"]) if ratio is not None else
                                   "missed (swarm never reached 0.85)" if t_si else
                                   "not measurable (single never reached 0.85)" if t_sw else
                                   "not measurable (neither reached 0.85)")},
        "single_best_greedy": max((p["greedy"] for p in si if p.get("greedy") is not None), default=None),
    }


def best_of(points: list[dict], key: str = "greedy") -> float | None:
    return max((p[key] for p in points if p.get(key) is not None), default=None)


def swarm_only_verdicts(swarm: dict) -> dict:
    """`--no-singles`: the swarm's gain over its own version 0; the targets that compare with the single
    runs (noise floor, time to the single run's best) are not run."""
    pts = swarm["points"]
    base = pts[0]["greedy"] if pts and pts[0]["version"] == 0 else None
    best = best_of(pts)
    gain = round(best - base, 4) if best is not None and base is not None else None
    want = GAIN_TARGETS["gain_over_base"]
    return {"base_greedy": base, "best_greedy": {"swarm": best}, "gain_over_base": {"swarm": gain},
            "gain_target": {"target": f">= +{want} (no noise floor without the single runs)",
                            "result": {"swarm": "not measurable" if gain is None else met_or_missed(gain >= want)}},
            "time_to_single_best": {"result": "not run (--no-singles)"}}


def gain_verdicts(swarm: dict | None, single: dict, control: dict | None) -> dict:
    """Issue 26's targets for a model and task other than the built-in one: the best held-out greedy
    accuracy at least +0.10 over the base and outside the noise floor (the spread of the two single
    runs: the largest pointwise gap between them, at equal completions), and the swarm's time to the
    single run's best at most 1.5x the single run's."""
    si = single["points"]
    base = si[0]["greedy"] if si and si[0].get("greedy") is not None else None
    runs = {"single": single, **({"control": control} if control else {}), **({"swarm": swarm} if swarm else {})}
    best = {k: best_of(r["points"]) for k, r in runs.items()}
    floor = None
    if control is not None:
        gaps = gaps_at_equal_completions(control["points"], si, "control")
        floor = max((abs(g["gap"]) for g in gaps), default=None)
    gains = {k: round(b - base, 4) if b is not None and base is not None else None for k, b in best.items()}
    t_single = first_reaching(si, best["single"]) if best["single"] is not None else None
    t_swarm = first_reaching(swarm["points"], best["single"]) if swarm and best["single"] is not None else None
    ratio = (round(t_swarm["wall_s"] / t_single["wall_s"], 3)
             if t_swarm and t_single and t_single["wall_s"] > 0 else None)
    want = GAIN_TARGETS["gain_over_base"]

    def result(gain):
        if gain is None:
            return "not measurable"
        if gain < want:
            return "missed"
        return "met" if floor is None or gain > floor else "missed (within the noise floor)"

    exact_base = si[0].get("greedy_exact") if si else None
    exact_best = {k: best_of(r["points"], "greedy_exact") for k, r in runs.items()}
    return {
        "base_greedy": base, "best_greedy": best, "gain_over_base": gains, "noise_floor": floor,
        "full_marks": {"base": exact_base, "best": exact_best, "gain_over_base": {
            k: round(b - exact_base, 4) if b is not None and exact_base is not None else None
            for k, b in exact_best.items()}},
        "gain_target": {"target": f">= +{want} and > noise floor",
                        "result": {k: result(g) for k, g in gains.items()}},
        "time_to_single_best": {
            "level": best["single"], "single_s": t_single["wall_s"] if t_single else None,
            "swarm_s": t_swarm["wall_s"] if t_swarm else None, "ratio_swarm_over_single": ratio,
            "target": GAIN_TARGETS["time_to_single_best_ratio"],
            "result": ("not run" if swarm is None else
                       "not measurable (the single run never rose above its start)" if not gains.get("single") else
                       met_or_missed(ratio <= GAIN_TARGETS["time_to_single_best_ratio"]) if ratio is not None else
                       "missed (the swarm never reached the single run's best)")},
    }


def met_or_missed(ok: bool) -> str:
    return "met" if ok else "missed"


def _drop_bulk(base: Path) -> None:
    """Weights copies, blobs and shards are only needed until the checkpoints are scored."""
    for path in [*base.glob("*-weights"), *base.glob("*/peer*/blobs"), *base.glob("*/peer*/shards")]:
        shutil.rmtree(path, ignore_errors=True)


def run_takeover_pair(args, base: Path, out: dict) -> dict:
    """--kill-trainer-at: the same swarm twice, with one standby trainer more than --peers (peer1);
    undisturbed, then with the active trainer SIGKILLed partway. The second run reuses the first's
    peers and task (so the same version 0); both are scored like the swarm run above."""
    import learning_takeover as takeover

    peers = args.peers + 1
    task_file = takeover.standby_task(EXAMPLE, base)
    calm = run_swarm(base, peers, args.budget, args.points, task_file, args.start_timeout, name="swarm", trainers=2)
    out["load_after_swarm"] = load()
    hit = run_swarm(base, peers, args.budget, args.points, task_file, args.start_timeout, name="takeover",
                    trainers=2, kill_at=args.kill_trainer_at, same_peers_as=base / "swarm")
    out["load_after_takeover"] = load()
    say("scoring every checkpoint on held-out prompts")
    table = task_table(EXAMPLE)
    evaluate_points(table, "swarm", calm["points"], args.eval_prompts, args.single_threads)
    evaluate_points(table, "takeover", hit["points"], args.eval_prompts, args.single_threads)
    out["load_end"] = load()
    base_weights = [run["points"][0]["weights_hash"] if run["points"] else None for run in (calm, hit)]
    out["peers"], out["trainers"], out["kill_trainer_at_s"] = peers, 2, args.kill_trainer_at
    out["swarm"], out["takeover"] = calm, hit
    t_calm, t_hit = (first_reaching(run["points"], TARGETS["swarm_greedy"]) for run in (calm, hit))
    kill_s = hit.get("takeover", {}).get("killed_at_s")
    before = [p for p in hit["points"] if kill_s is not None and p["wall_s"] <= kill_s and p.get("greedy") is not None]
    after = [p for p in hit["points"] if kill_s is not None and p["wall_s"] > kill_s and p.get("greedy") is not None]
    out["targets"] = {
        "time_to_085": takeover.pair_verdict(t_calm["wall_s"] if t_calm else None, t_hit["wall_s"] if t_hit else None),
        "same_base_policy": base_weights[0] is not None and base_weights[0] == base_weights[1],
        "base_greedy": [run["points"][0].get("greedy") if run["points"] else None for run in (calm, hit)],
        "best_greedy": [max((p["greedy"] for p in run["points"] if p.get("greedy") is not None), default=None)
                        for run in (calm, hit)],
        # the curve goes on: the new trainer's first scored version next to the killed one's last
        "greedy_last_before_kill": before[-1]["greedy"] if before else None,
        "greedy_first_after_takeover": after[0]["greedy"] if after else None,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=600.0, help="seconds of RL per run (default 600)")
    ap.add_argument("--peers", type=int, default=4, help="swarm peers: 1 trainer + N-1 workers (default 4; "
                                                          "--kill-trainer-at adds a standby trainer)")
    ap.add_argument("--task", type=Path, default=EXAMPLE, help=f"task file (default {EXAMPLE.relative_to(ROOT)})")
    ap.add_argument("--model", help="the task's model instead (smollm2-135m, hf:ORG/NAME@REV, dir:PATH)")
    ap.add_argument("--env", help="the task's environment instead (e.g. reasoning-gym:leg_counting)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="set a task param (a TOML value; e.g. lr=2e-6, env.leg_counting.max_animals=2); repeatable")
    ap.add_argument("--points", type=int, default=20, help="evaluated checkpoints per run (default 20)")
    ap.add_argument("--eval-prompts", type=int, default=256, help="held-out prompts per evaluation")
    ap.add_argument("--greedy-only", action="store_true", help="score checkpoints greedy only (half the cost)")
    ap.add_argument("--single-threads", type=int, default=2, help="torch threads of the single run")
    ap.add_argument("--device", default="cpu",
                    help="where the single runs train and every checkpoint is scored: cpu, cuda, or auto "
                         "(cuda when torch sees one); the swarm's peers stay on the CPU")
    ap.add_argument("--parallel-singles", action="store_true",
                    help="with --control: run the two single runs at once, half the --single-threads each")
    ap.add_argument("--no-swarm", action="store_true", help="only the single run(s), from the model's own weights")
    ap.add_argument("--no-singles", action="store_true",
                    help="only the swarm: its held-out curve against its version 0 (a diagnostic of its own dynamics)")
    ap.add_argument("--screen", action="store_true",
                    help="no training: the base model's held-out greedy accuracy on the settings of "
                         "bench/learning_screen.py (or only --env with its --param options), --eval-prompts each")
    ap.add_argument("--start-timeout", type=float, default=300.0, help="seconds to wait for version 0")
    ap.add_argument("--base-dir", type=Path, help="where runs go (default runs/bench-learning/<time>)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--control", action="store_true",
                    help="also run the single loop a second time with other seeds (another budget) and report "
                         "the same pointwise gap between the two single runs: the noise floor of the gap target")
    ap.add_argument("--keep-data", action="store_true",
                    help="keep the weights copies and the peers' blobs and shards (about 1 GB); by default "
                         "only logs and records stay in the base dir")
    ap.add_argument("--kill-trainer-at", type=float, metavar="SECONDS",
                    help="instead of the single-process comparison: run the swarm with one standby trainer more "
                         "than --peers twice, undisturbed and with the active trainer SIGKILLed SECONDS after "
                         "version 0, and compare their times to 0.85 (target: at most 1.2x)")
    args = ap.parse_args(argv)
    from trainer.evaluate import pick_device

    args.device = pick_device(args.device)
    if args.kill_trainer_at is not None and (args.control or not 0 < args.kill_trainer_at < args.budget):
        ap.error("--kill-trainer-at takes seconds between 0 and --budget, and no --control")
    table = task_table(args.task, args.model, args.env, args.param)
    if args.kill_trainer_at is not None and not is_example(table):
        ap.error("--kill-trainer-at runs the built-in task only")
    if args.no_swarm and args.no_singles:
        ap.error("--no-swarm and --no-singles leave nothing to run")
    if args.no_singles and (args.control or args.kill_trainer_at is not None):
        ap.error("--no-singles runs the swarm alone: no --control or --kill-trainer-at")
    if args.no_swarm and table["model"] == "builtin:digit-sort-tiny":
        ap.error("--no-swarm needs a model from disk: the built-in model's version 0 is made by the swarm's init job")
    started = time.time()
    if args.screen:
        return _screen(args, table, started)
    base = args.base_dir or ROOT / "runs" / "bench-learning" / time.strftime("%Y%m%d-%H%M%S")
    if base.exists():
        raise SystemExit(f"{base} exists; pass a new --base-dir")
    base.mkdir(parents=True)
    task_file = args.task if table == task_table(args.task) else write_task(table, base / "task.toml")
    out = {"bench": "learning", "budget_s": args.budget, "peers": args.peers, "eval_prompts": args.eval_prompts,
           "task": str(task_file), "model": table["model"], "env": table["env"], "params": table["params"],
           "cpus": os.cpu_count(), "device": device_name(args.device), "load_start": load(), "base_dir": str(base)}
    if args.kill_trainer_at is not None:
        return _finish(run_takeover_pair(args, base, out), args, base, started)
    swarm, base_weights = None, None
    if not args.no_swarm:
        swarm = run_swarm(base, args.peers, args.budget, args.points, task_file, args.start_timeout)
        out["load_after_swarm"] = load()
        if not swarm["points"] or swarm["points"][0]["version"] != 0 or swarm["points"][0]["weights"] is None:
            raise SystemExit(f"the swarm's version 0 weights were not found; see {base}")
        base_weights = Path(swarm["points"][0]["weights"]).read_bytes()
    single, control = run_singles(args, table, base, base_weights) if not args.no_singles else (None, None)
    out["load_after_single"] = load()
    say("scoring every checkpoint on held-out prompts")
    scored: dict = {}
    for name, run in (("swarm", swarm), ("single", single), ("control", control)):
        if run is not None:
            evaluate_points(table, name, run["points"], args.eval_prompts, args.single_threads,
                            sampled=not args.greedy_only, cache=scored, device=args.device)
    out["load_end"] = load()
    out["swarm"], out["single"] = swarm, single
    if control is not None:
        out["control"] = {**{k: v for k, v in control.items() if k != "points"},
                          "gap_to_single": control_gaps(control, single)}
    if single is None:
        out["targets"] = swarm_only_verdicts(swarm)
        return _finish(out, args, base, started)
    if not is_example(table):
        out["targets"] = gain_verdicts(swarm, single, control)
        if swarm is not None:
            out["ratios"] = _ratios(swarm, single)
        return _finish(out, args, base, started)
    out["targets"] = verdicts(swarm, single)
    out["ratios"] = {**_ratios(swarm, single),
                     "best_greedy_swarm_minus_single": round(out["targets"]["swarm_best_greedy"]["value"]
                                                             - out["targets"]["single_best_greedy"], 4)
                     if out["targets"]["swarm_best_greedy"]["value"] is not None
                     and out["targets"]["single_best_greedy"] is not None else None}
    return _finish(out, args, base, started)


def device_name(device: str) -> str:
    """What the single runs and the scoring ran on, in words (the GPU's name where it was one)."""
    import torch

    return torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"


def _ratios(swarm: dict, single: dict) -> dict:
    sp_sw, sp_si = swarm.get("seconds_per_version"), single.get("seconds_per_step")
    return {"seconds_per_step_swarm_over_single": round(sp_sw / sp_si, 3) if sp_sw and sp_si else None,
            "completions_sampled_swarm_over_single": round(swarm["completions_sampled"] / single["completions_sampled"], 3)
            if single["completions_sampled"] else None}


def run_singles(args, table: dict, base: Path, base_weights: bytes | None) -> tuple[dict, dict | None]:
    """The single run and (--control) its twin with other seeds; at once with --parallel-singles,
    each in its own process with half the --single-threads (so each has one of the two cores here)."""
    kw = dict(table=table, base_weights=base_weights, budget=args.budget, points=args.points, device=args.device)
    single_kw = {**kw, "copies": base / "single-weights"}
    control_kw = {**kw, "copies": base / "control-weights", "task_id": "bench-single-control", "name": "control"}
    if not args.control:
        return run_single_baseline(**single_kw, threads=args.single_threads), None
    if not args.parallel_singles:
        return (run_single_baseline(**single_kw, threads=args.single_threads),
                run_single_baseline(**control_kw, threads=args.single_threads))
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        half = max(1, args.single_threads // 2)
        jobs = [pool.submit(run_single_baseline, **single_kw, threads=half),
                pool.submit(run_single_baseline, **control_kw, threads=half)]
        return jobs[0].result(), jobs[1].result()


def _screen(args, table: dict, started: float) -> int:
    from learning_screen import SETTINGS, screen

    settings = [(table["env"], {k: v for k, v in table["params"].items() if k.startswith("env.")})] \
        if args.env else SETTINGS
    max_new = int(table["params"].get("max_new_tokens", 64))
    load_start = load()
    rows = screen(table["model"], settings, args.eval_prompts, max_new, args.single_threads, say=say)
    out = {"bench": "learning-screen", "model": table["model"], "eval_prompts": args.eval_prompts,
           "max_new_tokens": max_new, "cpus": os.cpu_count(), "load_start": load_start, "load_end": load(),
           "settings": rows}
    out["elapsed_s"] = round(time.time() - started, 1)
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _finish(out: dict, args, base: Path, started: float) -> int:
    out["elapsed_s"] = round(time.time() - started, 1)
    if not args.keep_data:
        _drop_bulk(base)
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
