"""Completion log-probabilities with each group's prompt computed once.

A GRPO batch is groups of completions of one prompt, and with a chat template the prompt is most
of every row: reasoning-gym chain_sum's is 69-71 tokens under SmolLM2's template, its answers 10-20.
Scoring every row from its first token (`grpo.token_logprobs`) runs the prompt through the model,
forward and backward, once per completion. Here the rows that share a prompt run it once: a forward
pass over the prompt keeps its keys and values (HF's cache, with gradients), repeated for the group,
and the completions run on top. The loss and its gradient are the same function of the weights (the
prompt's activations get the gradient of every completion that attends to them, as they do when each
row recomputes them), up to float summation order. Rows whose prompt no other row of the batch shares
are scored as before, together in one pass.
"""

from __future__ import annotations

import torch


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
    alone = [i for (start, _), rows in groups.items() if len(rows) == 1 or start == 0 for i in rows]
    if alone:
        out[alone] = _plain(model, input_ids[alone])
    for (start, _), rows in groups.items():
        if len(rows) > 1 and start > 0:
            last = max(int(flags[i].nonzero()[-1]) for i in rows)  # pads after the last target are not run
            out[rows, start:last + 1] = _on_prefix(model, input_ids[rows, :last + 2], start)
    return out * marked


def _plain(model, input_ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=input_ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(2, input_ids[:, 1:, None])[..., 0]


def _on_prefix(model, rows: torch.Tensor, start: int) -> torch.Tensor:
    """[k, L-1-start] for rows [k, L] sharing ids[:start]: positions start .. L-2, on one prefix pass."""
    cache = model(input_ids=rows[:1, :start], use_cache=True).past_key_values
    cache.batch_repeat_interleave(rows.shape[0])
    logits = model(input_ids=rows[:, start:], past_key_values=cache, use_cache=True).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(2, rows[:, start + 1:, None])[..., 0]
