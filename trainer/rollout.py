"""Rollouts: prompts from an environment, completions from a backend, rewards from the checker.

Shared by the single-process baseline, the warm-up evaluation and (later) the swarm worker job,
so every path turns token ids into text and rewards the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from gossip.assignment import sample_seed
from trainer.envs import Environment, Prompt
from trainer.inference import Backend, Completion


@dataclass
class Rollout:
    prompt: Prompt
    completion: Completion
    text: str  # decoded completion without the final eos; special tokens kept, so they never match
    reward: float


def completion_text(tokenizer, completion: Completion) -> str:
    """The completion as text, eos removed. Other special tokens stay visible (never skipped),
    so a completion padded with specials cannot decode to a correct answer."""
    ids = completion.token_ids[:-1] if completion.finished else completion.token_ids
    return tokenizer.decode(ids, skip_special_tokens=False)


def score(env: Environment, prompt: Prompt, text: str, finished: bool,
          format_weight: float = 0.0) -> float:
    """Task reward plus `format_weight` times the environment's format reward."""
    r = env.reward(prompt, text, finished)
    if format_weight:
        r += format_weight * env.format_reward(prompt, text, finished)
    return r


def generate_rollouts(env: Environment, tokenizer, backend: Backend, indices: list[int], *,
                      samples: int, max_new_tokens: int, temperature: float = 1.0,
                      split: str = "train", task_id: str = "local", worker_key: bytes = b"local",
                      policy_version: int = 0, format_weight: float = 0.0) -> list[Rollout]:
    """`samples` scored completions for each prompt index, prompt-major. Sampling seeds are
    sample_seed(task_id, worker_key, policy_version, prompt index, sample index)."""
    prompts = [env.prompt(i, split) for i in indices]
    seeds = [sample_seed(task_id, worker_key, policy_version, i, s)
             for i in indices for s in range(samples)]
    completions = backend.generate([env.prompt_ids(tokenizer, p) for p in prompts], samples,
                                   max_new_tokens, temperature, seeds)
    out = []
    for k, c in enumerate(completions):
        p = prompts[k // samples]
        text = completion_text(tokenizer, c)
        out.append(Rollout(p, c, text, score(env, p, text, c.finished, format_weight)))
    return out


def accuracy(env: Environment, tokenizer, backend: Backend, n: int = 256, split: str = "heldout",
             temperature: float = 0.0, max_new_tokens: int = 10, seed_tag: str = "eval") -> float:
    """Mean task reward over held-out prompts 0..n-1: greedy when temperature is 0, else one
    seeded sample per prompt."""
    rewards = heldout_rewards(env, tokenizer, backend, n, split, temperature, max_new_tokens, seed_tag)
    return sum(rewards) / n


def heldout_rewards(env: Environment, tokenizer, backend: Backend, n: int = 256, split: str = "heldout",
                    temperature: float = 0.0, max_new_tokens: int = 10, seed_tag: str = "eval") -> list[float]:
    """Each of prompts 0..n-1's task reward, so a caller can count full marks as well as the mean
    (reasoning-gym gives partial credit: 0.5 for a wrong number that contains the right one)."""
    rollouts = generate_rollouts(env, tokenizer, backend, list(range(n)), samples=1,
                                 max_new_tokens=max_new_tokens, temperature=temperature,
                                 split=split, task_id=seed_tag)
    return [env.reward(r.prompt, r.text, r.completion.finished) for r in rollouts]
