"""Completion log-probabilities with each group's prompt computed once.

A GRPO batch is groups of completions of one prompt, and with a chat template the prompt is most
of every row: reasoning-gym chain_sum's is 69-71 tokens under SmolLM2's template, its answers 10-26.
Scoring every row from its first token (`grpo.token_logprobs`) runs the prompt through the model,
forward and backward, once per completion. Here the rows that share a prompt run it once: a forward
pass over the prompts keeps their keys and values (HF's cache, with gradients), gathered for each
row, and the completions run on top; prompts of one length go through as one batch, and their rows
as one more. The loss and its gradient are the same function of the weights (the
prompt's activations get the gradient of every completion that attends to them, as they do when each
row recomputes them), up to float summation order. Rows whose prompt no other row of the batch shares
are scored as before, together in one pass.
"""

from __future__ import annotations

import torch

# Share prompts only when that leaves at most this share of the tokens the rows would run each on
# its own: every prompt length costs two passes instead of one, which a saving of less than a fifth
# does not pay for. The built-in model on digit-sort (8-token prompts) runs 0.57 of the tokens and
# steps 1.5x faster, SmolLM2 on chain_sum 0.37 of them and 1.6x faster (bench/grpo_step.py).
SHARED_AT_MOST = 0.8


def completion_logprobs(model, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, L-1] log-probabilities of each next token at the positions `mask` marks (completion tokens;
    0 elsewhere), as `grpo.token_logprobs` gives them there. Rows are right-padded prompt + completion,
    and the prompt is everything before the first marked target."""
    n, width = input_ids.shape
    out = torch.zeros((n, max(width - 1, 0)), device=input_ids.device)
    marked = mask != 0
    ids, flags = input_ids.cpu().numpy(), marked.cpu()
    groups: dict[tuple[int, bytes], list[int]] = {}
    for i in flags.any(1).nonzero()[:, 0].tolist():  # a row with nothing to score is left at 0
        start = int(flags[i].float().argmax())  # the prompt's length - 1: the prefix cached is ids[:start]
        groups.setdefault((start, ids[i, :start].tobytes()), []).append(i)
    ends = {i: int(flags[i].nonzero()[-1]) + 2 for rows in groups.values() for i in rows}  # past the last target
    buckets: dict[int, list[list[int]]] = {}  # prompt length -> its groups, each run on one shared pass
    for (start, _), rows in groups.items():
        if len(rows) > 1 and start > 0:
            buckets.setdefault(start, []).append(rows)
    shared = sum(start * len(gs) + sum(max(ends[i] for i in r) - start for r in gs for _ in r)
                 for start, gs in buckets.items())
    if shared > SHARED_AT_MOST * sum(ends[i] for gs in buckets.values() for r in gs for i in r):
        buckets = {}  # too little of the rows is shared prompt to pay for the extra passes
    alone = sorted(set(ends) - {i for gs in buckets.values() for r in gs for i in r})
    if alone:
        end = max(ends[i] for i in alone)
        out[alone, :end - 1] = _plain(model, input_ids[alone, :end])
    for start, gs in buckets.items():
        rows = [i for r in gs for i in r]
        end = max(ends[i] for i in rows)
        which = torch.tensor([k for k, r in enumerate(gs) for _ in r], device=input_ids.device)
        heads = input_ids[[r[0] for r in gs], :start]
        out[rows, start:end - 1] = _on_prefix(model, heads, which, input_ids[rows, start:end])
    return out * marked


def _plain(model, input_ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=input_ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(2, input_ids[:, 1:, None])[..., 0]


def _on_prefix(model, heads: torch.Tensor, which: torch.Tensor, tails: torch.Tensor) -> torch.Tensor:
    """[k, T-1] log-probabilities of tails [k, T] (a row's tokens from its prompt's last one on) that
    continue prompts heads[which] ([g, P], all P tokens long): the prompts run once, as one batch."""
    cache = model(input_ids=heads, use_cache=True).past_key_values
    cache.batch_select_indices(which)
    logits = model(input_ids=tails, past_key_values=cache, use_cache=True).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(2, tails[:, 1:, None])[..., 0]
