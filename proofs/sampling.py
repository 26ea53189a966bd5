"""Were these tokens *sampled from the model*? Checks under the validator's own logits.

TOPLOC binds activations to token ids but not token ids to the model's distribution: a worker can
choose tokens (say, the right answer) and compute honest activations for them, and the last token
has no activation after it at all. So for every generated position (the last included) the
validator takes its own logits from one prefill and checks three things:

1. Logprobs: the claimed raw (temperature-1) logprob of each token equals log_softmax(logits) at
   that token within `max_logprob_err` times the position's logit scale max(1, max_j |logit_j|).
   GRPO's importance ratios use these numbers, and a worker running another precision or model
   cannot match them. The bound is relative because honest float noise is: logits computed in
   another order differ by a few ulps of their own size, and a trained policy's logits are ten
   times the base model's (the built-in model's honest errors went from 7e-7 to 1.4e-5, a constant
   1.6-2.4e-6 of the largest logit; an absolute bound calibrated on the base model banned an
   honest worker 1,100 versions into a run).
2. Replay: workers sample with Gumbel-max from a per-sample `torch.Generator` seeded with
   `gossip.assignment.sample_seed(task, worker, version, prompt, sample)`: token t is
   argmax(logits_t / T + g_t) where g_t is the generator's t-th Gumbel vector. The validator
   regenerates g_t from the seed it computes itself and requires the same argmax. Its logits differ
   from the worker's only by float noise (KV-cache vs full prefill, batch shapes), so a mismatch
   is excused only as a near-tie: the claimed token's score is within `max_tie_gap` (times the logit
   scale, as above) of the winner's, and at most `max_tie_mismatches` such ties per sample. Any
   other mismatch means the token was not drawn with that seed from that model.
3. Implausibility (backstop when replay is off, e.g. vLLM's own sampler): over a whole batch, the
   total surprisal -log p_T(x_t) of the tokens is compared with its expectation sum(H_t) under
   honest sampling at temperature T; z = (sum s - sum H) / sqrt(sum Var) beyond `max_abs_z` is
   rejected. Cherry-picked likely tokens give large negative z, noise tokens large positive z.

All thresholds come from `proofs/calibration/<model>.json` (see `thresholds_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from proofs.toploc import load_calibration


def gumbel_noise(generator: torch.Generator, vocab_size: int) -> torch.Tensor:
    """Next Gumbel(0, 1) vector from a per-sample generator (CPU, float32).

    Bit-for-bit the draw of `trainer.inference.gumbel_noise` (a test holds them equal); repeated
    here because proofs/ sits below trainer/ in the import order.
    """
    return gumbel_of_uniforms(torch.rand(vocab_size, generator=generator, dtype=torch.float32))


@dataclass(frozen=True)
class SamplingThresholds:
    max_logprob_err: float  # |claimed - recomputed| raw logprob over the logit scale, any token
    max_tie_gap: float  # score gap (logits/T units, over the logit scale) under which a mismatch is a near-tie
    max_tie_mismatches: int  # near-tie mismatches allowed per sample
    max_abs_z: float  # batch surprisal z-score bound


def thresholds_for(model: str) -> SamplingThresholds:
    t = load_calibration(model)["thresholds"]["sampling"]
    return SamplingThresholds(float(t["max_logprob_err"]), float(t["max_tie_gap"]),
                              int(t["max_tie_mismatches"]), float(t["max_abs_z"]))


@dataclass(frozen=True)
class SampleEvidence:
    """Per-sample numbers (what calibration records and what a failing verdict publishes)."""

    max_logprob_err: float  # the largest |claimed - recomputed| logprob over its position's logit scale
    logprob_err_at: int  # position of the largest logprob error
    mismatches: tuple[tuple[int, int, int, float], ...]  # (position, claimed, replayed, gap over the scale)
    surprisal: float  # sum over tokens of -log p_T(token)
    entropy: float  # sum over tokens of H(p_T)
    variance: float  # sum over tokens of Var(-log p_T)


def sample_evidence(logits: torch.Tensor, token_ids: list[int], claimed_logprobs, seed: int,
                    temperature: float) -> SampleEvidence:
    """Compare one completion with the validator's logits [n, V] at the positions producing it."""
    return sample_evidence_many([(logits, token_ids, claimed_logprobs, seed)], temperature)[0]


# Samples whose logits together hold more elements than this are compared in several groups, so a
# large vocabulary (SmolLM2: 49,152) never needs one float64 copy of a whole batch's logits.
GROUP_ELEMENTS = 1 << 22


