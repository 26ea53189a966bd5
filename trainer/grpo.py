"""GRPO, as pure tensor functions plus one `grpo_step`.

The variant, exactly:
  - Group-relative advantages (GRPO): A_i = r_i - mean(r_group), divided by std(r_group) + 1e-6
    when `std_normalize` (the original GRPO; Dr. GRPO drops the division). One advantage per
    completion, shared by all of its tokens.
  - Importance ratio r_t = exp(logp_trainer_t - logp_behaviour_t), where logp_behaviour is the raw
    log-probability carried by the rollout (the policy version that sampled it), so off-policy
    rollouts (async lag) are corrected per token.
  - Two-sided clipping as in INTELLECT-2: per-token objective
        min( min(r_t, delta) * A,  clip(r_t, 1 - clip_low, 1 + clip_high) * A )
    i.e. PPO clipping with DAPO's asymmetric "clip-higher" range, plus an upper bound delta on the
    ratio so a token with negative advantage and a huge ratio cannot blow up the update.
  - Optionally decoupled for stale rollouts (`decoupled`; the "decoupled PPO objective" of
    Hilton et al. 2021, as AReaL uses it for asynchronous RL): when a batch was sampled by an
    older policy, the trust region is centred on the trainer's own weights at the start of the
    step (the proximal policy, one extra no-grad forward pass), and the staleness is corrected by
    a detached per-token weight w_t = min(exp(logp_prox_t - logp_behaviour_t), delta):
        w_t * min( min(q_t, delta) * A,  clip(q_t, 1 - clip_low, 1 + clip_high) * A ),  q_t = exp(logp_t - logp_prox_t)
    Its gradient at q = 1 is the plain off-policy one (w_t * q_t = pi / pi_behaviour), but the
    clip range bounds how far this step moves the policy from where it is, not from where it was
    one or two versions ago: centred on the behaviour policy, a token whose probability fell since
    it was sampled could be pushed up by (1 + clip_high) / (1 - clip_low) ~ 1.6x in one step, a
    wider step than an on-policy trainer ever takes. On-policy batches (`on_policy=True`: the
    single process) skip the extra pass: there the proximal policy is the behaviour policy, w = 1,
    and the objective is the one above. Off by default: at async level 2 it learned no better per
    version on the built-in task and its extra pass makes every step slower (docs/benchmarks.md);
    it is there for longer lags, where a trust region centred on a policy many versions old clips
    most tokens away.
  - Token-level normalisation (DAPO / INTELLECT-2): the loss is the sum over all completion tokens
    of the minibatch divided by their count, so long completions are not down-weighted.
  - Optional KL penalty to a reference policy with the k3 estimator exp(q - p) - (q - p) - 1
    (q = reference logprob, p = trainer logprob); off by default.
  - Each batch is split into `minibatches` optimizer steps (PPO-style), gradient norm clipped.
  - Repeated completions are computed once (`collapse_repeats`): rows of a minibatch with the same
    tokens, behaviour logprobs and advantage have the same per-token loss, so one copy weighted by
    its count gives the same loss and gradient (up to float summation order) for a fraction of
    the forward/backward. A learning policy repeats itself a lot (every right answer to a
    digit-sort prompt is the same string): 100-120 distinct of 176-224 informative rows at the
    base policy, far fewer later.
  - Each group's prompt is run once (`trainer/prefix.py`): its keys and values, with gradients, serve
    every completion of the group, instead of every row recomputing the prompt (with a chat template,
    most of each row).
  - AdamW. Learning rate (`lr_at`, a function of the step number alone, so a resumed trainer keeps
    the schedule, and a single process and a swarm get the same rate at equal completions): an
    optional linear warm-up over the first `lr_warmup` batches, then constant, then optionally
    a cosine decay to `lr_min` over `lr_decay_steps` batches from `lr_decay_start`, constant after.
    The decay is there for asynchronous training: a trainer fed rollouts 1-2 versions old corrects a
    bad update 1-2 versions late, and at a sharp policy that delay turned single bad updates into
    dips of 0.1-0.2 greedy accuracy (the swarm's curve dipped more often than the single process's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from trainer.prefix import completion_logprobs


@dataclass
class GRPOConfig:
    prompts_per_step: int = 16  # prompts in one batch
    group_size: int = 16  # completions per prompt (the group)
    lr: float = 3e-5  # AdamW learning rate (3e-4 collapsed the policy in one step)
    lr_warmup: int = 0  # lr ramps linearly up to `lr` over this many batches; 0 = constant
    lr_decay_start: int = 0  # the batch where the cosine decay begins
    lr_decay_steps: int = 0  # batches over which lr falls to lr_min; 0 = no decay
    lr_min: float = 0.0  # the rate after the decay
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.0
    clip_low: float = 0.2  # ratio clipped below at 1 - clip_low
    clip_high: float = 0.28  # ratio clipped above at 1 + clip_high (DAPO clip-higher)
    delta: float = 4.0  # INTELLECT-2 upper bound on the ratio for negative advantages
    minibatches: int = 2  # optimizer steps per batch
    kl_coef: float = 0.0  # weight of the k3 KL to the reference model; 0 = no reference needed
    std_normalize: bool = True  # divide advantages by the group std
    max_grad_norm: float = 1.0  # gradient clipping threshold
    temperature: float = 1.0  # sampling temperature for rollouts
    max_new_tokens: int = 10  # digit-sort answers are at most 8 digits + eos
    format_weight: float = 0.0  # rollout reward = task reward + this x the env's format reward
    decoupled: bool = False  # clip around the trainer's weights at the step's start for stale batches


def group_advantages(rewards: torch.Tensor, group_size: int, std_normalize: bool = True,
                     eps: float = 1e-6) -> torch.Tensor:
    """Advantages for flat rewards [N] laid out group-major (N = groups * group_size)."""
    r = rewards.float().view(-1, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if std_normalize:
        adv = adv / (r.std(dim=1, keepdim=True, unbiased=False) + eps)
    return adv.view(-1)


def lr_at(cfg: GRPOConfig, step: int) -> float:
    """The learning rate of batch `step` (0-based: the policy version being trained from)."""
    if cfg.lr_decay_steps > 0 and step >= cfg.lr_decay_start:
        done = min(1.0, (step - cfg.lr_decay_start) / cfg.lr_decay_steps)
        return cfg.lr_min + (cfg.lr - cfg.lr_min) * 0.5 * (1.0 + math.cos(math.pi * done))
    if cfg.lr_warmup <= 0:
        return cfg.lr
    return cfg.lr * min(1.0, (step + 1) / cfg.lr_warmup)


def sized_for(cfg: GRPOConfig, prompts: int) -> GRPOConfig:
    """The config for a step of `prompts` prompts. Steps grow with the rollouts a swarm has ready (the
    task's `max_prompts_per_step`); a bigger step takes proportionally more optimizer steps of the same
    minibatch size, each at the task's lr. That is the rule data-parallel training follows with a fixed
    per-update batch: a step of k times the task's `prompts_per_step` is k times the updates, not one
    update on a k times bigger batch, so the lr needs no rescaling and each update's gradient noise is
    what the task was tuned for. The lr schedule still counts versions."""
    steps = max(1, round(cfg.minibatches * prompts / cfg.prompts_per_step))
    return cfg if steps == cfg.minibatches else replace(cfg, minibatches=steps)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): unbiased, always >= 0 (Schulman 2020)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def clipped_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, clip_low: float, clip_high: float, delta: float,
                       ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0,
                       weights: torch.Tensor | None = None, prox_logp: torch.Tensor | None = None):
    """Token-level two-sided clipped loss; all [N, T] except advantages and weights [N].
    Row i counts `weights[i]` times (a collapsed repeat), in the loss and in the token count.
    With `prox_logp` (the decoupled objective) the ratio is taken to the proximal policy and each
    token's term is weighted by min(pi_prox / pi_behaviour, delta). Returns (loss, stats)."""
    mask = mask.to(logp.dtype)
    if weights is not None:
        mask = mask * weights[:, None].to(logp.dtype)
    n_tokens = mask.sum().clamp_min(1.0)
    centre = old_logp if prox_logp is None else prox_logp.detach()
    ratio = torch.exp(logp - centre)
    adv = advantages[:, None].to(logp.dtype)
    unclipped = torch.clamp(ratio, max=delta) * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    objective = torch.minimum(unclipped, clipped)
    if prox_logp is not None:
        staleness = torch.clamp(torch.exp(centre - old_logp), max=delta)
        objective = staleness * objective
    loss = -(objective * mask).sum() / n_tokens
    # tokens whose gradient clipping removed: ratio above the range for A > 0, below it or
    # above delta for A < 0
    r, a = ratio.detach(), adv.expand_as(ratio)
    was_clipped = ((a > 0) & (r > 1 + clip_high)) | ((a < 0) & ((r < 1 - clip_low) | (r > delta)))
    stats = {
        "clip_frac": float((was_clipped.float() * mask).sum() / n_tokens),
        "ratio_mean": float((ratio.detach() * mask).sum() / n_tokens),
        "ratio_max": float(ratio.detach().masked_fill(mask == 0, 0).max()) if mask.any() else 1.0,
    }
    if prox_logp is not None:  # how far the behaviour policy was from the proximal one
        stats["stale_weight_mean"] = float((staleness * mask).sum() / n_tokens)
    if ref_logp is not None and kl_coef > 0:
        kl = (kl_k3(logp, ref_logp) * mask).sum() / n_tokens
        loss = loss + kl_coef * kl
        stats["kl"] = float(kl.detach())
    return loss, stats


def clip_grad(model: torch.nn.Module, max_norm: float) -> float:
    """Clip the global gradient norm in place; returns the norm before clipping."""
    params = [p for p in model.parameters() if p.grad is not None]
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0


@dataclass
class Batch:
    """Rollouts as right-padded tensors. Position t of the [N, L-1] tensors scores input_ids[:, t+1]."""

    input_ids: torch.Tensor  # [N, L] prompt + completion, right-padded
    mask: torch.Tensor  # [N, L-1] 1 where the target token is a completion token
    old_logp: torch.Tensor  # [N, L-1] behaviour-policy logprobs at those positions
    advantages: torch.Tensor  # [N]

    def select(self, rows: torch.Tensor) -> "Batch":
        return Batch(self.input_ids[rows], self.mask[rows], self.old_logp[rows], self.advantages[rows])


def collapse_repeats(batch: Batch) -> tuple[Batch, torch.Tensor]:
    """(distinct rows, how many times each occurs), first occurrences in order.

    Rows are the same only when their ids, behaviour logprobs and advantage are bit-for-bit equal,
    so a collapsed row stands for copies whose loss terms are identical, never merely close."""
    ids, old = batch.input_ids.cpu().numpy(), batch.old_logp.cpu().numpy()
    adv = batch.advantages.cpu().numpy()
    first: dict[tuple[bytes, bytes, bytes], int] = {}
    rows: list[int] = []
    counts: list[int] = []
    for i in range(ids.shape[0]):
        key = (ids[i].tobytes(), old[i].tobytes(), adv[i].tobytes())
        at = first.setdefault(key, len(rows))
        if at == len(rows):
            rows.append(i)
            counts.append(1)
        else:
            counts[at] += 1
    return batch.select(torch.tensor(rows)), torch.tensor(counts, dtype=torch.float32)


def make_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]],
               behaviour_logprobs: list[torch.Tensor], advantages: torch.Tensor, pad_id: int) -> Batch:
    """Pack rollouts. Right padding needs no attention mask: causal attention never lets a real
    token see the pads that follow it."""
    n = len(prompt_ids)
    width = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    for i, (p, c, lp) in enumerate(zip(prompt_ids, completion_ids, behaviour_logprobs)):
        input_ids[i, :len(p) + len(c)] = torch.tensor(list(p) + list(c))
        mask[i, len(p) - 1:len(p) - 1 + len(c)] = 1
        old[i, len(p) - 1:len(p) - 1 + len(c)] = lp.float()
    return Batch(input_ids, mask, old, advantages.float())


