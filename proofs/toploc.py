"""TOPLOC proofs over the final-norm hidden states of generated tokens (wraps `toploc` 0.1.6).

A worker commits, per completion, to the top-128 (by magnitude) bf16 activations of each chunk of
32 generated positions: one degree-127 polynomial per chunk, serialised by toploc as a 2-byte
modulus plus 128 2-byte coefficients = 258 bytes per 32 tokens. The proof for a completion is the
concatenation of its chunk proofs in order (its length alone says how many chunks it covers).

A validator recomputes the hidden states with one prefill over the *committed* token ids (never
re-tokenised text) and asks toploc, chunk by chunk, how many of its own top-k values disagree with
the proof in exponent (`exp_mismatches`, out of 128) and by how many mantissa ulps the others
differ (`mant_err_mean`, `mant_err_median`). A chunk passes when all three are within the model's
calibrated thresholds (`proofs/calibration/<model>.json`, see `thresholds_for`).

Why the wrapper checks what it checks:
  - toploc's builder swallows errors and returns *null proofs* (modulus 0, zero coefficients); fp32
    input is one such silent failure. A null proof proves nothing, so `build_proof` refuses to
    return one and `parse_proof` rejects any chunk with modulus 0.
  - toploc's C++ verifier computes `index % modulus` and spawns threads: modulus 0 would kill the
    validator with SIGFPE and a wrong chunk count throws inside a thread (std::terminate). Every
    proof is therefore parsed and bounded here (exact length, modulus range) before toploc sees it.
  - Position t's hidden state depends on tokens < t only, so the last token is invisible to TOPLOC
    and arbitrary tokens with honestly computed activations pass: `proofs.sampling` covers that.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

CHUNK = 32  # generated positions per proof polynomial (toploc's decode_batching_size)
TOPK = 128  # activations committed per chunk
CHUNK_BYTES = 2 + 2 * TOPK  # 258: modulus + coefficients, big-endian uint16
MAX_MODULUS = 65497  # toploc searches injective moduli downward from here
MIN_MODULUS = 1 << 15  # toploc's Python builder never goes below; anything lower is forged

CALIBRATION_DIR = Path(__file__).with_name("calibration")


class ProofError(ValueError):
    """A proof that cannot be checked at all. `code` is a stable verdict reason."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def n_chunks(n_tokens: int) -> int:
    return math.ceil(n_tokens / CHUNK)


def proof_size(n_tokens: int) -> int:
    """Bytes of a valid proof for a completion of `n_tokens` generated tokens."""
    return n_chunks(n_tokens) * CHUNK_BYTES


def build_proof(hidden: torch.Tensor) -> bytes:
    """Proof bytes for one completion from its final-norm hidden states [n_tokens, hidden_size].

    Cast to bf16 here (toploc interpolates bf16 bit patterns; fp32 silently yields a null proof).
    Raises ProofError when toploc fails, instead of passing a null proof on.
    """
    import toploc

    if hidden.ndim != 2 or hidden.shape[0] == 0:
        raise ProofError("proof-format", f"hidden must be [n_tokens > 0, hidden], got {tuple(hidden.shape)}")
    if hidden.shape[1] < TOPK:
        raise ProofError("proof-format", f"hidden size {hidden.shape[1]} < topk {TOPK}")
    rows = list(hidden.detach().to("cpu", torch.bfloat16).contiguous())
    chunks = toploc.build_proofs_bytes(rows, CHUNK, TOPK, skip_prefill=True)
    if len(chunks) != n_chunks(len(rows)) or any(_modulus(c) == 0 for c in chunks):
        raise ProofError("proof-null", "toploc returned a null proof (see its log for the error)")
    return b"".join(chunks)


def _modulus(chunk: bytes) -> int:
    return int.from_bytes(chunk[:2], "big")


def parse_proof(proof: bytes, n_tokens: int) -> list[bytes]:
    """Split a completion's proof into chunk proofs after checking everything toploc assumes.

    Raises ProofError("proof-format") for a wrong length, ("proof-null") for a null chunk
    (modulus 0) and ("proof-format") for a modulus toploc's builder could not have chosen.
    """
    if not isinstance(proof, (bytes, bytearray)):
        raise ProofError("proof-format", f"proof must be bytes, got {type(proof).__name__}")
    if n_tokens <= 0:
        raise ProofError("proof-format", "a completion with no tokens has nothing to prove")
    want = proof_size(n_tokens)
    if len(proof) != want:
        raise ProofError("proof-format", f"proof is {len(proof)} bytes, {n_tokens} tokens need {want}")
    chunks = [bytes(proof[i:i + CHUNK_BYTES]) for i in range(0, want, CHUNK_BYTES)]
    for j, c in enumerate(chunks):
        m = _modulus(c)
        if m == 0:
            raise ProofError("proof-null", f"chunk {j} is a null proof (modulus 0)")
        if not MIN_MODULUS < m <= MAX_MODULUS:
            raise ProofError("proof-format", f"chunk {j} has modulus {m} outside ({MIN_MODULUS}, {MAX_MODULUS}]")
    return chunks


