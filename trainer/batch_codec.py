"""The rollout batch blob: what a worker stores and a trainer (or validator) fetches by hash.

Wire form: one msgpack map, exact keys, strict types, every container capped, so a blob from the
network either decodes into a well-formed `RolloutBatch` or raises `BatchError` with the reason:

    {"v": 1, "kind": "rollout-batch", "task_id": str, "version": int, "worker_key": bytes,
     "prompt_indices": [int], "samples_per_prompt": int,
     "samples": [{"prompt_index": int, "sample_index": int,
                  "prompt": bytes,     # prompt token ids, uint32 little-endian
                  "tokens": bytes,     # completion token ids, uint32 little-endian
                  "logprobs": bytes,   # behaviour logprob per completion token, float32 little-endian
                  "reward": float, "finished": bool, "seed": int,
                  "proof": bytes}]}    # TOPLOC proof of the completion (empty until the proofs issue)

Samples are prompt-major: sample k belongs to prompt_indices[k // samples_per_prompt] with sample
index k % samples_per_prompt, so a GRPO group is a contiguous slice and a reordered or padded batch
is refused rather than silently regrouped. Token ids travel as packed integers, not msgpack lists:
a 256-completion batch is a few tens of kilobytes and decodes without per-token Python objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgpack
import numpy as np

FORMAT_VERSION = 1
KIND = "rollout-batch"
MAX_BLOB_BYTES = 64 << 20
MAX_SAMPLES = 8192
MAX_PROMPT_TOKENS = 8192
MAX_COMPLETION_TOKENS = 8192
MAX_PROOF_BYTES = 1 << 20
MAX_TASK_ID = 128
MAX_WORKER_KEY = 64
MAX_SEED = (1 << 63) - 1
MAX_VOCAB_ID = (1 << 31) - 1
LOGPROB_SLACK = 1e-3  # log_softmax can round a hair above 0; anything more is not a log-probability

_TOP_KEYS = frozenset({"v", "kind", "task_id", "version", "worker_key", "prompt_indices",
                       "samples_per_prompt", "samples"})
_SAMPLE_KEYS = frozenset({"prompt_index", "sample_index", "prompt", "tokens", "logprobs", "reward",
                          "finished", "seed", "proof"})


class BatchError(ValueError):
    """A rollout batch blob is malformed; the message says which field and why."""


@dataclass(frozen=True)
class RolloutSample:
    prompt_index: int
    sample_index: int
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: np.ndarray  # float32 [len(token_ids)]: raw behaviour-policy logprobs
    reward: float
    finished: bool
    seed: int
    proof: bytes = b""


@dataclass(frozen=True)
class RolloutBatch:
    task_id: str
    version: int
    worker_key: bytes
    prompt_indices: tuple[int, ...]
    samples_per_prompt: int
    samples: tuple[RolloutSample, ...]

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.samples)

    @property
    def mean_reward(self) -> float:
        return sum(s.reward for s in self.samples) / len(self.samples) if self.samples else 0.0

    def groups(self) -> list[tuple[RolloutSample, ...]]:
        """The samples of each prompt, in prompt_indices order."""
        n = self.samples_per_prompt
        return [self.samples[k:k + n] for k in range(0, len(self.samples), n)]


def encode(batch: RolloutBatch) -> bytes:
    """Blob bytes for `batch`; checks it first, so a local bug cannot publish a malformed blob."""
    _check_batch(batch)
    obj = {
        "v": FORMAT_VERSION, "kind": KIND, "task_id": batch.task_id, "version": batch.version,
        "worker_key": bytes(batch.worker_key), "prompt_indices": list(batch.prompt_indices),
        "samples_per_prompt": batch.samples_per_prompt,
        "samples": [{
            "prompt_index": s.prompt_index, "sample_index": s.sample_index,
            "prompt": np.asarray(s.prompt_ids, dtype="<u4").tobytes(),
            "tokens": np.asarray(s.token_ids, dtype="<u4").tobytes(),
            "logprobs": np.asarray(s.logprobs, dtype="<f4").tobytes(),
            "reward": float(s.reward), "finished": bool(s.finished), "seed": int(s.seed),
            "proof": bytes(s.proof)} for s in batch.samples],
    }
    data = msgpack.packb(obj, use_bin_type=True)
    if len(data) > MAX_BLOB_BYTES:
        raise BatchError(f"batch is {len(data)} bytes, over the {MAX_BLOB_BYTES} byte limit")
    return data


def decode(data: bytes) -> RolloutBatch:
    """Parse and check a batch blob from anyone; raises BatchError, never anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BatchError(f"batch blob must be bytes, got {type(data).__name__}")
    if len(data) > MAX_BLOB_BYTES:
        raise BatchError(f"batch blob is {len(data)} bytes, over the {MAX_BLOB_BYTES} byte limit")
    try:
        obj = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True, use_list=True,
                              max_bin_len=MAX_BLOB_BYTES, max_str_len=1 << 16,
                              max_array_len=MAX_SAMPLES, max_map_len=16, max_ext_len=0)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise BatchError(f"batch blob is not valid msgpack ({type(exc).__name__}: {exc})") from None
    top = _map(obj, _TOP_KEYS, "batch")
    if top["v"] != FORMAT_VERSION or isinstance(top["v"], bool):
        raise BatchError(f"batch format version {top['v']!r} is not supported (expected {FORMAT_VERSION})")
    if top["kind"] != KIND:
        raise BatchError(f"blob kind {top['kind']!r} is not {KIND!r}")
    samples_raw = top["samples"]
    if not isinstance(samples_raw, list):
        raise BatchError("batch.samples must be a list")
    batch = RolloutBatch(
        task_id=_str(top["task_id"], "task_id", MAX_TASK_ID),
        version=_int(top["version"], "version", 0, MAX_SEED),
        worker_key=_bytes(top["worker_key"], "worker_key", MAX_WORKER_KEY),
        prompt_indices=tuple(_int(i, "prompt_indices[]", 0, MAX_SEED)
                             for i in _list(top["prompt_indices"], "prompt_indices", MAX_SAMPLES)),
        samples_per_prompt=_int(top["samples_per_prompt"], "samples_per_prompt", 1, MAX_SAMPLES),
        samples=tuple(_sample(s, k) for k, s in enumerate(samples_raw)),
    )
    _check_batch(batch)
    return batch


