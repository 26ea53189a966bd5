"""Sampling checks under the validator's logits: replay, logprobs, last token, surprisal."""

import math
from dataclasses import replace

import torch

from proofs import adversaries as adv
from proofs import sampling
from proofs.checks import forward, forward_many
from gossip.assignment import sample_seed


def test_gumbel_noise_and_prefill_match_the_trainer():
    from trainer.inference import gumbel_noise, prefill

    a, b = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for _ in range(3):
        assert torch.equal(sampling.gumbel_noise(a, 49152), gumbel_noise(b, 49152))


def test_batched_prefill_matches_single_prefill(task, honest_batch):
    from trainer.inference import prefill

    samples, _ = honest_batch
    many = forward_many(task.model, [(s.prompt_ids, s.token_ids) for s in samples], max_batch_tokens=40)
    for s, (logits, hidden) in zip(samples, many):
        logp, h = prefill(task.model, s.prompt_ids, s.token_ids)
        got = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids)[:, None])[:, 0]
        assert torch.allclose(got, logp, atol=1e-5)
        assert torch.allclose(hidden.float(), h.float(), atol=0.02)


def test_repeated_sequences_are_computed_once(task, honest_batch):
    """A GRPO group often repeats a completion; the check's prefill computes each sequence once."""
    samples, _ = honest_batch
    pairs = [(s.prompt_ids, s.token_ids) for s in samples[:3]]
    rows = []
    hook = task.model.model.register_forward_pre_hook(lambda module, args, kwargs: rows.append(
        len(kwargs["input_ids"])), with_kwargs=True)
    try:
        many = forward_many(task.model, pairs + pairs[:2] + pairs)  # 8 pairs, 3 distinct
    finally:
        hook.remove()
    assert sum(rows) == 3
    assert [id(r) for r in many] == [id(many[k]) for k in (0, 1, 2, 0, 1, 0, 1, 2)]
    for (logits, hidden), (logp, h) in zip(many[:3], forward_many(task.model, pairs)):
        assert torch.equal(logits, logp) and torch.equal(hidden, h)


def _evidence(task, claim, s):
    logits, _ = forward(task.model, s.prompt_ids, s.token_ids)
    seed = sample_seed(task.rules.task_id, claim.worker_key, claim.version, s.prompt_index, s.sample_index)
    return sampling.sample_evidence(logits, s.token_ids, s.logprobs, seed, task.rules.temperature)


def test_honest_samples_replay_exactly(task, honest_batch):
    samples, claim = honest_batch
    for s in samples:
        ev = _evidence(task, claim, s)
        assert ev.mismatches == () and ev.max_logprob_err < 1e-5
        assert sampling.sample_failure(ev, task.validator.sampling) is None


def test_a_tampered_last_token_is_caught_only_by_replay(task, honest_batch):
    samples, claim = honest_batch
    s = next(x for x in samples if not x.finished)
    bad = adv.tamper_last_token(task.model, s, task.rules.vocab_size, task.rules.eos_id)
    ev = _evidence(task, claim, bad)
    assert ev.max_logprob_err < 1e-5  # the claimed logprob is the honest one for the new token
    assert [m[0] for m in ev.mismatches] == [len(s.token_ids) - 1]
    assert sampling.sample_failure(ev, task.validator.sampling) == "sampling"
    assert sampling.sample_failure(ev, task.validator.sampling, replay=False) is None


def test_wrong_or_nan_logprobs_fail(task, honest_batch):
    samples, claim = honest_batch
    s = samples[0]
    for lp in ([x + 1e-2 for x in s.logprobs], [math.nan] * len(s.logprobs)):
        ev = _evidence(task, claim, replace(s, logprobs=lp))
        assert sampling.sample_failure(ev, task.validator.sampling) == "logprob"


