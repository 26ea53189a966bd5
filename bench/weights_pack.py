"""Benchmark: how small a policy-version delta is, and how fast packing runs. Prints JSON.

Two models:
  - "builtin": the project's built-in Llama (trainer/model.py), briefly warmed up on digit sorting,
    then one real GRPO batch (trainer/grpo.py: real rollouts, AdamW lr 3e-5, two minibatches);
    the versions compared are the weights before and after that batch, as a trainer would publish.
    Falls back to an Adam-like synthetic step if those modules are missing.
  - "synthetic_50mb": ~25M parameters (50 MB in bf16) with transformer-like shapes and init, one
    Adam-like step: every parameter moves by lr 3e-5 times a sign-ish factor tanh(2 z), z ~ N(0,1)
    (an early Adam step is close to lr * sign(grad) for every weight).
Master weights stay fp32; versions are carried in bf16, so the delta is between the bf16 casts.

Ratios are compressed bytes / raw bf16 tensor bytes; "delta_ratio" is the default encoding (zigzag
difference, byte shuffle, zstd 3), the other delta_* ratios change one of those choices. Throughput is raw bf16 MB per second of wall
time on one thread; packing compresses both the full and the delta encodings to choose, and
includes casting and hashing. Run: `python bench/weights_pack.py [--skip-builtin] [--warmup-steps N]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer.weights import pack_version, unpack_version  # noqa: E402

MB = 1e6


def adam_like_step(sd: dict[str, torch.Tensor], lr: float, seed: int) -> dict[str, torch.Tensor]:
    """Every float parameter moves by lr * tanh(2 z): mostly about +-lr, like early Adam steps."""
    g = torch.Generator().manual_seed(seed)
    return {
        k: v - lr * torch.tanh(2 * torch.randn(v.shape, generator=g)) if v.is_floating_point() else v
        for k, v in sd.items()
    }


def synthetic_model(n_layers: int = 1, d: int = 1024, vocab: int = 8192, seed: int = 0):
    """fp32 state dict shaped like a small transformer (~25M params): N(0, 0.02) matrices, unit norms."""
    g = torch.Generator().manual_seed(seed)
    sd = {"embed.weight": torch.randn(vocab, d, generator=g) * 0.02}
    for i in range(n_layers):
        for name, shape in [("q", (d, d)), ("k", (d, d)), ("v", (d, d)), ("o", (d, d)),
                            ("up", (4 * d, d)), ("gate", (4 * d, d)), ("down", (d, 4 * d))]:
            sd[f"layers.{i}.{name}.weight"] = torch.randn(shape, generator=g) * 0.02
        sd[f"layers.{i}.norm1.weight"] = torch.ones(d)
        sd[f"layers.{i}.norm2.weight"] = torch.ones(d)
    sd["norm.weight"] = torch.ones(d)
    return sd


def measure(v0: dict[str, torch.Tensor], v1: dict[str, torch.Tensor], repeats: int = 1) -> dict:
    """Pack v0 full, then v1 against v0 (with and without byte shuffle); time pack and unpack."""
    raw = sum(t.numel() * 2 for t in v0.values() if t.is_floating_point())
    raw += sum(t.numel() * t.element_size() for t in v0.values() if not t.is_floating_point())
    p0 = pack_version(v0, None)
    r0 = unpack_version(p0.manifest_fields(), list(p0.shards))
    pack_s, unpack_s = math.inf, math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        p1 = pack_version(v1, r0, parent_root=p0.root)
        t1 = time.perf_counter()
        r1 = unpack_version(p1.manifest_fields(), list(p1.shards), r0 if p1.encoding == "delta" else None)
        t2 = time.perf_counter()
        pack_s, unpack_s = min(pack_s, t1 - t0), min(unpack_s, t2 - t1)
    full_only = pack_version(v1, None)
    no_shuffle = pack_version(v1, r0, parent_root=p0.root, shuffle=False)
    xor = pack_version(v1, r0, parent_root=p0.root, delta_op="xor")
    changed = sum(int((r1[k] != r0[k]).sum()) for k in r1 if r1[k].is_floating_point())
    n_float = sum(t.numel() for t in r1.values() if t.is_floating_point())
    return {
        "params": sum(t.numel() for t in v0.values()),
        "raw_bf16_mb": round(raw / MB, 3),
        "chosen_encoding": p1.encoding,
        "delta_ratio": round(p1.compressed_size / raw, 4),
        "delta_ratio_no_shuffle": round(no_shuffle.compressed_size / raw, 4),
        "delta_ratio_xor": round(xor.compressed_size / raw, 4),
        "full_ratio": round(full_only.compressed_size / raw, 4),
        "full_ratio_no_shuffle": round(pack_version(v1, None, shuffle=False).compressed_size / raw, 4),
        "bf16_values_changed_frac": round(changed / n_float, 4),
        "shards": len(p1.shards),
        "pack_mb_s": round(raw / MB / pack_s, 1),
        "unpack_mb_s": round(raw / MB / unpack_s, 1),
    }


def builtin_versions(warmup_steps: int) -> tuple[dict, list[dict], dict]:
    """Weights before and after real GRPO batches on the built-in model (or an Adam-like step)."""
    try:
        from trainer.envs import get_env
        from trainer.grpo import GRPOConfig, group_advantages, grpo_step, make_batch, make_optimizer
        from trainer.inference import TorchBackend
        from trainer.model import create_builtin_model
        from trainer.rollout import generate_rollouts
        from trainer.warmup import WarmupConfig, warmup
    except ImportError as exc:
        sd = synthetic_model(n_layers=4, d=256, vocab=64)  # the built-in model's shapes, roughly
        return sd, [adam_like_step(sd, 3e-5, 1)], {"update": f"adam-like (no GRPO: {exc})"}
    model, tok = create_builtin_model(0)
    env = get_env("digit-sort")
    warmup(model, tok, env, WarmupConfig(steps=warmup_steps))
    cfg = GRPOConfig(prompts_per_step=8, group_size=8)
    opt = make_optimizer(model, cfg)
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=False)
    snapshot = lambda: {k: v.detach().clone() for k, v in model.state_dict().items()}  # noqa: E731
    v0, after, rewards = snapshot(), [], []
    for step in range(2):
        rollouts = generate_rollouts(env, tok, backend, list(range(step * 8, step * 8 + 8)),
                                     samples=8, max_new_tokens=cfg.max_new_tokens,
                                     policy_version=step)
        r = torch.tensor([x.reward for x in rollouts])
        adv = group_advantages(r, 8, cfg.std_normalize)
        batch = make_batch([x.completion.prompt_ids for x in rollouts],
                           [x.completion.token_ids for x in rollouts],
                           [x.completion.logprobs for x in rollouts], adv, tok.pad_token_id)
        grpo_step(model, opt, batch, cfg)
        rewards.append(round(float(r.mean()), 3))
        after.append(snapshot())
    info = {"update": "real GRPO batches (AdamW lr 3e-5, 2 minibatches, 8x8 rollouts)",
            "warmup_steps": warmup_steps, "batch_mean_reward": rewards}
    return v0, after, info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--skip-builtin", action="store_true")
    ap.add_argument("--warmup-steps", type=int, default=65, help="supervised steps before GRPO "
                    "(65 = trainer.warmup's default; fewer leaves all-zero rewards, so no update)")
    ap.add_argument("--layers", type=int, default=1, help="synthetic model layers (1 = ~25M params)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out: dict = {"torch_threads": torch.get_num_threads()}
    if not args.skip_builtin:
        v0, after, info = builtin_versions(args.warmup_steps)
        out["builtin"] = {**info, "first_batch": measure(v0, after[0], repeats=3)}
        if len(after) > 1:
            out["builtin"]["second_batch"] = measure(after[0], after[1], repeats=3)
    v0 = synthetic_model(args.layers)
    out["synthetic_50mb"] = {"update": "adam-like lr 3e-5 * tanh(2 z)",
                             **measure(v0, adam_like_step(v0, 3e-5, seed=1))}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
