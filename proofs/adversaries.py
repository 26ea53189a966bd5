"""Honest and malicious rollout batches, for tests, calibration and bench/detection.py.

Each maker returns `(samples, claim)` exactly as a worker would publish them: a list of `Sample`
(the fields `proofs.checks` reads) and the `Claim` its commitment would sign. The cheats are the
rational ones, each aimed at a different check:

  other-model       generate with a different model (cheaper, or just wrong weights)
  low-precision     generate with a bf16 (or int8 fake-quantised) copy while the task says fp32
  laundered         sample in bf16, then recompute logprobs and proofs with the fp32 model, so
                    only the tokens themselves still carry the bf16 sampling: caught by the replay
                    where a seeded draw flips, so per batch with a probability growing with its size
  fabricated-tokens replace failed samples by chosen tokens (the right answer) and compute their
                    logprobs and activations honestly, so TOPLOC and the logprob check pass
  inflated-reward   honest generation, rewards claimed as 1
  cherry-pick       honest generation on prompts the worker chose instead of its assigned slice
  replay            an earlier batch submitted again (same content, or under a newer version)

Models and the sampling backend are passed in (anything with `TorchBackend.generate`'s contract),
since proofs/ does not import trainer/.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from gossip.assignment import assign_prompts, sample_seed
from proofs import toploc
from proofs.checks import Claim, Rules, forward

KINDS = ("other-model", "low-precision", "int8-quant", "laundered", "fabricated-tokens", "inflated-reward",
         "cherry-pick", "replay")


@dataclass
class Sample:
    prompt_index: int
    sample_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    reward: float
    finished: bool
    proof: bytes


def claim_for(samples: Sequence[Sample], worker_key: bytes, version: int, prompts: Sequence[int],
              samples_per_prompt: int) -> Claim:
    return Claim(worker_key, version, tuple(prompts), samples_per_prompt,
                 sum(s.reward for s in samples) / len(samples), sum(len(s.token_ids) for s in samples))


def assigned(rules: Rules, worker_key: bytes, version: int, batch: int) -> list[int]:
    k = rules.prompts_per_commit
    return assign_prompts(rules.task_id, worker_key, version, (batch + 1) * k, rules.n_prompts)[batch * k:]


def generate(backend, rules: Rules, prompt_ids: Callable[[int], Sequence[int]],
             reward: Callable[[int, Sequence[int], bool], float], worker_key: bytes, version: int,
             prompts: Sequence[int], samples_per_prompt: int) -> list[Sample]:
    """What an honest worker job does: seeded sampling, rewards, one TOPLOC proof per completion."""
    seeds = [sample_seed(rules.task_id, worker_key, version, p, k) for p in prompts for k in range(samples_per_prompt)]
    done = backend.generate([list(prompt_ids(p)) for p in prompts], samples_per_prompt, rules.max_new_tokens,
                            rules.temperature, seeds)
    out = []
    for j, c in enumerate(done):
        p = prompts[j // samples_per_prompt]
        out.append(Sample(p, j % samples_per_prompt, list(c.prompt_ids), list(c.token_ids),
                          [float(x) for x in c.logprobs], float(reward(p, c.token_ids, c.finished)),
                          c.finished, toploc.build_proof(c.hidden)))
    return out


def honest(backend, rules, prompt_ids, reward, worker_key, version, batch, samples_per_prompt):
    prompts = assigned(rules, worker_key, version, batch)
    samples = generate(backend, rules, prompt_ids, reward, worker_key, version, prompts, samples_per_prompt)
    return samples, claim_for(samples, worker_key, version, prompts, samples_per_prompt)


def fabricate(model, samples: list[Sample], choose: Callable[[int], Sequence[int]], reward, eos_id: int,
              only_failed: bool = True) -> list[Sample]:
    """Replace every sample that earned less than full reward (every sample, with only_failed off)
    by the cheater's chosen tokens, with logprobs and activations honestly computed for them
    (TOPLOC and the logprob check then pass)."""
    out = []
    for s in samples:
        if only_failed and s.reward >= 1.0:
            out.append(s)
            continue
        ids = list(choose(s.prompt_index))
        logits, hidden = forward(model, s.prompt_ids, ids)
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        finished = ids[-1] == eos_id
        out.append(replace(s, token_ids=ids, logprobs=[float(x) for x in logp], finished=finished,
                           reward=float(reward(s.prompt_index, ids, finished)), proof=toploc.build_proof(hidden)))
    return out


def launder(model, samples: list[Sample]) -> list[Sample]:
    """Keep the (cheaply sampled) tokens, recompute their logprobs and proofs with `model`."""
    out = []
    for s in samples:
        logits, hidden = forward(model, s.prompt_ids, s.token_ids)
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids)[:, None])[:, 0]
        out.append(replace(s, logprobs=[float(x) for x in logp], proof=toploc.build_proof(hidden)))
    return out


def inflate(samples: list[Sample]) -> list[Sample]:
    return [replace(s, reward=1.0) for s in samples]


def tamper_last_token(model, s: Sample, vocab_size: int, eos_id: int) -> Sample:
    """Change the final token of an unfinished sample to another non-eos token and claim its honest
    logprob: invisible to TOPLOC, caught only by the sampling replay."""
    if s.finished:
        raise ValueError("tamper an unfinished sample: changing eos would also change its length rule")
    ids = list(s.token_ids)
    ids[-1] = next(t for t in range(vocab_size) if t not in (ids[-1], eos_id))
    logits, _ = forward(model, s.prompt_ids, ids)
    logp = torch.log_softmax(logits, -1)[-1, ids[-1]]
    return replace(s, token_ids=ids, logprobs=s.logprobs[:-1] + [float(logp)], finished=False)


def bf16_copy(model):
    """The same weights rounded to bf16 (generation then runs in bf16)."""
    return copy.deepcopy(model).to(torch.bfloat16)


@torch.no_grad()
def int8_copy(model):
    """Per-output-row symmetric int8 fake quantisation of every linear weight (fp32 compute)."""
    q = copy.deepcopy(model)
    for m in q.modules():
        if isinstance(m, torch.nn.Linear):
            w = m.weight
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
            m.weight.copy_((w / scale).round().clamp(-127, 127) * scale)
    return q