@dataclass(frozen=True)
class ChunkResult:
    exp_mismatches: int  # of TOPK values, how many differ in exponent
    mant_err_mean: float  # mean |mantissa difference| over the others
    mant_err_median: float


@dataclass(frozen=True)
class ToplocThresholds:
    """A chunk fails when any statistic is above its bound. Loaded from calibration files."""

    max_exp_mismatches: int
    max_mant_err_mean: float
    max_mant_err_median: float

    def chunk_passes(self, r: ChunkResult) -> bool:
        return (r.exp_mismatches <= self.max_exp_mismatches and r.mant_err_mean <= self.max_mant_err_mean
                and r.mant_err_median <= self.max_mant_err_median)


def verify_chunks(proof: bytes, hidden: torch.Tensor) -> list[ChunkResult]:
    """Compare a proof with the validator's own hidden states [n_tokens, H] (from its prefill).

    Raises ProofError for a proof that cannot be checked (see `parse_proof`).
    """
    import toploc

    if hidden.ndim != 2 or hidden.shape[1] < TOPK:
        raise ProofError("proof-format", f"validator hidden states have shape {tuple(hidden.shape)}")
    chunks = parse_proof(proof, hidden.shape[0])
    acts = hidden.detach().to("cpu", torch.bfloat16).contiguous()
    results = toploc.verify_proofs_bytes(acts, chunks, CHUNK, TOPK, skip_prefill=True)
    return [ChunkResult(int(r.exp_mismatches), float(r.mant_err_mean), float(r.mant_err_median)) for r in results]


def verify_many(items: list[tuple[bytes, torch.Tensor]]) -> list[list[ChunkResult]]:
    """`verify_chunks` for many completions: [(proof, hidden [n, H]), ...], same answers, fewer calls.

    toploc's verifier starts a thread per core on every call, which costs more than checking one
    short completion (about 1 ms against 0.2 ms on this machine). Completions of one chunk with the
    same token count n are stacked and checked in one call with n rows per chunk: toploc then sees
    exactly the vectors it sees one by one (zero-padding to 32 rows instead would change top-k tie
    breaking and so the numbers). Longer completions are checked one by one.

    Raises ProofError for a proof that cannot be checked (see `parse_proof`).
    """
    import toploc

    results: list[list[ChunkResult] | None] = [None] * len(items)
    same_length: dict[tuple[int, int], list[int]] = {}  # (tokens, hidden size) -> completions
    for i, (proof, hidden) in enumerate(items):
        if hidden.ndim != 2 or hidden.shape[1] < TOPK:
            raise ProofError("proof-format", f"validator hidden states have shape {tuple(hidden.shape)}")
        parse_proof(proof, hidden.shape[0])
        if hidden.shape[0] <= CHUNK:
            same_length.setdefault((hidden.shape[0], hidden.shape[1]), []).append(i)
    for (n, _), group in sorted(same_length.items()):
        acts = torch.cat([items[i][1].detach().to("cpu", torch.bfloat16) for i in group]).contiguous()
        got = toploc.verify_proofs_bytes(acts, [bytes(items[i][0]) for i in group], n, TOPK, skip_prefill=True)
        for i, r in zip(group, got):
            results[i] = [ChunkResult(int(r.exp_mismatches), float(r.mant_err_mean), float(r.mant_err_median))]
    return [r if r is not None else verify_chunks(*items[i]) for i, r in enumerate(results)]


def first_failing_chunk(results: list[ChunkResult], th: ToplocThresholds) -> int | None:
    return next((j for j, r in enumerate(results) if not th.chunk_passes(r)), None)


def model_key(model: str) -> str:
    """Calibration file stem for a task's model name: 'builtin' for every built-in model
    ('builtin:digit-sort-tiny'), 'smollm2-135m' for SmolLM2-135M, else the name itself."""
    low = model.lower()
    if low.startswith("builtin"):
        return "builtin"
    if "smollm2" in low and "135m" in low:
        return "smollm2-135m"
    return low


def load_calibration(model: str) -> dict:
    """The calibration record of a model (thresholds, measured distributions, rationale).

    Raises FileNotFoundError for a model never calibrated: its thresholds are unknown, and
    guessing would either ban honest workers or let cheaters through.
    """
    path = CALIBRATION_DIR / f"{model_key(model)}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no TOPLOC/sampling calibration for model {model!r} ({path}); "
                                "run `python bench/detection.py --calibrate` for it")
    return json.loads(path.read_text())


def thresholds_for(model: str) -> ToplocThresholds:
    t = load_calibration(model)["thresholds"]["toploc"]
    return ToplocThresholds(int(t["max_exp_mismatches"]), float(t["max_mant_err_mean"]),
                            float(t["max_mant_err_median"]))
