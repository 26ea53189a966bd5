"""Decoded rollout batches -> one GRPO `Batch`, keeping only completions that carry a signal.

Advantages are group-relative within each prompt's group (every batch carries its own group size).
A completion whose advantage is exactly zero (its whole group scored the same) adds nothing to the
policy gradient, so it is dropped before the forward/backward pass: early in training most groups
are all-wrong, and skipping them roughly halves the trainer's compute per step. The token-level
loss is then averaged over the tokens of informative completions only (DAPO's dynamic sampling,
without resampling).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.batch_codec import RolloutBatch
from trainer.grpo import Batch, group_advantages, make_batch


@dataclass
class BuiltBatch:
    batch: Batch | None  # None when no completion has a nonzero advantage
    completions: int  # completions in the rollout batches
    used: int  # completions kept (nonzero advantage)
    mean_reward: float


def build_batch(batches: list[RolloutBatch], std_normalize: bool, pad_id: int) -> BuiltBatch:
    prompts, completions, logprobs, advantages, rewards = [], [], [], [], []
    for b in batches:
        r = torch.tensor([s.reward for s in b.samples], dtype=torch.float32)
        rewards.append(r)
        adv = group_advantages(r, b.samples_per_prompt, std_normalize)
        for s, a in zip(b.samples, adv.tolist()):
            if a != 0.0:
                prompts.append(list(s.prompt_ids))
                completions.append(list(s.token_ids))
                logprobs.append(torch.from_numpy(s.logprobs))
                advantages.append(a)
    all_rewards = torch.cat(rewards) if rewards else torch.zeros(0)
    total = int(all_rewards.numel())
    mean = float(all_rewards.mean()) if total else 0.0
    if not advantages:
        return BuiltBatch(None, total, 0, mean)
    batch = make_batch(prompts, completions, logprobs, torch.tensor(advantages), pad_id)
    return BuiltBatch(batch, total, len(advantages), mean)
