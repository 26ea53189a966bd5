"""A task's `params` table -> the trainer's settings.

Which keys exist, their types and ranges are declared once, in swarm/taskparams.py (`TaskParams`):
a bad value is an error naming the key, never a silent fallback, because a trainer that quietly used
another learning rate than the signed task says would publish versions nobody asked for. This module
only maps the task's words onto the algorithm's (group_size -> samples_per_prompt, clip_low -> eps_low)
and checks what needs two keys at once; a key left out keeps GRPOConfig's default.
"""

from __future__ import annotations

from dataclasses import replace

from swarm.taskparams import ParamError, TaskParams
from trainer.grpo import GRPOConfig
from trainer.warmup import WarmupConfig

__all__ = ["ParamError", "grpo_config", "int_param", "warmup_config"]

# TaskParams field -> GRPOConfig field, for the trainer settings a task may leave to the trainer
GRPO_KEYS = {
    "lr": "lr",
    "lr_warmup": "lr_warmup_steps",
    "lr_decay_start": "lr_decay_start",
    "lr_decay_steps": "lr_decay_steps",
    "lr_min": "lr_min",
    "clip_low": "eps_low",
    "clip_high": "eps_high",
    "delta": "delta",
    "minibatches": "minibatches",
    "temperature": "temperature",
    "max_new_tokens": "max_new_tokens",
    "weight_decay": "weight_decay",
    "max_grad_norm": "max_grad_norm",
    "std_normalize": "std_normalize",
    "format_weight": "format_weight",
    "decoupled": "decoupled",
}


def grpo_config(params) -> GRPOConfig:
    task = TaskParams.from_params(params)
    cfg = GRPOConfig()
    values = {name: getattr(task, key) for key, name in GRPO_KEYS.items() if getattr(task, key) is not None}
    b1 = cfg.betas[0] if task.beta1 is None else task.beta1
    b2 = cfg.betas[1] if task.beta2 is None else task.beta2
    out = replace(cfg, samples_per_prompt=task.group_size, prompts_per_step=task.prompts_per_step,
                  betas=(b1, b2), **values)
    if out.lr_decay_steps and out.lr_min > out.lr:
        raise ParamError(f"task param lr_min ({out.lr_min}) must not be above lr ({out.lr}): the decay only lowers it")
    return out


def warmup_config(params, seed: int) -> WarmupConfig:
    steps = TaskParams.from_params(params).warmup_steps
    cfg = WarmupConfig(seed=seed)
    return cfg if steps is None else replace(cfg, steps=steps)


def int_param(params, key: str, default: int, lo: int = 0) -> int:
    """An integer TaskParams field, or `default` when the task leaves it out; at least `lo`."""
    raw = getattr(TaskParams.from_params(params), key)
    value = default if raw is None else raw
    if value < lo:
        raise ParamError(f"task param {key} must be an integer >= {lo}, got {value!r}")
    return value
