"""The validator's detection bound, measured over 100 batches per cheat kind rather than one seed.

test_checks.py shows each cheat failing with its reason on a fixed batch; this shows how often. Each
kind runs on 100 batches with different sampling seeds (versions 1000-1024, batches 0-3: other
versions than calibration and the other tests use) of the usual 2 prompts x 4 samples x 8 tokens,
the built-in untrained model as the policy and the calibrated thresholds:

* honest: rejected in 0 of 100. With none seen in 100, the false-rejection rate per batch is under
  3% at 95% confidence (the rule of three: 3/n); one seen is a bug (an honest peer gets banned).
* other-model, low-precision, int8-quant, inflated-reward: caught in 100 of 100, so each is caught in
  at least 97% of batches at 95% confidence, with the reasons listed in REASONS.
* laundered and fabricated-tokens: a batch whose tokens (laundered) or samples (fabricated: only
  failed samples are replaced) all equal the honest batch's *is* the honest batch and must pass; every
  other one is caught. Laundered tokens differ from the honest draw only where a seeded draw flips
  under bf16, which at 8 tokens happens in a few batches of 100 (9 when measured, all caught); the
  rate per completion, not per batch, is what matters for a persistent launderer (see test_checks).

Deterministic (fixed seeds), so it never flakes; the bound is what the counts support. About a
minute of CPU on one thread: slow.
"""

import pytest

from proofs import adversaries as adv

# A few minutes of CPU; the timeout allows for a 2-core machine shared with other work.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

BATCHES = 100  # 200 gave the same counts (0 honest rejected, every differing batch caught)
REASONS = {"other-model": {"toploc"}, "low-precision": {"logprob"}, "int8-quant": {"logprob", "toploc"},
           "inflated-reward": {"reward"}, "laundered": {"sampling"}, "fabricated-tokens": {"limits", "sampling"}}


def _recommit(samples, claim):
    return adv.claim_for(samples, claim.worker_key, claim.version, claim.prompt_indices, claim.samples_per_prompt)


def _same(a, b) -> bool:
    return [(s.token_ids, s.reward) for s in a] == [(s.token_ids, s.reward) for s in b]


def test_each_cheat_is_caught_in_every_batch_that_differs_and_no_honest_batch_is_rejected(task, other_model):
    bf16 = adv.bf16_copy(task.model)
    models = {"other-model": other_model, "low-precision": bf16, "int8-quant": adv.int8_copy(task.model)}
    tally = {kind: {"batches": 0, "caught": 0, "honest_equal": 0, "reasons": {}} for kind in ["honest", *REASONS]}

    def record(kind, verdict, equal_to_honest=False):
        t = tally[kind]
        t["batches"] += 1
        t["honest_equal"] += equal_to_honest
        if not verdict.passed:
            t["caught"] += 1
            t["reasons"][verdict.reason] = t["reasons"].get(verdict.reason, 0) + 1
        elif not equal_to_honest and kind != "honest":
            t["reasons"]["MISSED"] = t["reasons"].get("MISSED", 0) + 1

    for b in range(BATCHES):
        version, batch = 1000 + b // 4, b % 4
        honest, claim = task.honest(version=version, batch=batch)
        record("honest", task.check(honest, claim))
        cheap = {kind: task.honest(model, version, batch) for kind, model in models.items()}
        for kind, (samples, cheap_claim) in cheap.items():
            record(kind, task.check(samples, cheap_claim))
        inflated = adv.inflate(honest)
        record("inflated-reward", task.check(inflated, _recommit(inflated, claim)), _same(inflated, honest))
        fake = adv.fabricate(task.model, honest, task.answer, task.reward, task.rules.eos_id)
        record("fabricated-tokens", task.check(fake, _recommit(fake, claim)), _same(fake, honest))
        washed = adv.launder(task.model, cheap["low-precision"][0])  # bf16 tokens, fp32 logprobs and proofs
        record("laundered", task.check(washed, _recommit(washed, claim)),
               [s.token_ids for s in washed] == [s.token_ids for s in honest])

    assert tally["honest"]["caught"] == 0, tally["honest"]
    for kind, reasons in REASONS.items():
        t = tally[kind]
        differing = t["batches"] - t["honest_equal"]
        assert t["caught"] == differing and set(t["reasons"]) <= reasons, (kind, t)
    # The bound needs batches that differ: every kind but laundered differs in (nearly) all of them.
    for kind in ("other-model", "low-precision", "int8-quant", "inflated-reward", "fabricated-tokens"):
        assert tally[kind]["caught"] >= 0.97 * BATCHES, (kind, tally[kind])
    assert tally["laundered"]["caught"] >= 5, tally["laundered"]  # some flipped draws, each caught
