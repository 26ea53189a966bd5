"""GRPO step time with each group's prompt run once (trainer/prefix.py) against every row running it.

One batch of real rollouts (the base model's own samples on the task's prompts: --prompts prompts x
--group completions, scored by the environment, groups without an advantage dropped as the trainer
drops them), then `grpo_step` on copies of the same model and optimizer state, the two ways in
alternating rounds: seconds per step, tokens the model ran (prompt + completion per row against
prompt once per group), and how far the two ways' log-probabilities and updated weights lie apart.

    .venv/bin/python bench/grpo_step.py [--model smollm2-135m] [--env reasoning-gym:chain_sum]
                                        [--prompts 4] [--group 8] [--rounds 3] [--threads 1] [--out FILE]
    .venv/bin/python bench/grpo_step.py --model builtin:digit-sort-tiny --env digit-sort --prompts 16 --group 16
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# chain_sum as bench/learning.py's CPU run trains it (docs/benchmarks.md); other tasks their defaults
PARAMS = {"lr": 1e-5, "temperature": 0.7, "minibatches": 2}
ENV_PARAMS = {"reasoning-gym:chain_sum": {"env.chain_sum.max_terms": 2, "env.chain_sum.max_digits": 2,
                                          "max_new_tokens": 48, "format_weight": 0.1}}


def rollouts_batch(model, tokenizer, env, prompts: int, group: int, g):
    from gossip.assignment import assign_prompts
    from trainer.inference import TorchBackend
    from trainer.rollout import generate_rollouts
    from trainer import single

    backend = TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=False)
    indices = assign_prompts("bench-grpo-step", b"local", 0, prompts, env.n_prompts)
    rollouts = generate_rollouts(env, tokenizer, backend, indices, samples=group, max_new_tokens=g.max_new_tokens,
                                 temperature=g.temperature, task_id="bench-grpo-step", policy_version=0,
                                 format_weight=g.format_weight)
    batch, _ = single.rollouts_batch(rollouts, g, tokenizer.pad_token_id)
    if batch is None:  # every group scored alike: time the step on all of them anyway
        batch, _ = single.rollouts_batch(rollouts, g, tokenizer.pad_token_id, keep_all=True)
    return batch, len(rollouts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="reasoning-gym:chain_sum")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import torch

    import trainer.grpo as grpo
    from swarm.taskparams import env_options
    from trainer.envs import get_env
    from trainer.policy import base_model
    from trainer.prefix import completion_logprobs
    from trainer.taskconfig import grpo_config

    torch.set_num_threads(args.threads)
    params = {**PARAMS, **ENV_PARAMS.get(args.env, {}), "group_size": args.group, "prompts_per_step": args.prompts}
    g = grpo_config(params)
    model, tokenizer = base_model(args.model, 0)
    env = get_env(args.env, env_options(params))
    torch.manual_seed(0)
    batch, sampled = rollouts_batch(model.eval(), tokenizer, env, args.prompts, args.group, g)
    rows = batch.input_ids.shape[0]
    starts = (batch.mask != 0).float().argmax(1)
    lengths = (batch.mask != 0).sum(1)
    prompts = {(int(s), bytes(batch.input_ids[i, :int(s)].numpy().tobytes())) for i, s in enumerate(starts)}
    tokens = {"per_row": int((starts + 1 + lengths).sum()),
              "prompt_once": int(sum(s for s, _ in prompts) + (1 + lengths).sum())}

    def plain(m, ids, mask):
        return grpo.token_logprobs(m, ids) * mask

    ways = {"per_row": plain, "prompt_once": completion_logprobs}
    start_state = copy.deepcopy(model.state_dict())
    times: dict[str, list[float]] = {w: [] for w in ways}
    after: dict[str, dict] = {}
    for _ in range(args.rounds):
        for way, fn in ways.items():
            model.load_state_dict(start_state)
            optimizer = grpo.make_optimizer(model, g)
            grpo.completion_logprobs = fn  # the one call site grpo_step scores rows through
            t0 = time.perf_counter()
            grpo.grpo_step(model, optimizer, batch, g, on_policy=True)
            times[way].append(time.perf_counter() - t0)
            after[way] = {k: v.clone() for k, v in model.state_dict().items()}
    grpo.completion_logprobs = completion_logprobs
    model.load_state_dict(start_state)
    model.eval()
    with torch.no_grad():
        logp_gap = float((plain(model, batch.input_ids, batch.mask)
                          - completion_logprobs(model, batch.input_ids, batch.mask)).abs().max())
    update = max(float((after["per_row"][k] - start_state[k]).abs().max()) for k in start_state)
    weights_gap = max(float((after["per_row"][k] - after["prompt_once"][k]).abs().max()) for k in start_state)
    best = {w: min(t) for w, t in times.items()}
    out = {"bench": "grpo_step", "model": args.model, "env": args.env, "params": params, "threads": args.threads,
           "completions_sampled": sampled, "rows_trained": rows, "minibatches": g.minibatches,
           "prompt_tokens_mean": round(float((starts + 1).float().mean()), 1),
           "completion_tokens_mean": round(float(lengths.float().mean()), 1), "tokens_run": tokens,
           "step_s": {w: [round(x, 3) for x in t] for w, t in times.items()},
           "speedup": round(best["per_row"] / best["prompt_once"], 2),
           "max_logprob_gap": logp_gap, "max_weight_gap": weights_gap, "max_weight_update": update}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
