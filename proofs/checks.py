"""The validator's pipeline: one decoded rollout batch + the validator's model -> a verdict.

`check_batch` runs the checks cheapest first and stops at the first failure, so a cheater costs a
validator as little as possible and the verdict names one stable reason:

  schema      a sample is malformed (types, order, lengths, logprobs/proof present)
  claim       the blob disagrees with its signed commitment (prompts, sample count, tokens, reward)
  limits      token ids out of the vocabulary, too many tokens, eos misplaced, prompt too long
  duplicate   the batch's content was already submitted (a replay)
  assignment  the prompt list is not one of the worker's hash-assigned slices for that version
  prompt      a sample's prompt ids are not the environment's prompt for its index
  reward      a claimed reward differs from the environment checker's
  proof-null / proof-format / toploc    TOPLOC (see proofs.toploc)
  logprob / sampling / implausible      under the validator's logits (see proofs.sampling)

Each verdict carries its evidence (reason, which sample, chunk or token position failed) and
`evidence_hash` = blake2b-256 over the canonical JSON of that evidence, bound to the commitment
(worker key, version, prompt list), so any peer can re-run the check and compare hashes. The
measured numbers (errors, z, gaps) ride beside it in `numbers`, outside the hash, because honest
hardware differs in them by float noise.

Nothing here imports trainer/ (it sits above proofs/): the job passes in the model plus two
callables from its environment, `prompt_ids(index)` and `reward(index, token_ids, finished)`.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from dataclasses import dataclass, field
from typing import Callable, Collection, Protocol, Sequence

import torch

from gossip import assignment
from gossip.assignment import sample_seed
from gossip.hashing import blake2b256
from proofs import sampling, toploc

OK = "ok"


class SampleLike(Protocol):
    """One completion as a decoded batch holds it (trainer/batch_codec.py); prompt-major order."""

    prompt_index: int
    sample_index: int
    prompt_ids: Sequence[int]
    token_ids: Sequence[int]
    logprobs: Sequence[float]  # raw (temperature-1) logprob per token, float32
    reward: float
    finished: bool
    proof: bytes


@dataclass(frozen=True)
class Claim:
    """What the signed rollout commitment says about the batch."""

    worker_key: bytes
    version: int
    prompt_indices: tuple[int, ...]
    samples_per_prompt: int
    mean_reward: float
    num_tokens: int


@dataclass(frozen=True)
class Rules:
    """The task's settings a validator checks against (task announcement + task params)."""

    task_id: str
    n_prompts: int
    prompts_per_commit: int
    max_batches_per_version: int
    max_new_tokens: int
    temperature: float
    eos_id: int
    vocab_size: int
    max_prompt_tokens: int = 1024
    replay: bool = True  # workers sample with the replayable Gumbel sampler (TorchBackend)
    samples_per_prompt: int | None = None  # the task's group size, when it fixes one


@dataclass
class Validator:
    """The validator's own copy of the policy for the claimed version, and its environment."""

    model: torch.nn.Module
    prompt_ids: Callable[[int], Sequence[int]]
    reward: Callable[[int, Sequence[int], bool], float]
    toploc: toploc.ToplocThresholds
    sampling: sampling.SamplingThresholds

    @classmethod
    def calibrated(cls, model, model_name: str, prompt_ids, reward) -> "Validator":
        """Thresholds from proofs/calibration/ for the task's model name."""
        return cls(model, prompt_ids, reward, toploc.thresholds_for(model_name),
                   sampling.thresholds_for(model_name))


