"""The validator pipeline: honest batches pass, every cheat fails with its own reason code."""

from dataclasses import replace

import pytest

from proofs import adversaries as adv
from proofs.checks import Claim, content_digest


def test_honest_batch_passes_with_a_stable_evidence_hash(task, honest_batch):
    samples, claim = honest_batch
    v = task.check(samples, claim)
    assert (v.passed, v.reason) == (True, "ok")
    assert v.evidence["batch"] == 1 and len(v.evidence_hash) == 32
    assert task.check(samples, claim).evidence_hash == v.evidence_hash
    assert len(v.detail) <= 256


def _recommit(samples, claim, **changes):
    c = adv.claim_for(samples, claim.worker_key, claim.version, claim.prompt_indices, claim.samples_per_prompt)
    return replace(c, **changes)


@pytest.mark.parametrize("kind, reason, where, numbers", [
    ("other-model", "toploc", {"sample", "chunk"}, {"exp_mismatches", "mant_err_mean"}),
    # low precision: TOPLOC's mantissa mean cannot tell it from an honest top-k boundary swap
    # (bench/detection.py `derive`), the logprobs under the validator's own forward can
    ("low-precision", "logprob", {"sample", "position"}, {"logprob_err"}),
    ("int8-quant", "logprob", {"sample", "position"}, {"logprob_err"}),
])
def test_other_weights_are_caught(task, other_model, kind, reason, where, numbers):
    model = {"other-model": other_model, "low-precision": adv.bf16_copy(task.model),
             "int8-quant": adv.int8_copy(task.model)}[kind]
    samples, claim = task.honest(model, version=5, batch=0)
    v = task.check(samples, claim)
    assert (v.passed, v.reason) == (False, reason)
    assert where <= set(v.evidence) and numbers <= set(v.numbers)


def test_laundered_low_precision_is_caught_by_the_sampling_replay(task):
    """bf16 sampling with fp32 logprobs and proofs recomputed: only tokens whose seeded draw flips
    under bf16 betray it, so detection is per token and a batch is caught with a probability that
    grows with its size. This shows the reason (always the sampling replay) on four fixed batches of
    64 completions; test_detection_bound.py states and asserts the rate over 200 batches: every
    laundered batch whose tokens differ from the honest draw is caught."""
    from tests.proofs.conftest import Task

    big = Task(task.model, task.tok, prompts=8, spp=8)
    cheap = adv.bf16_copy(task.model)
    reasons = []
    for batch in range(4):
        samples, claim = big.honest(cheap, version=7, batch=batch)
        washed = adv.launder(task.model, samples)
        reasons.append(big.check(washed, _recommit(washed, claim)).reason)
    assert "sampling" in reasons and set(reasons) <= {"ok", "sampling"}, reasons


def test_fabricated_tokens_pass_toploc_but_fail_sampling(task):
    samples, claim = task.honest(version=6, batch=0)
    fake = adv.fabricate(task.model, samples, task.answer, task.reward, task.rules.eos_id)
    assert sum(s.reward for s in fake) > sum(s.reward for s in samples)
    v = task.check(fake, _recommit(fake, claim))
    assert (v.passed, v.reason) == (False, "sampling")
    assert v.numbers["mismatches"] and v.evidence["claimed"] != v.evidence["replayed"]
    s = fake[v.evidence["sample"]]
    assert s.token_ids[v.evidence["position"]] == v.evidence["claimed"]


def test_inflated_reward_fails(task, honest_batch):
    samples, claim = honest_batch
    fake = adv.inflate(samples)
    v = task.check(fake, _recommit(fake, claim))
    assert (v.passed, v.reason) == (False, "reward")
    assert (v.numbers["claimed"], v.numbers["recomputed"]) == (1.0, 0.0)


def test_cherry_picked_prompts_fail_assignment(task):
    easy = [0, 1]
    samples = adv.generate(task.backend(task.model), task.rules, task.prompt_ids, task.reward, task.worker, 2,
                           easy, task.spp)
    v = task.check(samples, adv.claim_for(samples, task.worker, 2, easy, task.spp))
    assert (v.passed, v.reason) == (False, "assignment")


def test_replayed_batch_is_a_duplicate_or_unassigned(task, honest_batch):
    samples, claim = honest_batch
    later = replace(claim, version=claim.version + 1)
    assert task.check(samples, later, seen={content_digest(samples)}).reason == "duplicate"
    assert task.check(samples, later).reason == "assignment"


