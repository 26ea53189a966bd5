"""Supervised warm-up: teacher forcing on correct answers so RL starts from a weak, not zero, policy.

GRPO learns nothing from a group whose samples are all wrong (every advantage is zero), so a random
model never gets a signal on digit sorting. A short seeded supervised phase brings greedy held-out
accuracy to roughly 0.25-0.40: good enough that most groups mix right and wrong answers, weak
enough that RL has something to do.

A fixed number of steps does not land there: the same 65 steps gave 0.23 to 0.43 held-out across
model seeds (the seed comes from the task id, so every task is different). So the phase stops once
greedy accuracy on probe prompts (training split, prompts the warm-up does not draw) reaches
`target`, checked every `check_every` steps; `steps` caps it and sets the learning-rate decay.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch

from trainer.envs import Environment


@dataclass
class WarmupConfig:
    steps: int = 120  # at most this many optimizer steps; the lr decays to 0 over them
    batch_size: int = 64  # training prompts per step
    lr: float = 1e-3  # AdamW learning rate, linear decay to 0 over `steps`
    seed: int = 0  # picks the training prompts (with torch's RNG untouched)
    # stop once greedy probe accuracy reaches this (0 = run every step). Held-out greedy accuracy over
    # model seeds 0-7 and a bench run's seed, checking every step: 0.30-0.35 on 512 prompts (0.27-0.32
    # on 256) at 0.31; 0.275-0.322 at 0.30 (256 prompts: 0.246 for seed 0). Checking every 3rd step
    # at 0.30 gave 0.27-0.40: the bench's seed reached 0.4004, past the 0.25-0.40 base range the
    # learning benchmark asks for (the probe is noisy: it had dipped below 0.30 at the check after it
    # first crossed it, and training went on 10 more steps)
    target: float = 0.31
    probe_prompts: int = 512  # training-split prompts 0..n-1: index draws below never hit them in practice
    first_check: int = 45  # 8 model seeds crossed 0.30 between steps 55 and 70 (0.34: 60 to 78)
    check_every: int = 1  # a check costs about 0.5-1 s; 5 steps moved accuracy by up to 0.08


def probe_accuracy(model, tokenizer, env: Environment, n: int) -> float:
    from trainer.inference import TorchBackend
    from trainer.rollout import accuracy

    backend = TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=False)
    with torch.no_grad():
        return accuracy(env, tokenizer, backend, n, split="train", temperature=0.0, seed_tag="warmup-probe")


def supervised_batch(env: Environment, tokenizer, indices: list[int]):
    """(input_ids [B, L], loss mask [B, L-1]) for prompt + answer + eos, right-padded.
    Only answer and eos tokens are scored: the model must not learn to predict random digits."""
    seqs, starts = [], []
    for i in indices:
        p = env.prompt(i, "train")
        prompt_ids = env.prompt_ids(tokenizer, p)
        answer_ids = tokenizer(p.answer, add_special_tokens=False)["input_ids"]
        seqs.append(prompt_ids + answer_ids + [tokenizer.eos_token_id])
        starts.append(len(prompt_ids))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width - 1))
    for k, (s, start) in enumerate(zip(seqs, starts)):
        ids[k, :len(s)] = torch.tensor(s)
        mask[k, start - 1:len(s) - 1] = 1
    return ids, mask


def warmup(model, tokenizer, env: Environment, cfg: WarmupConfig = WarmupConfig(),
           progress: Callable[[int, int, float], None] | None = None) -> list[float]:
    """Train `model` in place until the probe reaches `cfg.target` or `cfg.steps` run out; calls
    progress(step, cap, loss) after each step. Returns the losses, one per step taken."""
    device = next(model.parameters()).device
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / cfg.steps)
    losses = []
    model.train()
    for step in range(cfg.steps):
        indices = [rng.randrange(1 << 30) for _ in range(cfg.batch_size)]
        ids, mask = supervised_batch(env, tokenizer, indices)
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, cfg.steps, losses[-1])
        done = step + 1
        if cfg.target > 0 and done >= cfg.first_check and (done - cfg.first_check) % cfg.check_every == 0:
            model.eval()
            if probe_accuracy(model, tokenizer, env, cfg.probe_prompts) >= cfg.target:
                break
            model.train()
    model.eval()
    return losses