def token_logprobs(model, input_ids: torch.Tensor) -> torch.Tensor:
    """[N, L-1] log-probabilities of each next token under `model` (with gradients)."""
    logits = model(input_ids=input_ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(2, input_ids[:, 1:, None])[..., 0]


def make_optimizer(model: torch.nn.Module, cfg: GRPOConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas,
                             weight_decay=cfg.weight_decay)


def has_dropout(model) -> bool:
    """Whether a training forward pass is random (then it cannot stand in for the proximal pass)."""
    config = getattr(getattr(model, "config", None), "__dict__", {})
    rates = [v for k, v in config.items() if "dropout" in k and isinstance(v, (int, float))]
    return any(v > 0 for v in rates) or any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def grpo_step(model, optimizer, batch: Batch, cfg: GRPOConfig, ref_model=None, on_policy: bool = False) -> dict:
    """One GRPO batch: `cfg.minibatches` optimizer steps over interleaved rows. Returns mean stats.

    `on_policy`: every row was sampled by exactly these weights (the single process), so the
    decoupled objective's proximal policy is the behaviour policy and its extra pass is skipped."""
    device = next(model.parameters()).device
    n = batch.input_ids.shape[0]
    totals: dict[str, float] = {}
    distinct = 0
    steps = min(cfg.minibatches, n)
    minibatches = [collapse_repeats(batch.select(torch.arange(k, n, steps))) for k in range(steps)]
    decoupled = cfg.decoupled and not on_policy
    proximal: list[torch.Tensor | None] = [None] * steps
    if decoupled:
        # every minibatch is clipped around the weights before the first update; the first one's
        # own training forward pass is at those weights, so without dropout only the others need
        # a pass of their own
        first = 1 if not has_dropout(model) else 0
        model.eval()
        with torch.no_grad():
            proximal[first:] = [completion_logprobs(model, mb.input_ids.to(device), mb.mask.to(device))
                                for mb, _ in minibatches[first:]]
    model.train()
    for (mb, weights), prox_logp in zip(minibatches, proximal):
        distinct += len(weights)
        ids, mask = mb.input_ids.to(device), mb.mask.to(device)
        logp = completion_logprobs(model, ids, mask)
        if decoupled and prox_logp is None:
            prox_logp = logp.detach()
        ref_logp = None
        if ref_model is not None and cfg.kl_coef > 0:
            with torch.no_grad():
                ref_logp = completion_logprobs(ref_model, ids, mask)
        loss, stats = clipped_token_loss(
            logp, mb.old_logp.to(device), mb.advantages.to(device), mask,
            cfg.clip_low, cfg.clip_high, cfg.delta, ref_logp, cfg.kl_coef, weights.to(device), prox_logp)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad_norm"] = clip_grad(model, cfg.max_grad_norm)
        optimizer.step()
        stats["loss"] = float(loss.detach())
        for key, v in stats.items():
            totals[key] = totals.get(key, 0.0) + v / steps
    model.eval()
    totals["tokens"] = float(batch.mask.sum())
    totals["rows"] = float(n)
    totals["distinct_rows"] = float(distinct)
    return totals
