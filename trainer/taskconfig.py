"""A task's `params` table -> the trainer's settings, strictly typed.

The task file speaks the operator's words (group_size, clip_low, ...); GRPOConfig speaks the
algorithm's (samples_per_prompt, eps_low, ...). A value of the wrong type is an error naming the key,
never a silent fallback: a trainer that quietly used another learning rate than the signed task says
would publish versions nobody asked for. Keys this module does not know are left to other layers.
"""

from __future__ import annotations

from dataclasses import replace

from trainer.grpo import GRPOConfig
from trainer.warmup import WarmupConfig

# task.params key -> (GRPOConfig field, type)
GRPO_KEYS = {
    "group_size": ("samples_per_prompt", int),
    "prompts_per_step": ("prompts_per_step", int),
    "lr": ("lr", float),
    "lr_warmup": ("lr_warmup_steps", int),
    "lr_decay_start": ("lr_decay_start", int),
    "lr_decay_steps": ("lr_decay_steps", int),
    "lr_min": ("lr_min", float),
    "clip_low": ("eps_low", float),
    "clip_high": ("eps_high", float),
    "delta": ("delta", float),
    "minibatches": ("minibatches", int),
    "temperature": ("temperature", float),
    "max_new_tokens": ("max_new_tokens", int),
    "weight_decay": ("weight_decay", float),
    "max_grad_norm": ("max_grad_norm", float),
    "std_normalize": ("std_normalize", bool),
    "format_weight": ("format_weight", float),
    "decoupled": ("decoupled", bool),
    "beta1": ("betas", float),
    "beta2": ("betas", float),
}


class ParamError(ValueError):
    """A task parameter has the wrong type or range."""


def _value(params, key: str, typ: type):
    raw = params[key]
    if typ is bool:
        if not isinstance(raw, bool):
            raise ParamError(f"task param {key} must be true or false, got {raw!r}")
        return raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (typ is int and not isinstance(raw, int)):
        raise ParamError(f"task param {key} must be {'an integer' if typ is int else 'a number'}, got {raw!r}")
    if raw < 0 or (raw == 0 and key not in ("weight_decay", "temperature", "format_weight", "lr_warmup",
                                             "lr_decay_start", "lr_decay_steps", "lr_min")):
        raise ParamError(f"task param {key} must be positive, got {raw!r}")
    return typ(raw)


def grpo_config(params) -> GRPOConfig:
    cfg = GRPOConfig()
    values = {}
    for key, (name, typ) in GRPO_KEYS.items():
        if key in params and name != "betas":
            values[name] = _value(params, key, typ)
    b1 = _value(params, "beta1", float) if "beta1" in params else cfg.betas[0]
    b2 = _value(params, "beta2", float) if "beta2" in params else cfg.betas[1]
    if not (b1 < 1 and b2 < 1):
        raise ParamError(f"task params beta1/beta2 must be below 1, got {b1}, {b2}")
    out = replace(cfg, betas=(b1, b2), **values)
    if out.lr_decay_steps and out.lr_min > out.lr:
        raise ParamError(f"task param lr_min ({out.lr_min}) must not be above lr ({out.lr}): the decay only lowers it")
    return out


def warmup_config(params, seed: int) -> WarmupConfig:
    cfg = WarmupConfig(seed=seed)
    if "warmup_steps" in params:
        raw = params["warmup_steps"]
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ParamError(f"task param warmup_steps must be an integer >= 0, got {raw!r}")
        cfg = replace(cfg, steps=raw)
    return cfg


def int_param(params, key: str, default: int, lo: int = 0) -> int:
    raw = params.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < lo:
        raise ParamError(f"task param {key} must be an integer >= {lo}, got {raw!r}")
    return raw