def test_another_workers_batch_fails(task, honest_batch):
    samples, claim = honest_batch
    assert task.check(samples, replace(claim, worker_key=bytes(32))).reason == "assignment"


def test_null_proof_is_rejected(task, honest_batch):
    samples, claim = honest_batch
    bad = list(samples)
    bad[2] = replace(bad[2], proof=b"\0" * len(bad[2].proof))
    v = task.check(bad, claim)
    assert (v.passed, v.reason, v.evidence["sample"]) == (False, "proof-null", 2)


def test_a_swapped_proof_fails_toploc(task, honest_batch):
    samples, claim = honest_batch
    j = next(j for j in range(1, len(samples)) if samples[j].token_ids != samples[0].token_ids)
    bad = list(samples)
    bad[0] = replace(bad[0], proof=samples[j].proof)
    if len(bad[0].proof) == len(samples[0].proof):
        assert task.check(bad, claim).reason == "toploc"


@pytest.mark.parametrize("edit, reason", [
    (lambda s, c: (s[:-1], c), "claim"),
    (lambda s, c: (s, replace(c, num_tokens=c.num_tokens + 1)), "claim"),
    (lambda s, c: (s, replace(c, mean_reward=c.mean_reward + 0.5)), "claim"),
    (lambda s, c: ([replace(s[0], sample_index=1)] + s[1:], c), "claim"),
    (lambda s, c: ([replace(s[0], logprobs=s[0].logprobs[:-1])] + s[1:], c), "schema"),
    (lambda s, c: ([replace(s[0], proof="x")] + s[1:], c), "schema"),
    (lambda s, c: ([replace(s[0], logprobs=["x"] * len(s[0].token_ids))] + s[1:], c), "schema"),
    (lambda s, c: ([replace(s[0], token_ids=[3.0] + s[0].token_ids[1:])] + s[1:], c), "schema"),
    (lambda s, c: (s, replace(c, samples_per_prompt=2)), "claim"),
    (lambda s, c: ([replace(s[0], token_ids=[99] + s[0].token_ids[1:])] + s[1:], c), "limits"),
    (lambda s, c: ([replace(s[0], prompt_ids=s[0].prompt_ids[:-1] + [3])] + s[1:], c), "prompt"),
])
def test_malformed_batches_fail_early(task, honest_batch, edit, reason):
    samples, claim = edit(list(honest_batch[0]), honest_batch[1])
    v = task.check(samples, claim)
    assert (v.passed, v.reason) == (False, reason)


def test_eos_rules_are_limits(task, honest_batch):
    samples, claim = honest_batch
    s = next(x for x in samples if not x.finished and len(x.token_ids) == task.rules.max_new_tokens)
    early_eos = replace(s, token_ids=[task.rules.eos_id] + s.token_ids[1:])
    short = replace(s, token_ids=s.token_ids[:-1], logprobs=s.logprobs[:-1])
    for bad in (early_eos, short, replace(s, finished=True)):
        batch = [bad if x is s else x for x in samples]
        assert task.check(batch, _recommit(batch, claim)).reason == "limits"


def test_evidence_hash_binds_the_commitment(task, honest_batch):
    samples, claim = honest_batch
    a = task.check(samples, replace(claim, version=9))
    b = task.check(samples, replace(claim, version=10))
    assert a.reason == b.reason == "assignment" and a.evidence_hash != b.evidence_hash
    assert isinstance(claim, Claim)


def test_a_second_validator_with_other_float_noise_gets_the_same_evidence_hash(task, other_model):
    import copy

    import torch

    from proofs.checks import Validator, check_batch

    noisy = copy.deepcopy(task.model)
    with torch.no_grad():
        for p in noisy.parameters():
            p.mul_(1 + 2.0 ** -20 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    second = Validator(noisy, task.prompt_ids, task.reward, task.validator.toploc, task.validator.sampling)
    for samples, claim in (task.honest(other_model, version=7, batch=0), task.honest(version=7, batch=0)):
        a, b = task.check(samples, claim), check_batch(samples, claim, task.rules, second)
        assert (a.reason, a.evidence_hash) == (b.reason, b.evidence_hash)
    assert a.passed and a.numbers != b.numbers  # the numbers differ, the hashed facts do not
