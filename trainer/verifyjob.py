"""The verify job: every check of proofs/checks.py on one committed batch, against our copy of its version.

A blob that does not decode, or names another task, version, worker or prompts than its commitment,
fails like any other check (the worker signed it); what we cannot do ourselves (a missing blob or
weights, an uncalibrated model) is a JobError, never a verdict. Batches that passed are remembered
per task (their content digests), so the same content committed again is a duplicate.

A lying validator (`--malicious lying-validator`) passes a cheat in (trainer/cheats.py) whose
`lie(job, honest result)` is what the job answers.
"""

from __future__ import annotations

from collections import OrderedDict

from swarm import jobs
from trainer.batch_codec import BatchError, decode
from trainer.blobdir import BlobDir
from trainer.jobenv import JobError, score_ids, task_env
from trainer.modelcache import ModelCache
from trainer.taskconfig import grpo_config

SEEN_PER_TASK = 8192  # content digests of passed batches remembered per task (the duplicate check)


class VerifyJobs:
    def __init__(self, blobs: BlobDir, models: ModelCache, cheat=None) -> None:
        self.blobs, self.models = blobs, models
        self.cheat = cheat  # None, or an object with `lie(job, result)`
        self._seen: dict[str, OrderedDict] = {}  # task -> content digests of batches that passed verify

    def verify(self, job: jobs.VerifyJob) -> jobs.VerifyResult:
        """The verdict on the batch `job.blob` as committed (see the module docstring)."""
        from proofs.checks import Claim, Rules, Validator, check_batch, rejected
        from swarm.taskparams import TaskParams

        task = job.task
        cfg, params, env = grpo_config(task.params), TaskParams.from_params(task.params), task_env(task)
        claim = Claim(bytes(job.worker_key), job.version, tuple(job.prompt_indices), job.samples_per_prompt,
                      float(job.mean_reward), int(job.num_tokens))
        data = self.blobs.read(job.blob, "rollout batch")
        model, tokenizer = self.models.policy(task.model, job.weights)
        try:
            batch = decode(data)
        except BatchError as exc:
            return self._answer(job, rejected(claim, "schema", {"error": str(exc)[:200]}))
        header = (batch.task_id, batch.version, bytes(batch.worker_key), tuple(batch.prompt_indices),
                  batch.samples_per_prompt)
        if header != (task.task_id, claim.version, claim.worker_key, claim.prompt_indices, claim.samples_per_prompt):
            return self._answer(job, rejected(claim, "claim", header="batch header differs from its commitment"))
        rules = Rules(task.task_id, params.n_prompts, params.prompts_per_commit, params.max_batches_per_version,
                      cfg.max_new_tokens, cfg.temperature, tokenizer.eos_token_id, model.config.vocab_size,
                      samples_per_prompt=params.group_size)
        try:
            validator = Validator.calibrated(
                model, task.model, lambda i: env.prompt_ids(tokenizer, env.prompt(i, "train")),
                lambda i, ids, finished: score_ids(task, self.models.template(task.model)[1], i, ids, finished))
        except FileNotFoundError as exc:
            raise JobError(f"verify: {exc}") from None
        seen = self._seen.setdefault(task.task_id, OrderedDict())
        verdict = check_batch(batch.samples, claim, rules, validator, seen=seen)
        if verdict.passed:
            seen[bytes.fromhex(verdict.evidence["content"])] = None
            while len(seen) > SEEN_PER_TASK:
                seen.popitem(last=False)
        return self._answer(job, verdict)

    def _answer(self, job: jobs.VerifyJob, verdict) -> jobs.VerifyResult:
        result = jobs.VerifyResult(verdict.passed, verdict.reason, verdict.evidence_hash, verdict.detail)
        return self.cheat.lie(job, result) if self.cheat is not None else result
