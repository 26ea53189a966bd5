"""What every job shares: `JobError`, and the task's environment with its failures made JobErrors.

An environment is third-party code run inside the job process: whatever it raises must become a
message for the operator naming the environment, never a crashed job process.
"""

from __future__ import annotations

from trainer.envs import get_env
from trainer.rollout import completion_text, score
from trainer.taskconfig import grpo_config


class JobError(RuntimeError):
    """A job failed for a reason the operator can act on; the message is shown to them as is."""


def task_env(name: str):
    """The environment `name`; a JobError if there is none of that name."""
    try:
        return get_env(name)
    except ValueError as exc:
        raise JobError(str(exc)) from None


def env_call(env_name: str, what: str, fn):
    """Run environment code; whatever it raises becomes a JobError naming the environment."""
    try:
        return fn()
    except JobError:
        raise
    except Exception as exc:  # an environment is third-party code: any exception is its failure
        raise JobError(f"environment {env_name!r} raised {type(exc).__name__} while {what}: {exc}") from None


def prompts_of(env, tokenizer, indices):
    """(prompts, their token ids) of training prompts `indices`."""
    prompts = [env.prompt(i, "train") for i in indices]
    return prompts, [env.prompt_ids(tokenizer, p) for p in prompts]


def score_ids(task, tokenizer, prompt_index: int, token_ids, finished: bool) -> float:
    """The environment's reward for a completion given as token ids (what validators recompute)."""
    env, cfg = task_env(task.env), grpo_config(task.params)
    prompt = env_call(task.env, f"building prompt {prompt_index}", lambda: env.prompt(prompt_index, "train"))
    text = completion_text(tokenizer, _Ids(list(token_ids), finished))
    return float(env_call(task.env, f"scoring prompt {prompt_index}", lambda: score(
        env, prompt, text, finished, cfg.format_weight)))


class _Ids:
    """What completion_text reads of a completion."""

    def __init__(self, token_ids: list[int], finished: bool) -> None:
        self.token_ids, self.finished = token_ids, finished
