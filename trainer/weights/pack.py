"""Packing a policy version: full or exact delta (whichever compresses smaller), zstd, shards, root.

A trainer publishes a new version every step or few; peers already hold the parent, so sending
only what changed saves most of the bandwidth (see tensors.py for why bit-pattern deltas, zigzag
difference or XOR, are exact and compress well). Which encoding wins is decided by compressing
both and comparing sizes (the full one only until it is longer than the delta), not by a heuristic:
early in training or after a large step a full version can be smaller, and guessing wrong costs
either bandwidth or a needless dependency on the parent.

`full_every` bounds the chain: a newcomer must fetch the last full version plus every delta after
it, so after `full_every - 1` deltas the next version is forced full.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from gossip.hashing import blake2b256
from swarm.pieces import default_piece_size  # what peers relay one at a time (swarm/pieces.py: why not whole shards)

from . import payload
from .manifest import (
    FORMAT,
    DELTA_OPS,
    MAX_SHARD_SIZE,
    MIN_PIECE_SIZE,
    MIN_SHARD_SIZE,
    Manifest,
    TensorEntry,
    compute_root,
)
from .tensors import ITEMSIZE, carried, dtype_name, sub_delta, to_bytes, xor

DEFAULT_SHARD_SIZE = 2 * 1024 * 1024


@dataclass(frozen=True)
class PackedVersion(Manifest):
    """A packed version: the manifest (see Manifest for each field) plus the shard bytes."""

    shards: tuple[bytes, ...]


def pack_version(
    state_dict: Mapping[str, torch.Tensor],
    parent_state_dict: Mapping[str, torch.Tensor] | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    zstd_level: int = 3,
    dtype: str = "bf16",
    *,
    parent_root: bytes | None = None,
    parent_depth: int = 0,
    full_every: int | None = None,
    shuffle: bool = True,
    delta_op: str = "sub",
    piece_size: int | None = None,
) -> PackedVersion:
    """Pack `state_dict` (floats carried in `dtype`) as full, or as a delta on the parent.

    parent_state_dict: the parent version's tensors (the fp32 source it was packed from or its
        unpacked form: casting is idempotent, so both give the same bits); None packs full.
    parent_root, parent_depth: the parent's root and depth (0 if the parent is full); required
        with a parent, they go into the manifest so receivers know what the delta applies to.
    full_every: if set, a delta is allowed only while parent_depth + 1 < full_every.
    A delta is also only possible when the parent has exactly the same tensor names, dtypes and
    shapes; otherwise the version is packed full.
    delta_op: "sub" (zigzag difference of bit patterns, the default: smallest, see tensors.py) or
        "xor"; both are exact.
    piece_size: a divisor of `shard_size` (default: `default_piece_size(shard_size)`).
    """
    if delta_op not in DELTA_OPS:
        raise ValueError(f"delta_op must be one of {DELTA_OPS}")
    if not MIN_SHARD_SIZE <= shard_size <= MAX_SHARD_SIZE:
        raise ValueError(f"shard_size must be in [{MIN_SHARD_SIZE}, {MAX_SHARD_SIZE}]")
    if piece_size is None:
        piece_size = default_piece_size(shard_size)
    if not MIN_PIECE_SIZE <= piece_size <= shard_size or shard_size % piece_size:
        raise ValueError(f"piece_size must divide shard_size and be at least {MIN_PIECE_SIZE}")
    if full_every is not None and full_every < 1:
        raise ValueError("full_every must be >= 1")
    if parent_state_dict is not None and (parent_root is None or len(parent_root) != 32):
        raise ValueError("a parent state dict needs its 32-byte parent_root")
    if parent_depth < 0:
        raise ValueError("parent_depth must be >= 0")

    tensors = _carry(state_dict, dtype)
    raw = {name: to_bytes(t) for name, t in tensors.items()}
    index = tuple(
        TensorEntry(name, dtype_name(t), tuple(t.shape), blake2b256(raw[name]))
        for name, t in tensors.items()
    )
    itemsizes = {t.name: ITEMSIZE[t.dtype] for t in index}

    best = None
    if _delta_allowed(parent_state_dict, parent_depth, full_every):
        parent = _carry(parent_state_dict, dtype)
        if _same_layout(tensors, parent):
            delta = {name: _delta(delta_op, raw[name], to_bytes(parent[name]), itemsizes[name])
                     for name in raw}
            delta_blob = payload.encode(delta, itemsizes, shuffle)
            best = ("delta", delta_blob, payload.compress(delta_blob, zstd_level))
    # the full frame wins ties; it is raced against the delta's, not finished once it is longer
    full_blob = payload.encode(raw, itemsizes, shuffle)
    full_frame = payload.compress(full_blob, zstd_level, give_up_above=len(best[2]) if best is not None else None)
    if full_frame is not None:
        best = ("full", full_blob, full_frame)

    encoding, blob, frame = best
    shards = tuple(frame[i : i + shard_size] for i in range(0, len(frame), shard_size))
    fields = {
        "format": FORMAT,
        "encoding": encoding,
        "delta_op": delta_op if encoding == "delta" else None,
        "parent_root": bytes(parent_root) if encoding == "delta" else None,
        "depth": parent_depth + 1 if encoding == "delta" else 0,
        "dtype": dtype,
        "shuffle": shuffle,
        "shard_size": shard_size,
        "piece_size": piece_size,
        "raw_size": len(blob),
        "compressed_size": len(frame),
        "tensors": [t.fields() for t in index],
        "shard_hashes": [blake2b256(s) for s in shards],
        "piece_hashes": [blake2b256(memoryview(frame)[i : i + piece_size]) for i in range(0, len(frame), piece_size)],
    }
    return PackedVersion(
        encoding=encoding,
        delta_op=fields["delta_op"],
        parent_root=fields["parent_root"],
        depth=fields["depth"],
        dtype=dtype,
        shuffle=shuffle,
        shard_size=shard_size,
        piece_size=piece_size,
        raw_size=len(blob),
        compressed_size=len(frame),
        tensors=index,
        shard_hashes=tuple(fields["shard_hashes"]),
        piece_hashes=tuple(fields["piece_hashes"]),
        root=compute_root(fields),
        shards=shards,
    )


def _carry(state_dict: Mapping[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    """Tensors in travel form, sorted by name so the same weights always pack to the same root."""
    if not all(isinstance(k, str) for k in state_dict):
        raise TypeError("state dict keys must be str")
    return {name: carried(state_dict[name], dtype) for name in sorted(state_dict)}


def _delta_allowed(parent: object, parent_depth: int, full_every: int | None) -> bool:
    return parent is not None and (full_every is None or parent_depth + 1 < full_every)


def _same_layout(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(
        a[n].dtype == b[n].dtype and a[n].shape == b[n].shape for n in a
    )


def _delta(op: str, new: np.ndarray, old: np.ndarray, itemsize: int) -> np.ndarray:
    return sub_delta(new, old, itemsize) if op == "sub" else xor(new, old)
