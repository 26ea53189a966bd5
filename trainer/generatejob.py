"""The generate job: seeded completions of one version's policy, scored, proved, stored as one batch.

Each assigned prompt gets `samples_per_prompt` completions seeded from (task, worker, version,
prompt, sample), each scored by the environment and carrying its TOPLOC proof (proofs/toploc.py);
the batch is stored in the blob directory under its hash. A slice this worker generated before a
restart is answered `repeated`, with nothing generated (trainer/generated.py).

Completions come from `TorchBackend`, or with `inference="vllm"` from the job process's one vLLM
engine (trainer/inference_vllm.py: kept up across versions, each version's weights loaded into it in
place, the same seeded sampler, proofs from a torch prefill of the same policy).

A dishonest job process (`--malicious`) passes a cheat in (trainer/cheats.py); its `generate` gets
this object and reuses the honest parts (`rollouts`, `store_batch`, `score`, `models`).
"""

from __future__ import annotations

import torch

from proofs import toploc
from swarm import jobs
from trainer import generated
from trainer.batch_codec import RolloutBatch, RolloutSample, encode
from trainer.blobdir import BlobDir
from trainer.inference import TorchBackend, sample_seed
from trainer.jobenv import JobError, env_call, prompts_of, score_ids, task_env
from trainer.modelcache import ModelCache
from trainer.rollout import completion_text, score
from trainer.taskconfig import grpo_config
from trainer.trainerstore import TrainerStore
from trainer.trainstate import safe_name

INFERENCE = ("torch", "vllm")


class GenerateJobs:
    def __init__(self, blobs: BlobDir, models: ModelCache, store: TrainerStore, cheat=None,
                 inference: str = "torch") -> None:
        if inference not in INFERENCE:
            raise ValueError(f"inference {inference!r}: one of {', '.join(INFERENCE)}")
        self.blobs, self.models, self.store = blobs, models, store
        self.cheat = cheat  # None, or an object with `generates` and `generate(self, job)`
        self.inference = inference

    def generate(self, job: jobs.GenerateJob) -> jobs.GenerateResult:
        """`samples_per_prompt` seeded completions per assigned prompt, scored, each with its TOPLOC
        proof, stored as one batch; `repeated` (nothing generated) for a slice this worker generated
        before a restart."""
        task_env(job.task)
        if not job.prompt_indices or job.samples_per_prompt < 1:
            raise JobError("generate: the job names no prompts or no samples per prompt")
        grpo_config(job.task.params)  # bad task params are an error, whether or not the slice is new
        state, claim = self.store.path(job.task.task_id), (job.worker_key, job.version, job.prompt_indices)
        if generated.seen(state, *claim):
            return jobs.GenerateResult(b"", 0, 0, 0.0, repeated=True)  # maybe committed before a restart
        if self.cheat is not None and self.cheat.generates:
            result = self.cheat.generate(self, job)
        else:
            model, tokenizer = self.models.policy(job.task.model, job.weights)
            result = self.store_batch(job, job.prompt_indices, self.rollouts(job, model, tokenizer, job.prompt_indices))
        generated.record(state, *claim)
        return result

    def rollouts(self, job: jobs.GenerateJob, model, tokenizer, indices) -> list[RolloutSample]:
        """Seeded completions of `model` for prompts `indices`, scored, with proofs."""
        task = job.task
        cfg = grpo_config(task.params)
        env = task_env(task)
        prompts, prompt_ids = env_call(task.env, "building prompts", lambda: prompts_of(env, tokenizer, indices))
        seeds = [sample_seed(task.task_id, job.worker_key, job.version, i, s)
                 for i in indices for s in range(job.samples_per_prompt)]
        backend = self.backend(job, model, tokenizer)
        completions = backend.generate(prompt_ids, job.samples_per_prompt, cfg.max_new_tokens,
                                       cfg.temperature, seeds)
        samples = []
        # A group repeats completions (52 of 64 samples of a trained policy), whose hidden states are
        # bit-identical within one generated batch: each distinct one is proved once.
        proofs: dict[bytes, bytes] = {}
        for k, c in enumerate(completions):
            p, s = divmod(k, job.samples_per_prompt)
            prompt = prompts[p]
            reward = env_call(task.env, f"scoring prompt {prompt.index}", lambda: score(
                env, prompt, completion_text(tokenizer, c), c.finished, cfg.format_weight))
            bits = c.hidden.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
            proof = proofs.get(bits) or proofs.setdefault(bits, toploc.build_proof(c.hidden))
            samples.append(RolloutSample(
                prompt_index=indices[p], sample_index=s, prompt_ids=tuple(c.prompt_ids),
                token_ids=tuple(c.token_ids), logprobs=c.logprobs.numpy(), reward=float(reward),
                finished=c.finished, seed=c.seed, proof=proof))
        return samples

    def backend(self, job: jobs.GenerateJob, model, tokenizer):
        """What samples `model`: a TorchBackend, or the vLLM engine with `model`'s weights loaded."""
        if self.inference == "torch":
            return TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=True)
        from trainer import inference_vllm

        name = job.task.model
        template, template_tokenizer = self.models.template(name)
        try:
            engine = inference_vllm.engine_for(name, template, template_tokenizer,
                                               self.store.root / "vllm" / safe_name(name))
        except inference_vllm.VllmUnavailable as exc:
            raise JobError(f"generate: {exc}") from None
        # the engine holds one set of weights: this policy's, unless it was given another model since
        # (a version, or a cheater's copy: the object and the version's weights hash name them)
        key = engine.weights_key
        if key is None or key[0] is not model or key[1] != bytes(job.weights):
            engine.load_weights(model.state_dict(), key=(model, bytes(job.weights)))
        return inference_vllm.VllmBackend(engine, model)

    def store_batch(self, job: jobs.GenerateJob, indices, samples) -> jobs.GenerateResult:
        """Encode `samples` as the job's batch (for prompts `indices`), store it, and describe it."""
        task = job.task
        batch = RolloutBatch(task.task_id, job.version, bytes(job.worker_key), tuple(indices),
                             job.samples_per_prompt, tuple(samples))
        data = encode(batch)
        digest = self.blobs.write(data)
        other = tuple(indices) if tuple(indices) != tuple(job.prompt_indices) else None
        return jobs.GenerateResult(digest, len(data), batch.num_tokens, batch.mean_reward, other)

    def score(self, job, prompt_index: int, token_ids, finished: bool) -> float:
        """The environment's reward for a completion given as token ids (what validators recompute)."""
        _, tokenizer = self.models.template(job.task.model)
        return score_ids(job.task, tokenizer, prompt_index, token_ids, finished)
