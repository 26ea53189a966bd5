"""A dishonest job process: what `swarm-node start --malicious KIND` makes a peer's jobs do.

The peer's core stays honest (it assigns, commits, gossips and answers exactly as the protocol
says); only the blocking work lies, as a real attacker with a modified job process would. Each
kind is the rational cheat aimed at one check (proofs/adversaries.py has the same cheats for
tests and bench/detection.py, on its own sample type):

  other-model        generate with other weights: the policy with 2% seeded multiplicative noise
  low-precision      generate with a bf16 copy of the policy (the task says fp32)
  int8-quant         generate with an int8 fake-quantised copy
  laundered          sample with the bf16 copy, then recompute logprobs and proofs in fp32
  fabricated-tokens  replace every sample that missed full reward by the right answer, with its
                     logprobs and TOPLOC activations honestly computed (only the sampling replay
                     can tell the tokens were not drawn)
  inflated-reward    honest rollouts, every reward claimed as 1
  cherry-pick        honest rollouts on prompts it chose (the easiest of a fixed pool), not the
                     ones assigned to it
  replay             the first batch is honest; every later job answers with that same batch
                     again (committed under the newer version)
  lying-validator    verify jobs answer the opposite of the honest check: bad batches pass, good
                     ones fail with a made-up reason and evidence hash

Rollouts of every generating kind are signed and committed by the (honest) core as usual, so
validators see exactly what a cheater would publish. Whoever starts a dishonest job process passes a
`Cheater` to its `JobWorker` (node/jobrunner.py, simulator/realjobs.py); the honest job code never
imports this module.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import replace

import torch

from gossip.hashing import blake2b256
from proofs import adversaries, toploc
from proofs.checks import forward_many
from swarm import jobs
from trainer.jobenv import task_env

CHERRY_POOL = 256  # cherry-pick chooses among prompt indices 0..CHERRY_POOL-1
OTHER_MODEL_NOISE = 0.02
CHECKING = frozenset({"lying-validator", "rubber-stamp"})  # cheats in verify jobs; they generate honestly
GENERATING = frozenset(jobs.MALICIOUS) - CHECKING


class Cheater:
    def __init__(self, kind: str) -> None:
        if kind not in jobs.MALICIOUS:
            raise ValueError(f"unknown malicious kind {kind!r}; kinds are {', '.join(jobs.MALICIOUS)}")
        self.kind = kind
        self._models: OrderedDict[tuple, torch.nn.Module] = OrderedDict()  # (kind, weights) -> cheap model
        self._first: dict[str, jobs.GenerateResult] = {}  # task -> the batch replay keeps sending

    @property
    def generates(self) -> bool:
        return self.kind in GENERATING

    # ---------------------------------------------------------------- generate

    def generate(self, honest, job: jobs.GenerateJob) -> jobs.GenerateResult:
        """`honest` is the job process's trainer/generatejob.py `GenerateJobs`: its helpers do the
        parts a cheater keeps honest."""
        task_id = job.task.task_id
        model, tokenizer = honest.models.policy(job.task.model, job.weights)
        if self.kind == "replay" and task_id in self._first:
            return self._first[task_id]
        indices = tuple(job.prompt_indices)
        if self.kind == "cherry-pick":
            indices = self._easiest(job, len(indices))
        sampler = self._cheap_model(model, bytes(job.weights)) if self.kind in (
            "other-model", "low-precision", "int8-quant", "laundered") else model
        samples = honest.rollouts(job, sampler, tokenizer, indices)
        if self.kind == "laundered":
            samples = _recompute(model, samples)
        elif self.kind == "fabricated-tokens":
            samples = self._fabricate(honest, job, model, tokenizer, samples)
        elif self.kind == "inflated-reward":
            samples = [replace(s, reward=1.0) for s in samples]
        result = honest.store_batch(job, indices, samples)
        if self.kind == "replay":
            self._first[task_id] = replace(result, prompt_indices=indices)
        return result

    def _cheap_model(self, model, weights: bytes):
        key = (self.kind, weights)
        if key not in self._models:
            if self.kind == "other-model":
                cheap = copy.deepcopy(model)
                gen = torch.Generator().manual_seed(int.from_bytes(weights[:4], "big"))
                with torch.no_grad():
                    for p in cheap.parameters():
                        p.mul_(1 + OTHER_MODEL_NOISE * torch.randn(p.shape, generator=gen))
            elif self.kind == "int8-quant":
                cheap = adversaries.int8_copy(model)
            else:  # low-precision, laundered
                cheap = adversaries.bf16_copy(model)
            self._models[key] = cheap.eval()
            while len(self._models) > 2:
                self._models.popitem(last=False)
        return self._models[key]

    def _easiest(self, job: jobs.GenerateJob, count: int) -> tuple[int, ...]:
        """The `count` prompts of the pool with the shortest answers (for digit sorting: the fewest
        digits), a different slice each batch so the batches are not identical."""
        env = task_env(job.task)
        pool = sorted(range(CHERRY_POOL), key=lambda i: (len(env.prompt(i, "train").answer), i))
        start = (job.version * 7 + sum(job.prompt_indices)) % (CHERRY_POOL // 2)
        return tuple(sorted(pool[start:start + count]))

    def _fabricate(self, honest, job, model, tokenizer, samples):
        env = task_env(job.task)
        eos = tokenizer.eos_token_id
        failed = [k for k, s in enumerate(samples) if s.reward < 1.0]
        answers = {k: list(tokenizer(env.prompt(samples[k].prompt_index, "train").answer,
                                     add_special_tokens=False)["input_ids"]) + [eos] for k in failed}
        prefills = forward_many(model, [(samples[k].prompt_ids, answers[k]) for k in failed])
        out = list(samples)
        for k, (logits, hidden) in zip(failed, prefills):
            ids = answers[k]
            logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            reward = honest.score(job, samples[k].prompt_index, ids, True)
            out[k] = replace(samples[k], token_ids=tuple(ids), logprobs=logp.numpy().astype("float32"),
                             finished=True, reward=float(reward), proof=toploc.build_proof(hidden))
        return out

    # ---------------------------------------------------------------- verify

    def lie(self, job: jobs.VerifyJob, honest: jobs.VerifyResult) -> jobs.VerifyResult:
        if self.kind == "rubber-stamp":  # a colluder: passes whatever it is asked about
            return jobs.VerifyResult(True, "ok", b"", "")
        if self.kind != "lying-validator":
            return honest
        if not honest.passed:
            return jobs.VerifyResult(True, "ok", b"", "")
        made_up = blake2b256(b"lie" + bytes(job.blob))
        return jobs.VerifyResult(False, "toploc", made_up, '{"chunk":0,"sample":0}')


def _recompute(model, samples):
    """Keep the tokens, recompute logprobs and proofs with `model` (the laundering step)."""
    out = []
    for s, (logits, hidden) in zip(samples, forward_many(model, [(s.prompt_ids, s.token_ids) for s in samples])):
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids)[:, None])[:, 0]
        out.append(replace(s, logprobs=logp.numpy().astype("float32"), proof=toploc.build_proof(hidden)))
    return out
