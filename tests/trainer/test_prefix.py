"""Completion log-probabilities on shared prompts: the same numbers and gradients, a prompt run once per group."""

from __future__ import annotations

import pytest
import torch

from trainer.grpo import make_batch, token_logprobs
from trainer.model import create_builtin_model
from trainer.prefix import completion_logprobs

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    return create_builtin_model(0)[0].train()


def rows(prompt_len: int = 12):
    """Three prompts of different lengths with 4 completions each (two of them the same), a prompt
    alone, and a row with no completion tokens."""
    g = torch.Generator().manual_seed(0)
    prompts, completions = [], []
    for k in range(3):
        prompt = [1] + torch.randint(3, 12, (prompt_len + 2 * k,), generator=g).tolist()
        for j in range(4):
            prompts.append(prompt)
            completions.append(torch.randint(3, 12, (1 + (3 * j) % 5,), generator=g).tolist() if j < 3
                               else completions[-1])
    prompts += [[1, 4, 5], [1, 6, 7, 8]]
    completions += [[6, 2], []]
    return make_batch(prompts, completions, [torch.zeros(len(c)) for c in completions],
                      torch.ones(len(prompts)), pad_id=0)


def test_the_same_log_probabilities_and_zero_off_the_completions(model):
    b = rows()
    shared = completion_logprobs(model, b.input_ids, b.mask)
    plain = token_logprobs(model, b.input_ids) * b.mask
    assert shared.shape == plain.shape
    assert torch.allclose(shared, plain, atol=1e-5)
    assert bool((shared[b.mask == 0] == 0).all()) and bool((shared[-1] == 0).all())


def test_the_same_gradient(model):
    b = rows()
    weights = torch.linspace(-1, 1, b.input_ids.shape[0])[:, None] * b.mask  # any loss on the completions
    params = [p for p in model.parameters() if p.requires_grad]
    want = torch.autograd.grad((token_logprobs(model, b.input_ids) * weights).sum(), params)
    got = torch.autograd.grad((completion_logprobs(model, b.input_ids, b.mask) * weights).sum(), params)
    scale = max(float(w.abs().max()) for w in want)
    assert max(float((w - g).abs().max()) for w, g in zip(want, got)) < 1e-5 * scale


def tokens_run(model, fn, *args) -> list[int]:
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    try:
        fn(model, *args)
    finally:
        hook.remove()
    return seen


def test_each_shared_prompt_goes_through_the_model_once(model):
    b = rows()
    shared = tokens_run(model, completion_logprobs, b.input_ids, b.mask)
    plain = tokens_run(model, token_logprobs, b.input_ids)
    prompt_tokens = sum(12 + 2 * k for k in range(3))  # the grouped prompts, less their last token
    # each grouped prompt but its last token once instead of 4 times, and no padding run past a group's end
    assert sum(shared) <= sum(plain) - 3 * prompt_tokens
    assert len(shared) == 1 + 2 * 3  # the rows alone together, then per prompt length its prompts and its rows


def test_short_prompts_are_not_worth_the_extra_passes(model):
    b = rows(prompt_len=1)  # 2-6 token prompts: sharing them would save under a tenth of the tokens
    assert len(tokens_run(model, completion_logprobs, b.input_ids, b.mask)) == 1
    assert torch.allclose(completion_logprobs(model, b.input_ids, b.mask), token_logprobs(model, b.input_ids) * b.mask,
                          atol=1e-5)


def test_prompts_of_one_length_run_together(model):
    g = torch.Generator().manual_seed(1)
    prompts = [[1] + torch.randint(3, 12, (14,), generator=g).tolist() for _ in range(3)]
    completions = [torch.randint(3, 12, (1 + k % 4,), generator=g).tolist() for k in range(12)]
    b = make_batch([prompts[k // 4] for k in range(12)], completions, [torch.zeros(len(c)) for c in completions],
                   torch.ones(12), pad_id=0)
    assert len(tokens_run(model, completion_logprobs, b.input_ids, b.mask)) == 2  # the prompts, then the rows
    assert torch.allclose(completion_logprobs(model, b.input_ids, b.mask), token_logprobs(model, b.input_ids) * b.mask,
                          atol=1e-5)
