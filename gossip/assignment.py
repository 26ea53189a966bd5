"""Prompt assignment and sampling seeds by hash: stdlib only, so the sans-IO core can import it.

A worker does not choose its prompts: for (task, worker key, policy version) the prompt indices are
fixed by blake2b, so a worker cannot pick easy prompts and any validator can recompute the list.
The same hashing gives per-sample sampling seeds, so a sampled completion can be replayed.
Never Python's hash() (salted per process) and never the global random module.
"""

from __future__ import annotations

import hashlib

_PERSON_ASSIGN = b"swarm-assign-v1"
_PERSON_SEED = b"swarm-seed-v1"


def _field(value: str | bytes | int) -> bytes:
    """Length-prefixed encoding of one field, so ("ab", "c") and ("a", "bc") never collide."""
    if isinstance(value, bool):
        raise TypeError("bool is not a hash field")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative integer field: {value}")
        raw = b"i" + value.to_bytes(16, "big")
    elif isinstance(value, str):
        raw = b"s" + value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        raw = b"b" + bytes(value)
    else:
        raise TypeError(f"unsupported hash field type: {type(value).__name__}")
    return len(raw).to_bytes(4, "big") + raw


def hash_u64(person: bytes, *fields: str | bytes | int) -> int:
    """Stable 64-bit integer from blake2b over length-prefixed fields."""
    h = hashlib.blake2b(digest_size=8, person=person[:16])
    for f in fields:
        h.update(_field(f))
    return int.from_bytes(h.digest(), "big")


def assign_prompts(task_id: str, worker_key: bytes, policy_version: int, count: int,
                   n_prompts: int) -> list[int]:
    """The `count` prompt indices in [0, n_prompts) that this worker must roll out for this version.

    Index j of the list is blake2b(task, worker key, version, j, attempt) mod n_prompts; repeats are
    redrawn (next attempt) while distinct indices are still possible, so the list is distinct
    whenever count <= n_prompts. Modulo bias is below 2**-40 for any realistic n_prompts.
    """
    if count < 0 or n_prompts <= 0:
        raise ValueError(f"need count >= 0 and n_prompts > 0, got {count}, {n_prompts}")
    out: list[int] = []
    seen: set[int] = set()
    for j in range(count):
        attempt = 0
        while True:
            idx = hash_u64(_PERSON_ASSIGN, task_id, bytes(worker_key), policy_version, j,
                           attempt) % n_prompts
            if idx not in seen or len(seen) >= n_prompts:
                break
            attempt += 1
        seen.add(idx)
        out.append(idx)
    return out


def assigned_slice(task_id: str, worker_key: bytes, policy_version: int, prompts: tuple[int, ...],
                   prompts_per_batch: int, max_batches: int, n_prompts: int) -> int | None:
    """Batch number b such that `prompts` is slice [b*k, (b+1)*k) of the worker's assignment for this
    version (k = prompts_per_batch, b < max_batches), else None: what a validator checks.

    Lists are prefix-stable, and workers commit their first few slices, so the list is grown 4x at a
    time instead of drawn whole (max_batches x k hashes were a tenth of a small model's check)."""
    k = prompts_per_batch
    if len(prompts) != k or max_batches <= 0:
        return None
    done, batches = 0, min(4, max_batches)
    while True:
        full = assign_prompts(task_id, worker_key, policy_version, batches * k, n_prompts)
        found = next((b for b in range(done, batches) if tuple(full[b * k:(b + 1) * k]) == tuple(prompts)), None)
        if found is not None or batches >= max_batches:
            return found
        done, batches = batches, min(4 * batches, max_batches)


def is_assigned(task_id: str, worker_key: bytes, policy_version: int, count: int,
                n_prompts: int, prompt_index: int) -> bool:
    """Whether `prompt_index` is one of this worker's assigned prompts (what a validator checks)."""
    return prompt_index in assign_prompts(task_id, worker_key, policy_version, count, n_prompts)


def sample_seed(task_id: str, worker_key: bytes, policy_version: int, prompt_index: int,
                sample_index: int) -> int:
    """Seed (63 bits, fits torch.Generator.manual_seed) for one sampled completion."""
    return hash_u64(_PERSON_SEED, task_id, bytes(worker_key), policy_version, prompt_index,
                    sample_index) >> 1
