"""Proofs that a rollout batch is what its worker says it is, checked by any validator.

Worker side (trainer/generatejob.py): for each completion,
    proof = proofs.toploc.build_proof(completion.hidden)   # bf16 final-norm states, 258 B / 32 tokens
and put it in the batch's per-sample `proof` field.

Validator side (a verify job):
    validator = proofs.checks.Validator.calibrated(model, task.model, prompt_ids, reward)
    verdict = proofs.checks.check_batch(samples, claim, rules, validator, seen=digests)
    -> Verdict(passed, reason, evidence, evidence_hash)

Modules:
  toploc.py      TOPLOC build/verify, proof parsing (null and forged proofs), per-model thresholds
  sampling.py    replay of the seeded Gumbel sampler, logprob consistency, surprisal z-test
  checks.py      the pipeline and its reason codes
  adversaries.py honest and cheating batch makers (tests, calibration, bench/detection.py)
  calibration/   per-model thresholds with the measured honest and dishonest distributions,
                 written by `python bench/detection.py --model M --calibrate`

What is and is not proven, on this project's default (fp32 torch workers, CPU or GPU without TF32):
  - other weights: TOPLOC exponent mismatches (over 100 of 128 against at most a few honest);
  - other precision (bf16, int8): logprob errors under the validator's forward, orders of magnitude
    above honest float noise (TOPLOC's mantissa mean cannot be the judge: an honest top-k boundary
    tie reads a few garbage values, as much error as int8; bench/detection.py `derive`);
  - tokens not drawn by the seeded sampler (fabricated, tampered last token): replay mismatch;
  - rewards, prompts, assignment, duplicates: recomputed exactly.
  Not covered: a worker on vLLM's own sampler cannot be replayed (Rules.replay=False leaves the
  logprob check and the surprisal z-test, which catches greedy or noise tokens but not plausible
  fabricated ones); bf16 honest workers need their own calibration (thresholds here assume fp32).
"""