# ---------------------------------------------------------------- checks


def _check_batch(b: RolloutBatch) -> None:
    """Shape rules shared by encode and decode (types are checked while decoding)."""
    if not b.task_id:
        raise BatchError("task_id is empty")
    if not b.prompt_indices:
        raise BatchError("batch has no prompts")
    if len(set(b.prompt_indices)) != len(b.prompt_indices):
        raise BatchError("prompt_indices has duplicates")
    expected = len(b.prompt_indices) * b.samples_per_prompt
    if len(b.samples) != expected:
        raise BatchError(f"batch has {len(b.samples)} samples; {len(b.prompt_indices)} prompts x "
                         f"{b.samples_per_prompt} samples per prompt = {expected}")
    if expected > MAX_SAMPLES:
        raise BatchError(f"batch has {expected} samples, over the {MAX_SAMPLES} limit")
    for k, s in enumerate(b.samples):
        want = (b.prompt_indices[k // b.samples_per_prompt], k % b.samples_per_prompt)
        if (s.prompt_index, s.sample_index) != want:
            raise BatchError(f"sample {k} is (prompt {s.prompt_index}, sample {s.sample_index}); "
                             f"prompt-major order needs (prompt {want[0]}, sample {want[1]})")
        if not s.prompt_ids:
            raise BatchError(f"sample {k} has an empty prompt")
        if len(s.prompt_ids) > MAX_PROMPT_TOKENS or len(s.token_ids) > MAX_COMPLETION_TOKENS:
            raise BatchError(f"sample {k} is too long ({len(s.prompt_ids)} prompt, "
                             f"{len(s.token_ids)} completion tokens)")
        if len(s.logprobs) != len(s.token_ids):
            raise BatchError(f"sample {k} has {len(s.logprobs)} logprobs for {len(s.token_ids)} tokens")
        lp = np.asarray(s.logprobs, dtype=np.float32)
        if lp.size and (not np.isfinite(lp).all() or float(lp.max()) > LOGPROB_SLACK):
            raise BatchError(f"sample {k} has logprobs that are not finite and <= 0")
        if not math.isfinite(s.reward):
            raise BatchError(f"sample {k} has a non-finite reward")
        if not 0 <= s.seed <= MAX_SEED:
            raise BatchError(f"sample {k} seed {s.seed} is outside [0, 2**63)")
        if len(s.proof) > MAX_PROOF_BYTES:
            raise BatchError(f"sample {k} proof is {len(s.proof)} bytes, over {MAX_PROOF_BYTES}")


def _sample(obj, k: int) -> RolloutSample:
    m = _map(obj, _SAMPLE_KEYS, f"samples[{k}]")
    where = f"samples[{k}]"
    reward = m["reward"]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise BatchError(f"{where}.reward must be a number")
    if not isinstance(m["finished"], bool):
        raise BatchError(f"{where}.finished must be a bool")
    return RolloutSample(
        prompt_index=_int(m["prompt_index"], f"{where}.prompt_index", 0, MAX_SEED),
        sample_index=_int(m["sample_index"], f"{where}.sample_index", 0, MAX_SAMPLES),
        prompt_ids=_ids(m["prompt"], f"{where}.prompt", MAX_PROMPT_TOKENS),
        token_ids=_ids(m["tokens"], f"{where}.tokens", MAX_COMPLETION_TOKENS),
        logprobs=_floats(m["logprobs"], f"{where}.logprobs", MAX_COMPLETION_TOKENS),
        reward=float(reward), finished=m["finished"],
        seed=_int(m["seed"], f"{where}.seed", 0, MAX_SEED),
        proof=_bytes(m["proof"], f"{where}.proof", MAX_PROOF_BYTES),
    )


def _map(obj, keys: frozenset, where: str) -> dict:
    if not isinstance(obj, dict):
        raise BatchError(f"{where} must be a map, got {type(obj).__name__}")
    if set(obj) != keys:
        extra = sorted(str(k) for k in set(obj) - keys)
        missing = sorted(keys - set(obj))
        raise BatchError(f"{where}: unknown keys {extra}, missing keys {missing}")
    return obj


def _int(v, where: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BatchError(f"{where} must be an integer in [{lo}, {hi}], got {v!r}"[:200])
    return v


def _str(v, where: str, max_len: int) -> str:
    if not isinstance(v, str) or len(v) > max_len:
        raise BatchError(f"{where} must be a string of at most {max_len} characters")
    return v


def _bytes(v, where: str, max_len: int) -> bytes:
    if not isinstance(v, bytes) or len(v) > max_len:
        raise BatchError(f"{where} must be bytes of at most {max_len}")
    return v


def _list(v, where: str, max_len: int) -> list:
    if not isinstance(v, list) or len(v) > max_len:
        raise BatchError(f"{where} must be a list of at most {max_len} items")
    return v


def _ids(v, where: str, max_count: int) -> tuple[int, ...]:
    raw = _bytes(v, where, 4 * max_count)
    if len(raw) % 4:
        raise BatchError(f"{where} is {len(raw)} bytes, not a whole number of uint32 ids")
    ids = np.frombuffer(raw, dtype="<u4")
    if ids.size and int(ids.max()) > MAX_VOCAB_ID:
        raise BatchError(f"{where} holds a token id above {MAX_VOCAB_ID}")
    return tuple(int(i) for i in ids)


def _floats(v, where: str, max_count: int) -> np.ndarray:
    raw = _bytes(v, where, 4 * max_count)
    if len(raw) % 4:
        raise BatchError(f"{where} is {len(raw)} bytes, not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").copy()
