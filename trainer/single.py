"""Single-process GRPO baseline: generate, score and train in one loop, no swarm.

This is the yardstick the swarm is measured against (same prompts by assignment, same seeds, same
GRPO), and the smallest end-to-end check that "the model learns". Run it:

    python -m trainer.single --seconds 180
    python -m trainer.single --task my-task.toml --seconds 600   # a task file's model, env and params
"""

from __future__ import annotations

import argparse
import json
import time
import tomllib
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from gossip.assignment import assign_prompts
from swarm.taskparams import env_options
from trainer.envs import Environment, get_env
from trainer.grpo import GRPOConfig, group_advantages, grpo_step, lr_at, make_batch, make_optimizer
from trainer.inference import Backend, TorchBackend
from trainer.policy import BUILTIN_TINY, base_model
from trainer.rollout import accuracy, generate_rollouts
from trainer.taskconfig import grpo_config


@dataclass
class SingleConfig:
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    seconds: float = 180.0  # wall-clock budget for the RL loop (evaluation included)
    max_steps: int | None = None  # stop after this many GRPO batches, whichever comes first
    eval_every: int = 5  # held-out evaluation every N batches (and at start and end); 0 = never
    eval_prompts: int = 256  # held-out prompts per evaluation
    task_id: str = "single"  # feeds prompt assignment and sampling seeds


def evaluate(env: Environment, tokenizer, backend: Backend, cfg: SingleConfig, step: int) -> dict:
    """Greedy and sampled (one seeded sample, temperature 1) held-out accuracy."""
    n, m = cfg.eval_prompts, cfg.grpo.max_new_tokens
    return {"greedy_acc": accuracy(env, tokenizer, backend, n, temperature=0.0, max_new_tokens=m),
            "sampled_acc": accuracy(env, tokenizer, backend, n, temperature=1.0, max_new_tokens=m,
                                    seed_tag=f"eval-{step}")}


def rollouts_batch(rollouts, g: GRPOConfig, pad_id: int, keep_all: bool = False):
    """(the GRPO batch of `rollouts`, in groups of `g.group_size`, or None; the completions in it).

    As the swarm's trainer job does (trainer/train_batch.py): completions whose whole group scored
    the same carry no gradient, so they cost no forward/backward pass (`keep_all`: keep them anyway,
    for a benchmark that must time a step whatever the rewards)."""
    adv = group_advantages(torch.tensor([r.reward for r in rollouts]), g.group_size, g.std_normalize)
    keep = [k for k in range(len(rollouts)) if keep_all or adv[k] != 0]
    if not keep:
        return None, 0
    batch = make_batch([rollouts[k].completion.prompt_ids for k in keep],
                       [rollouts[k].completion.token_ids for k in keep],
                       [rollouts[k].completion.logprobs for k in keep], adv[keep], pad_id)
    return batch, len(keep)


def run_single(model, tokenizer, env: Environment, cfg: SingleConfig = SingleConfig(),
               log: Callable[[dict], None] | None = None,
               checkpoint: Callable[[dict, torch.nn.Module], None] | None = None) -> list[dict]:
    """Train `model` in place with GRPO; returns one record per batch (evaluations included).

    `checkpoint(record, model)` is called after every batch (and once before the first) with the
    clock stopped, so a caller can copy the weights for an offline evaluation that costs the run
    nothing (bench/learning.py does, with `eval_every=0`)."""
    g = cfg.grpo
    backend = TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id,
                           capture_hidden=False)
    optimizer = make_optimizer(model, g)
    history: list[dict] = []
    start = time.monotonic()

    def emit(record: dict) -> None:
        nonlocal start
        record["elapsed_s"] = round(time.monotonic() - start, 2)
        history.append(record)
        if checkpoint is not None:
            paused = time.monotonic()
            checkpoint(record, model)
            start += time.monotonic() - paused  # the caller's copying is not training time
        if log is not None:
            log(record)

    def finished() -> bool:
        return (time.monotonic() - start >= cfg.seconds
                or (cfg.max_steps is not None and step >= cfg.max_steps))

    step = 0
    emit({"step": 0, **(evaluate(env, tokenizer, backend, cfg, 0) if cfg.eval_every else {})})
    while not finished():
        t0 = time.monotonic()
        indices = assign_prompts(cfg.task_id, b"local", step, g.prompts_per_step, env.n_prompts)
        rollouts = generate_rollouts(env, tokenizer, backend, indices, samples=g.group_size,
                                     max_new_tokens=g.max_new_tokens, temperature=g.temperature,
                                     task_id=cfg.task_id, policy_version=step,
                                     format_weight=g.format_weight)
        t1 = time.monotonic()
        rewards = torch.tensor([r.reward for r in rollouts])
        batch, used = rollouts_batch(rollouts, g, tokenizer.pad_token_id)
        stats = {}
        if batch is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(g, step)
            stats = grpo_step(model, optimizer, batch, g, on_policy=True)  # sampled by these weights
        step += 1
        record = {"step": step, "reward": float(rewards.mean()), "used": used, "gen_s": round(t1 - t0, 3),
                  "train_s": round(time.monotonic() - t1, 3),
                  **{k: round(v, 5) for k, v in stats.items()}}
        if cfg.eval_every and (step % cfg.eval_every == 0 or finished()):  # and always the last batch
            record.update(evaluate(env, tokenizer, backend, cfg, step))
        emit(record)
    return history


def main(argv: list[str] | None = None) -> None:
    from trainer.evaluate import pick_device
    from trainer.model import create_builtin_model, load_model
    from trainer.warmup import WarmupConfig, warmup

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--task", help="a task file: train its model on its env with its params (GRPO settings "
                                   "and env.* options); --model, --env and --lr are then ignored")
    ap.add_argument("--model", help="model directory (default: built-in model, warmed up here)")
    ap.add_argument("--env", default="digit-sort")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--max-steps", type=int)
    ap.add_argument("--lr", type=float, default=GRPOConfig.lr)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=5, help="held-out evaluation every N steps; 0 = never")
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when there is one)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    grpo, name, model_name = GRPOConfig(lr=args.lr), args.env, args.model
    options: dict = {}
    if args.task:
        task = task_table(args.task)
        grpo, name, options = grpo_config(task["params"]), task["env"], env_options(task["params"])
    env = get_env(name, options)
    if args.task and task["model"] != BUILTIN_TINY:
        model, tokenizer = base_model(task["model"])
    elif model_name:
        model, tokenizer = load_model(model_name)
    else:
        model, tokenizer = create_builtin_model(args.seed)
        t0 = time.monotonic()
        warmup(model, tokenizer, env, WarmupConfig(seed=args.seed))
        print(json.dumps({"warmup_s": round(time.monotonic() - t0, 1)}), flush=True)
    cfg = SingleConfig(grpo=grpo, seconds=args.seconds, max_steps=args.max_steps, eval_every=args.eval_every,
                       eval_prompts=args.eval_prompts)
    device = pick_device(args.device)
    print(json.dumps({"config": asdict(cfg), "device": device}), flush=True)
    run_single(model.to(device), tokenizer, env, cfg, log=lambda r: print(json.dumps(r), flush=True))


def task_table(path: str) -> dict:
    """A task file's [task] table, its params flattened as announced (env.<task>.<option> keys)."""
    from node.taskfile import flat_params

    with open(path, "rb") as f:
        task = tomllib.load(f)["task"]
    return {**task, "params": flat_params(task.get("params") or {}, path)}


if __name__ == "__main__":
    main()
