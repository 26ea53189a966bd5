"""A task's `params` table -> the trainer's settings.

Which keys exist, their types and ranges are declared once, in swarm/taskparams.py (`TaskParams`):
a bad value is an error naming the key, never a silent fallback, because a trainer that quietly used
another learning rate than the signed task says would publish versions nobody asked for. A setting
has the same name in both (`GRPOConfig.clip_low` is the task's `clip_low`); this module copies the
ones the task sets and checks what needs two keys at once; a key left out keeps GRPOConfig's default.
"""

from __future__ import annotations

from dataclasses import replace

from swarm.taskparams import ParamError, TaskParams
from trainer.grpo import GRPOConfig
from trainer.warmup import WarmupConfig

__all__ = ["ParamError", "grpo_config", "int_param", "warmup_config"]

# The trainer settings a task may leave to the trainer: a TaskParams field and a GRPOConfig field
# of the same name (one name per setting, in the task file and in the algorithm).
GRPO_KEYS = ("lr", "lr_warmup", "lr_decay_start", "lr_decay_steps", "lr_min", "clip_low", "clip_high", "delta",
             "minibatches", "temperature", "max_new_tokens", "weight_decay", "max_grad_norm", "std_normalize",
             "format_weight")


def grpo_config(params) -> GRPOConfig:
    task = TaskParams.from_params(params)
    cfg = GRPOConfig()
    values = {key: getattr(task, key) for key in GRPO_KEYS if getattr(task, key) is not None}
    b1 = cfg.betas[0] if task.beta1 is None else task.beta1
    b2 = cfg.betas[1] if task.beta2 is None else task.beta2
    out = replace(cfg, group_size=task.group_size, prompts_per_step=task.prompts_per_step,
                  betas=(b1, b2), decoupled=task.decoupled_objective, **values)
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
