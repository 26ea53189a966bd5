"""How much of a GRPO run's update the published bf16 weights carry: rounded to nearest or dithered.

Peers run a version as the trainer publishes it, in the task's `weights_dtype` (bf16), while the
trainer trains fp32 master weights. This runs the single-process GRPO loop (trainer/single.py) from
the model's bf16 weights (what version 0 is) for --steps steps and, at half-way and at the end, casts
the master both ways (torch's round to nearest; `dithered_bf16`, what trainer/weights publishes) and
reports, per cast:

  retained      the cast's update projected on the master's, <cast - base, master - base> / |master - base|^2
                (1: the published weights moved as the master did; 0: they stayed at the base)
  changed_frac  the fraction of weights that differ from the base (the master's: nearly all)

and the held-out greedy accuracy (--eval-prompts) of the base, the master and both casts at the end:
the baseline in the same run is the master itself, the policy the trainer trains.

    .venv/bin/python bench/rounding.py [--model smollm2-135m] [--env reasoning-gym:chain_sum] [--steps 16]
                                       [--eval-prompts 128] [--threads 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# chain_sum as bench/learning.py's CPU run trains it (docs/benchmarks.md)
PARAMS = {"env.chain_sum.max_terms": 2, "env.chain_sum.max_digits": 2, "group_size": 8, "prompts_per_step": 4,
          "prompts_per_commit": 2, "lr": 1e-5, "max_new_tokens": 48, "format_weight": 0.1, "temperature": 0.7,
          "minibatches": 2}


def casts(state: dict) -> dict:
    import torch

    from trainer.weights.tensors import dithered_bf16

    def each(cast):
        return {k: cast(v).float() if v.is_floating_point() else v for k, v in state.items()}

    return {"nearest": each(lambda v: v.to(torch.bfloat16)), "dither": each(dithered_bf16)}


def retention(master: dict, base: dict) -> dict:
    """Per cast: the update it carries (projection on the master's) and the fraction of weights moved."""
    num, changed, den, n, moved = {}, {}, 0.0, 0, 0
    cast = casts(master)
    for k, m in master.items():
        if not m.is_floating_point():
            continue
        d = (m - base[k]).double()
        den += float((d * d).sum())
        n += m.numel()
        moved += int((d != 0).sum())
        for name, state in cast.items():
            c = (state[k] - base[k]).double()
            num[name] = num.get(name, 0.0) + float((c * d).sum())
            changed[name] = changed.get(name, 0) + int((c != 0).sum())
    return {name: {"retained": round(num[name] / den, 4), "changed_frac": round(changed[name] / n, 4)}
            for name in cast} | {"master": {"changed_frac": round(moved / n, 4)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="reasoning-gym:chain_sum")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--eval-prompts", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import torch

    from swarm.taskparams import env_options
    from trainer.envs import get_env
    from trainer.evaluate import evaluate_weights
    from trainer.policy import base_model
    from trainer.single import SingleConfig, run_single
    from trainer.taskconfig import grpo_config

    torch.set_num_threads(args.threads)
    model, tokenizer = base_model(args.model, 0)
    with torch.no_grad():  # version 0 as the swarm publishes it
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    base = {k: v.clone() for k, v in model.state_dict().items()}
    kept: dict[int, dict] = {}

    def checkpoint(record: dict, m) -> None:
        if record["step"] in (args.steps // 2, args.steps):
            kept[record["step"]] = {k: v.clone() for k, v in m.state_dict().items()}
        print(json.dumps({k: record.get(k) for k in ("step", "reward", "used", "gen_s", "train_s")}),
              file=sys.stderr, flush=True)

    started = time.monotonic()
    run_single(model, tokenizer, get_env(args.env, env_options(PARAMS)),
               SingleConfig(grpo=grpo_config(PARAMS), seconds=1e9, max_steps=args.steps, eval_every=0,
                            task_id="bench-rounding"), checkpoint=checkpoint)
    out = {"bench": "rounding", "model": args.model, "env": args.env, "params": PARAMS, "steps": args.steps,
           "train_s": round(time.monotonic() - started, 1),
           "retention": {str(step): retention(state, base) for step, state in sorted(kept.items())}}
    last = kept[args.steps]
    scored = {}
    for name, state in {"base": base, "master": last, **casts(last)}.items():
        acc = evaluate_weights(state, args.model, args.env, args.eval_prompts, int(PARAMS["max_new_tokens"]),
                               params=PARAMS, sampled=False)
        scored[name] = round(acc["greedy"], 4)
        print(json.dumps({"scored": name, "greedy": scored[name]}), file=sys.stderr, flush=True)
    out["greedy"] = scored
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