@dataclass(frozen=True)
class Verdict:
    """`evidence` holds only discrete, reproducible facts (reason, commitment, which sample, chunk
    or position failed), so a validator on other hardware that re-runs the check gets the same
    `evidence_hash`; the measured numbers, which differ by float noise, are in `numbers`."""

    passed: bool
    reason: str
    evidence: dict = field(repr=False)
    evidence_hash: bytes = b""
    numbers: dict = field(default_factory=dict, repr=False)

    @property
    def detail(self) -> str:
        """A short human line for the gossip verdict's `detail` field (at most 256 chars)."""
        where = {k: v for k, v in self.evidence.items() if k not in ("commitment", "reason")}
        return json.dumps({**where, **self.numbers}, sort_keys=True, separators=(",", ":"))[:256]


def canonical(evidence: dict) -> bytes:
    return json.dumps(evidence, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _verdict(claim: Claim, reason: str, numbers: dict | None = None, **where) -> Verdict:
    evidence = _finite({"reason": reason, "commitment": {"worker": claim.worker_key.hex(), "version": claim.version,
                                                         "prompts": list(claim.prompt_indices)}, **where})
    digest = blake2b256(canonical(evidence))
    return Verdict(reason == OK, reason, evidence, digest, _finite(numbers or {}))


def rejected(claim: Claim, reason: str, numbers: dict | None = None, **where) -> Verdict:
    """A failed verdict for a check made outside `check_batch` (a blob that does not decode, a batch
    header that differs from its commitment), with the same evidence format."""
    return _verdict(claim, reason, numbers, **where)


def _finite(x):
    """Evidence as strict JSON: non-finite floats (a NaN logprob, toploc's 2**64 'no match') become
    strings, so every peer hashes the same bytes."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def content_digest(samples: Sequence[SampleLike]) -> bytes:
    """blake2b-256 over the batch's content (prompts, tokens, logprobs, rewards, proofs), independent
    of the commitment wrapping it: a validator keeps these to spot a batch submitted twice."""
    h = hashlib.blake2b(digest_size=32, person=b"swarm-batch-v1")
    for s in samples:
        h.update(canonical({"p": list(map(int, s.prompt_ids)), "t": list(map(int, s.token_ids)),
                            "r": float(s.reward), "i": int(s.prompt_index), "k": int(s.sample_index)}))
        h.update(torch.as_tensor(s.logprobs, dtype=torch.float32).numpy().tobytes())
        h.update(bytes(s.proof))
    return h.digest()


@torch.no_grad()
def forward(model, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits float32 [n, V], final-norm hidden bf16 [n, H]) at the positions that produced
    `token_ids`, from one prefill over prompt + tokens (the committed ids, never re-tokenised)."""
    return forward_many(model, [(prompt_ids, token_ids)])[0]


@torch.no_grad()
def forward_many(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
                 max_batch_tokens: int = 4096) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`forward` for many (prompt_ids, token_ids) pairs in few batched prefills.

    Sequences are right-padded (causal attention: padding after a sequence cannot change it), and
    the LM head runs only on the generated positions, so a batch of a large vocabulary stays small.
    Batching shifts results by float noise only; the calibrated thresholds absorb it. Repeated
    sequences are computed once and share the result: a GRPO group often samples the same completion
    many times (most of 16, once the digit-sort policy is good), and every check redoes this prefill.
    """
    unique: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    index = [unique.setdefault((tuple(p), tuple(t)), len(unique)) for p, t in pairs]
    if len(unique) < len(pairs):
        results = forward_many(model, list(unique), max_batch_tokens)
        return [results[k] for k in index]
    device = next(model.parameters()).device
    head = model.get_output_embeddings()
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    out: list = [None] * len(pairs)
    start = 0
    while start < len(order):
        width = len(pairs[order[start]][0]) + len(pairs[order[start]][1])
        end = start + 1
        while end < len(order):
            w = len(pairs[order[end]][0]) + len(pairs[order[end]][1])
            if w * (end + 1 - start) > max_batch_tokens:
                break
            width, end = w, end + 1
        group = order[start:end]
        ids = torch.zeros((len(group), width), dtype=torch.long)
        for r, i in enumerate(group):
            seq = list(pairs[i][0]) + list(pairs[i][1])
            ids[r, :len(seq)] = torch.tensor(seq)
        hidden = model.model(input_ids=ids.to(device)).last_hidden_state  # final-norm output
        for r, i in enumerate(group):
            p, n = len(pairs[i][0]), len(pairs[i][1])
            h = hidden[r, p - 1:p - 1 + n]
            out[i] = (head(h).float().cpu(), h.to(torch.bfloat16).cpu())
        start = end
    return out


def assigned_slice(rules: Rules, worker_key: bytes, version: int, prompts: tuple[int, ...]) -> int | None:
    """Batch number b such that `prompts` is slice b of the worker's hash-assigned prompts for `version`."""
    return assignment.assigned_slice(rules.task_id, worker_key, version, prompts, rules.prompts_per_commit,
                                      rules.max_batches_per_version, rules.n_prompts)


def _schema(samples, claim: Claim, rules: Rules) -> tuple[str, dict] | None:
    spp = claim.samples_per_prompt
    if rules.samples_per_prompt is not None and spp != rules.samples_per_prompt:
        return "claim", {"samples_per_prompt": spp, "expected": rules.samples_per_prompt}
    if len(samples) != len(claim.prompt_indices) * spp or not samples:
        return "claim", {"samples": len(samples), "expected": len(claim.prompt_indices) * spp}
    for i, s in enumerate(samples):
        try:
            ok = (isinstance(s.proof, (bytes, bytearray)) and len(s.token_ids) >= 1
                  and len(s.logprobs) == len(s.token_ids) and isinstance(s.finished, bool)
                  and math.isfinite(float(s.reward)) and len(s.prompt_ids) >= 1
                  and all(operator.index(t) == t for t in list(s.token_ids) + list(s.prompt_ids))
                  and torch.as_tensor(s.logprobs, dtype=torch.float32).shape == (len(s.token_ids),))
        except (TypeError, ValueError, AttributeError):
            ok = False
        if not ok:
            return "schema", {"sample": i}
        if (s.prompt_index, s.sample_index) != (claim.prompt_indices[i // spp], i % spp):
            return "claim", {"sample": i, "prompt_index": s.prompt_index, "sample_index": s.sample_index}
    tokens = sum(len(s.token_ids) for s in samples)
    mean = sum(float(s.reward) for s in samples) / len(samples)
    if tokens != claim.num_tokens or abs(mean - claim.mean_reward) > 1e-6:
        return "claim", {"tokens": tokens, "claimed_tokens": claim.num_tokens, "mean_reward": mean,
                         "claimed_mean_reward": claim.mean_reward}
    for i, s in enumerate(samples):
        ids, n = list(s.token_ids), len(s.token_ids)
        bad = (n > rules.max_new_tokens or len(s.prompt_ids) > rules.max_prompt_tokens
               or any(not 0 <= t < rules.vocab_size for t in ids + list(s.prompt_ids))
               or rules.eos_id in ids[:-1] or s.finished != (ids[-1] == rules.eos_id)
               or (not s.finished and n != rules.max_new_tokens))
        if bad:
            return "limits", {"sample": i, "tokens": n, "finished": s.finished}
    return None


def check_batch(samples: Sequence[SampleLike], claim: Claim, rules: Rules, validator: Validator,
                seen: Collection[bytes] = ()) -> Verdict:
    """Every check of one committed batch; `seen` holds content digests of batches checked before."""
    bad = _schema(samples, claim, rules)
    if bad:
        return _verdict(claim, bad[0], **bad[1])  # all discrete: counts and indices
    digest = content_digest(samples)
    if digest in seen:
        return _verdict(claim, "duplicate", content=digest.hex())
    batch = assigned_slice(rules, claim.worker_key, claim.version, tuple(claim.prompt_indices))
    if batch is None:
        return _verdict(claim, "assignment")
    # A batch holds each prompt samples_per_prompt times and a GRPO group repeats completions, so
    # the environment is asked once per distinct prompt and per distinct completion.
    prompts: dict[int, list[int]] = {}
    rewards: dict[tuple, float] = {}
    for i, s in enumerate(samples):
        if s.prompt_index not in prompts:
            prompts[s.prompt_index] = list(validator.prompt_ids(s.prompt_index))
        if list(s.prompt_ids) != prompts[s.prompt_index]:
            return _verdict(claim, "prompt", sample=i)
        key = (s.prompt_index, tuple(s.token_ids), bool(s.finished))
        if key not in rewards:
            rewards[key] = float(validator.reward(s.prompt_index, list(s.token_ids), s.finished))
        expected = rewards[key]
        if abs(expected - float(s.reward)) > 1e-6:
            return _verdict(claim, "reward", {"claimed": float(s.reward), "recomputed": expected}, sample=i)
    for i, s in enumerate(samples):
        try:
            toploc.parse_proof(s.proof, len(s.token_ids))
        except toploc.ProofError as e:
            return _verdict(claim, e.code, {"error": str(e)}, sample=i)

    evidence, worst = [], toploc.ChunkResult(0, 0.0, 0.0)
    prefills = forward_many(validator.model, [(s.prompt_ids, s.token_ids) for s in samples])
    # repeated completions share their prefill (forward_many) and carry the same proof: TOPLOC
    # compares each distinct (proof, hidden states) pair once
    distinct: dict[tuple[bytes, int], int] = {}
    which = [distinct.setdefault((bytes(s.proof), id(prefills[i][1])), i) for i, s in enumerate(samples)]
    checked = dict(zip(distinct.values(), toploc.verify_many([(samples[i].proof, prefills[i][1])
                                                              for i in distinct.values()])))
    replays = sampling.sample_evidence_many(
        [(prefills[i][0], list(s.token_ids), s.logprobs,
          sample_seed(rules.task_id, claim.worker_key, claim.version, s.prompt_index, s.sample_index))
         for i, s in enumerate(samples)], rules.temperature)
    for i, s in enumerate(samples):
        chunks = checked[which[i]]
        j = toploc.first_failing_chunk(chunks, validator.toploc)
        if j is not None:
            c = chunks[j]
            return _verdict(claim, "toploc", {"exp_mismatches": c.exp_mismatches, "mant_err_mean": c.mant_err_mean,
                                              "mant_err_median": c.mant_err_median}, sample=i, chunk=j)
        worst = toploc.ChunkResult(max([worst.exp_mismatches] + [c.exp_mismatches for c in chunks]),
                                   max([worst.mant_err_mean] + [c.mant_err_mean for c in chunks]),
                                   max([worst.mant_err_median] + [c.mant_err_median for c in chunks]))
        ev = replays[i]
        why = sampling.sample_failure(ev, validator.sampling, rules.replay)
        if why == "logprob":
            return _verdict(claim, why, {"logprob_err": ev.max_logprob_err}, sample=i, position=ev.logprob_err_at)
        if why:
            far = [m for m in ev.mismatches if m[3] > validator.sampling.max_tie_gap] or list(ev.mismatches)
            return _verdict(claim, why, {"mismatches": [list(m) for m in ev.mismatches[:8]]}, sample=i,
                            position=far[0][0], claimed=far[0][1], replayed=far[0][2])
        evidence.append(ev)
    z = sampling.batch_z(evidence)
    if not abs(z) <= validator.sampling.max_abs_z:
        return _verdict(claim, "implausible", {"z": z, "surprisal": sum(e.surprisal for e in evidence),
                                               "entropy": sum(e.entropy for e in evidence)})
    return _verdict(claim, OK, {"z": z, "max_logprob_err": max(e.max_logprob_err for e in evidence),
                                "worst_chunk": [worst.exp_mismatches, worst.mant_err_mean, worst.mant_err_median]},
                    batch=batch, content=digest.hex())