def test_surprisal_z_separates_sampled_from_greedy_tokens(task, honest_batch):
    samples, claim = honest_batch
    honest = [_evidence(task, claim, s) for s in samples]
    assert abs(sampling.batch_z(honest)) < task.validator.sampling.max_abs_z
    prompts = [task.prompt_ids(i) for i in range(16)]  # greedy decoding: far too little surprisal
    greedy = [sampling.sample_evidence(forward(task.model, c.prompt_ids, c.token_ids)[0], c.token_ids,
                                       c.logprobs, 0, 1.0)
              for c in task.backend(task.model).generate(prompts, 1, task.rules.max_new_tokens, 0.0, [])]
    assert sampling.batch_z(greedy) < -task.validator.sampling.max_abs_z


def test_one_draw_of_n_rows_is_the_n_per_token_draws():
    """The batched replay draws a completion's noise in one call; the worker drew it token by token."""
    from trainer.inference import gumbel_noise

    for vocab in (16, 49152):
        a, b = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
        rows = torch.stack([gumbel_noise(a, vocab) for _ in range(9)])
        assert torch.equal(sampling.gumbel_of_uniforms(torch.rand((9, vocab), generator=b)), rows)
        assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))  # same state after


def test_batched_evidence_is_each_samples_own(task, honest_batch, monkeypatch):
    """Evidence for a whole batch (in several groups) equals evidence sample by sample, tampered
    samples included: the same mismatches and logprob errors, sums equal to float rounding."""
    samples, claim = honest_batch
    s = next(x for x in samples if not x.finished)
    tampered = [adv.tamper_last_token(task.model, s, task.rules.vocab_size, task.rules.eos_id),
                replace(samples[1], logprobs=[x + 1e-2 for x in samples[1].logprobs])]
    items = []
    for x in list(samples) + tampered:
        seed = sample_seed(task.rules.task_id, claim.worker_key, claim.version, x.prompt_index, x.sample_index)
        items.append((forward(task.model, x.prompt_ids, x.token_ids)[0], x.token_ids, x.logprobs, seed))
    monkeypatch.setattr(sampling, "GROUP_ELEMENTS", 3 * 8 * task.model.config.vocab_size)
    many = sampling.sample_evidence_many(items, task.rules.temperature)
    one = [sampling.sample_evidence(*item, task.rules.temperature) for item in items]
    assert [e.mismatches for e in many] == [e.mismatches for e in one]
    assert any(e.mismatches for e in many) and max(e.max_logprob_err for e in many) > 1e-3
    for a, b in zip(many, one):
        assert (a.max_logprob_err, a.logprob_err_at) == (b.max_logprob_err, b.logprob_err_at)
        assert math.isclose(a.surprisal, b.surprisal, rel_tol=1e-12) and math.isclose(a.entropy, b.entropy)


def test_the_logprob_bound_is_relative_to_the_logit_scale():
    """Honest float noise grows with the logits (a trained policy's are ~10x the base model's), so a
    logprob error counts in units of the position's largest |logit| (at least 1)."""
    g = torch.Generator().manual_seed(3)
    logits = torch.rand((5, 16), generator=g) * 2 - 1  # |logit| <= 1: the scale is 1
    tokens = [1, 2, 3, 4, 5]
    exact = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
    for k in (1.0, 10.0, 100.0):
        sharp = logits * k
        exact_k = torch.log_softmax(sharp, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
        scale = sharp.abs().amax(-1).clamp_min(1.0)
        noisy = exact_k + 3e-6 * scale  # the same relative noise at every sharpness
        ev = sampling.sample_evidence(sharp, tokens, noisy, 0, 0.0)
        assert math.isclose(ev.max_logprob_err, 3e-6, rel_tol=0.05), k
    off = exact + 1e-4  # one absolute error: far off for a flat policy, float noise for a sharp one
    assert sampling.sample_evidence(logits, tokens, off, 0, 0.0).max_logprob_err > 9e-5
    sharp = logits * 100
    off_sharp = torch.log_softmax(sharp, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0] + 1e-4
    assert sampling.sample_evidence(sharp, tokens, off_sharp, 0, 0.0).max_logprob_err < 2e-6
