"""Held-out accuracy of a policy version, for offline learning curves (bench/, operators).

    python -m trainer.evaluate --task my-task.toml [--weights PEER_DIR/blobs/<digest>] [--prompts 256]

    evaluate_weights(blob_path_or_state_dict, "builtin:digit-sort-tiny", "digit-sort")
    -> {"greedy": 0.41, "greedy_exact": 0.39, "sampled": 0.27}

Greedy is one argmax completion per held-out prompt; sampled is one seeded temperature-1 sample per
prompt (seeds fixed by `seed_tag`, so two versions are compared on the same noise). Both are the mean
of the same reward checker as training, on the held-out split that training never sees; greedy_exact
is the fraction of greedy replies with full marks (a task's partial credit left out). `params`: the
task's params, whose `env.*` options configure the environment (a reasoning-gym task's difficulty).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from swarm.taskparams import env_options
from trainer.envs import Environment, get_env
from trainer.inference import TorchBackend
from trainer.policy import base_model, load_weights
from trainer.rollout import accuracy, heldout_rewards


def evaluate_weights(weights: str | os.PathLike | bytes | dict, model: str = "builtin:digit-sort-tiny",
                     env: str | Environment = "digit-sort", n_heldout: int = 256,
                     max_new_tokens: int = 10, seed_tag: str = "eval", params: dict | None = None,
                     sampled: bool = True, device: str = "cpu") -> dict[str, float]:
    """`weights`: a weights blob file (as stored by the init/train jobs), its bytes, or a state dict.
    `sampled=False` skips the sampled score (None): half the cost, for models whose replies are long.
    `device`: where the model runs ("cuda" on a GPU); the sampling noise is drawn on the CPU either way,
    so a version scores the same wherever it is scored, up to the device's arithmetic."""
    net, tokenizer = base_model(model, 0)
    if isinstance(weights, dict):
        net.load_state_dict(weights, strict=False)
        missing = set(net.state_dict()) - set(weights) - set(getattr(net, "_tied_weights_keys", None) or {})
        if missing:
            raise ValueError(f"state dict is missing {sorted(missing)[:3]}")
    else:
        data = weights if isinstance(weights, (bytes, bytearray)) else Path(weights).read_bytes()
        load_weights(net, bytes(data))
    env = get_env(env, env_options(params or {})) if isinstance(env, str) else env
    backend = TorchBackend(net.to(device).eval(), tokenizer.eos_token_id, tokenizer.pad_token_id,
                           capture_hidden=False)
    with torch.no_grad():
        greedy = heldout_rewards(env, tokenizer, backend, n_heldout, temperature=0.0, max_new_tokens=max_new_tokens)
        return {"greedy": sum(greedy) / n_heldout, "greedy_exact": sum(r >= 1.0 for r in greedy) / n_heldout,
                "sampled": accuracy(env, tokenizer, backend, n_heldout, temperature=1.0,
                                    max_new_tokens=max_new_tokens, seed_tag=seed_tag) if sampled else None}


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    from trainer.single import task_table

    ap = argparse.ArgumentParser(description="Held-out accuracy of a task's base model or one of its versions.")
    ap.add_argument("--task", required=True, help="the task file (its model, env and params)")
    ap.add_argument("--weights", help="a version's weights blob (default: the base model as it loads)")
    ap.add_argument("--prompts", type=int, default=256, help="held-out prompts (default 256)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--greedy-only", action="store_true", help="skip the sampled score")
    ap.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when there is one)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    task = task_table(args.task)
    if args.weights:
        weights = Path(args.weights)
    else:
        from trainer.policy import weights_bytes

        weights = weights_bytes(base_model(task["model"], 0)[0])
    max_new = int(task["params"].get("max_new_tokens", 10))
    print(json.dumps(evaluate_weights(weights, task["model"], task["env"], args.prompts, max_new,
                                      params=task["params"], sampled=not args.greedy_only,
                                      device=pick_device(args.device))))


def pick_device(name: str) -> str:
    """`auto`: the GPU when torch sees one, else the CPU."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: torch sees no GPU here (torch {torch.__version__}); use --device cpu")
    return name


if __name__ == "__main__":
    main()
