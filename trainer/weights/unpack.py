"""Unpacking a policy version: verify everything, in order of cost, and return nothing unverified.

Order: manifest fields and root (cheap, no allocation beyond the fields), then every shard hash
(so a bad shard is blamed on its index and can be re-fetched from another peer), then bounded
decompression, safetensors parse, delta application, and finally the hash of every reconstructed
tensor. The last check is what makes a delta safe: applied to the wrong parent, XOR
(or adding) still yields *some* bytes, and only the final hashes (bound into the root) catch it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gossip.hashing import blake2b256

from . import payload
from .errors import ParentMismatchError, ShardCountError, ShardHashError, TensorHashError
from .manifest import Manifest, parse_manifest
from .tensors import ITEMSIZE, add_delta, carried, dtype_name, from_bytes, to_bytes, xor


def verify_shard(manifest_fields: dict[str, Any] | Manifest, index: int, data: bytes) -> bool:
    """True iff `data` is exactly shard `index` of the version (length and hash).

    Relays call this before storing or serving a shard. A malformed manifest raises
    ManifestError (the manifest is at fault, not the shard).
    """
    m = manifest_fields if isinstance(manifest_fields, Manifest) else parse_manifest(manifest_fields)
    if type(index) is not int or not 0 <= index < len(m.shard_hashes):
        return False
    return len(data) == m.shard_length(index) and blake2b256(data) == m.shard_hashes[index]


def unpack_version(
    manifest_fields: dict[str, Any] | Manifest,
    shards: Sequence[bytes],
    parent_state_dict: Mapping[str, torch.Tensor] | None = None,
    *,
    max_raw_size: int = payload.HARD_MAX_RAW_SIZE,
) -> dict[str, torch.Tensor]:
    """Verify and decode a version to {name: tensor} (in index order), bit-exact.

    parent_state_dict is required for a delta (the parent version's tensors; floats are cast to the
    carried dtype first, which is a no-op on an unpacked parent). Raises a WeightsError subclass:
    ManifestError/RootMismatchError, ShardCountError, ShardHashError(index), PayloadError/
    DecompressionLimitError, ParentMismatchError, TensorHashError(name).
    """
    m = manifest_fields if isinstance(manifest_fields, Manifest) else parse_manifest(manifest_fields)
    if len(shards) != len(m.shard_hashes):
        raise ShardCountError(f"got {len(shards)} shards, manifest lists {len(m.shard_hashes)}")
    for i, data in enumerate(shards):
        if len(data) != m.shard_length(i):
            raise ShardHashError(i, f"length {len(data)} != {m.shard_length(i)}")
        if blake2b256(data) != m.shard_hashes[i]:
            raise ShardHashError(i)

    blob = payload.decompress(b"".join(shards), m.raw_size, hard_max=max_raw_size)
    arrays = payload.decode(blob, m.tensors, m.shuffle)
    del blob
    if m.encoding == "delta":
        parent = _parent_bytes(m, parent_state_dict)
        size = {t.name: ITEMSIZE[t.dtype] for t in m.tensors}
        if m.delta_op == "sub":
            arrays = {n: add_delta(arr, parent[n], size[n]) for n, arr in arrays.items()}
        else:
            arrays = {n: xor(arr, parent[n]) for n, arr in arrays.items()}

    out = {}
    for t in m.tensors:
        raw = arrays.pop(t.name)
        if blake2b256(raw) != t.hash:
            hint = " (wrong parent version?)" if m.encoding == "delta" else ""
            raise TensorHashError(t.name, "reconstructed bytes do not match the index hash" + hint)
        out[t.name] = from_bytes(raw, t.dtype, t.shape)
    return out


def _parent_bytes(m: Manifest, parent: Mapping[str, torch.Tensor] | None) -> dict[str, Any]:
    """The parent's raw bytes per tensor, after checking it can carry this delta."""
    if parent is None:
        raise ParentMismatchError(f"delta on parent {m.parent_root.hex()} but no parent given")
    out = {}
    for t in m.tensors:
        if t.name not in parent:
            raise ParentMismatchError(f"parent lacks tensor {t.name!r}")
        p = carried(parent[t.name], m.dtype)
        if dtype_name(p) != t.dtype or tuple(p.shape) != t.shape:
            raise ParentMismatchError(
                f"parent tensor {t.name!r} is {dtype_name(p)}{tuple(p.shape)}, delta is {t.dtype}{t.shape}"
            )
        out[t.name] = to_bytes(p)
    return out
