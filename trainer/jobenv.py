"""What every job shares: `JobError`, and the task's environment with its failures made JobErrors.

An environment is third-party code run inside the job process: whatever it raises must become a
message for the operator naming the environment, never a crashed job process. The environment of a
task comes from `task_env(task)`, which first checks what the task pins (trainer/pins.py): a peer
that cannot reproduce the task refuses it (`TaskRefused`) before any work.
"""

from __future__ import annotations

from trainer.rollout import completion_text, score
from trainer.taskconfig import grpo_config


class JobError(RuntimeError):
    """A job failed for a reason the operator can act on; the message is shown to them as is."""


class TaskRefused(JobError):
    """This peer cannot work on the task as signed (an environment, generator version or model it
    lacks or holds in another version); the message says what to install or fetch."""


def task_env(task):
    """The environment of `task` (a swarm.jobs.TaskSpec), after trainer/pins.py checked that this
    peer holds what the task pins; TaskRefused otherwise."""
    from trainer.pins import check_task

    return check_task(task)


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
    env, cfg = task_env(task), grpo_config(task.params)
    prompt = env_call(task.env, f"building prompt {prompt_index}", lambda: env.prompt(prompt_index, "train"))
    text = completion_text(tokenizer, _Ids(list(token_ids), finished))
    return float(env_call(task.env, f"scoring prompt {prompt_index}", lambda: score(
        env, prompt, text, finished, cfg.format_weight)))


class _Ids:
    """What completion_text reads of a completion."""

    def __init__(self, token_ids: list[int], finished: bool) -> None:
        self.token_ids, self.finished = token_ids, finished