def sample_evidence_many(items, temperature: float) -> list[SampleEvidence]:
    """`sample_evidence` for many completions [(logits [n, V], token_ids, claimed, seed), ...].

    Same evidence, computed over groups of completions at once: a check of the built-in model
    compared each of a batch's 64 short completions with some 45 small tensor operations plus six
    per token for its Gumbel noise, which cost more than the prefill itself. Each completion still
    replays its own generator: one draw of [n, V] uniforms gives bit-for-bit the n per-token draws
    of `gumbel_noise` (a test holds them equal), and the Gumbel transform is elementwise. Sums over
    a completion's tokens are exactly rounded (math.fsum), so a completion's numbers do not depend
    on which others share its group.
    """
    out: list[SampleEvidence] = []
    group: list = []
    size = 0
    for logits, token_ids, claimed, seed in items:
        n = len(token_ids)
        if logits.ndim != 2 or logits.shape[0] != n:
            raise ValueError(f"logits {tuple(logits.shape)} do not cover {n} tokens")
        claimed = torch.as_tensor(claimed, dtype=torch.float32).reshape(-1)
        if claimed.shape[0] != n:
            raise ValueError(f"{claimed.shape[0]} logprobs for {n} tokens")
        if group and size + logits.numel() > GROUP_ELEMENTS:
            out += _evidence_group(group, temperature)
            group, size = [], 0
        group.append((logits, list(token_ids), claimed, seed))
        size += logits.numel()
    if group:
        out += _evidence_group(group, temperature)
    return out


def _evidence_group(group, temperature: float) -> list[SampleEvidence]:
    lengths = [len(tokens) for _, tokens, _, _ in group]
    logits = torch.cat([lg.detach().float().cpu() for lg, _, _, _ in group])
    token_list = [t for _, tokens, _, _ in group for t in tokens]
    tokens = torch.tensor(token_list, dtype=torch.long)
    claimed = torch.cat([c for _, _, c, _ in group])
    raw = torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]
    scale = logits.abs().amax(-1).clamp_min(1.0)  # honest float noise grows with the logits (see 1.)
    err = (claimed - raw).abs() / scale
    err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err).tolist()  # NaN claims fail

    if temperature > 0:
        uniforms = torch.cat([torch.rand((n, logits.shape[1]), generator=torch.Generator().manual_seed(int(seed)),
                                         dtype=torch.float32) for n, (_, _, _, seed) in zip(lengths, group)])
        scores = logits / temperature + gumbel_of_uniforms(uniforms)
    else:
        scores = logits
    replay = scores.argmax(-1)
    gaps = (scores.gather(1, replay[:, None])[:, 0] - scores.gather(1, tokens[:, None])[:, 0]) / scale
    wrong = set((replay != tokens).nonzero()[:, 0].tolist())
    replayed, gap_list = (replay.tolist(), gaps.tolist()) if wrong else ([], [])

    per_token = None
    if temperature > 0:
        logp = torch.log_softmax(logits.double() / temperature, -1)
        p = logp.exp()
        h = -(p * logp).sum(-1)
        var = (p * logp * logp).sum(-1) - h * h
        per_token = ((-logp.gather(1, tokens[:, None])[:, 0]).tolist(), h.tolist(), var.clamp_min(0).tolist())

    out, start = [], 0
    for n in lengths:
        span = range(start, start + n)
        at = max(range(n), key=lambda t: err[start + t])  # the first largest error, as argmax
        mismatches = tuple((t, token_list[start + t], replayed[start + t], gap_list[start + t])
                           for t in range(n) if start + t in wrong)
        sums = [math.fsum(values[k] for k in span) for values in per_token] if per_token else [0.0, 0.0, 0.0]
        out.append(SampleEvidence(err[start + at], at, mismatches, *sums))
        start += n
    return out


def gumbel_of_uniforms(u: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) from uniforms, elementwise (the transform of `gumbel_noise`)."""
    return -torch.log(-torch.log(u.clamp_min(1e-20)))


def sample_failure(ev: SampleEvidence, th: SamplingThresholds, replay: bool = True) -> str | None:
    """Reason code when one sample fails ('logprob' or 'sampling'), else None."""
    if not ev.max_logprob_err <= th.max_logprob_err:
        return "logprob"
    if replay:
        if any(gap > th.max_tie_gap for _, _, _, gap in ev.mismatches):
            return "sampling"
        if len(ev.mismatches) > th.max_tie_mismatches:
            return "sampling"
    return None


def batch_z(evidence: list[SampleEvidence]) -> float:
    """Surprisal z-score of a batch (0 when there is no randomness to test, e.g. greedy)."""
    var = sum(e.variance for e in evidence)
    if var <= 1e-12:
        return 0.0
    return (sum(e.surprisal for e in evidence) - sum(e.entropy for e in evidence)) / math.sqrt(var)
