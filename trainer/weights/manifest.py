"""The manifest of a packed policy version: its fields, their bounds, and the root hash.

A manifest is what a trainer signs and gossips; shards travel separately over streams. Everything a
receiver needs to fetch, verify and decode the shards is in the manifest, and everything in the
manifest except the root itself is bound into the root, so one 32-byte value names the version.

The compressed stream is cut twice: into shards of `shard_size` bytes (what a peer stores and
unpacks) and into pieces of `piece_size` bytes, a divisor of `shard_size` (what peers request,
verify and relay one by one, swarm/pieces.py): piece p is bytes [p * piece_size, (p + 1) *
piece_size) of the stream, so a shard holds `shard_size / piece_size` whole pieces (the last shard
and piece may be shorter). Both hash lists are bound into the root.

Root construction (format "swarm-weights/2"; all hashes blake2b with a 32-byte digest, no key,
no personalisation):

    shard_hash[i] = blake2b-256(shard_i)
    piece_hash[p] = blake2b-256(piece_p)
    tensor.hash   = blake2b-256(raw little-endian bytes of the reconstructed tensor)
    params        = every manifest field except "root", "shard_hashes" and "piece_hashes", plus
                    "n_shards": len(shard_hashes) and "n_pieces": len(piece_hashes); bytes values
                    written as lowercase hex strings, None as null, tensor shapes as lists,
                    "tensors" in manifest order
    root          = blake2b-256( b"swarm-weights/2 root\\x00"
                                 || canonical_json(params) || b"\\x00"
                                 || shard_hash[0] || shard_hash[1] || ...
                                 || piece_hash[0] || piece_hash[1] || ... )
    canonical_json = JSON with keys sorted, separators (",", ":"), ASCII only (\\u escapes).

Binding the tensor index and the encoding parameters (not just the shard hashes) into the root
means a relay cannot re-label a version's shape, dtype or parent without changing its name.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from gossip.hashing import HASH_SIZE, blake2b256

from .errors import ManifestError, RootMismatchError
from .tensors import CARRY_DTYPES, ITEMSIZE

FORMAT = "swarm-weights/2"
ROOT_TAG = b"swarm-weights/2 root\x00"
DELTA_OPS = ("sub", "xor")

# Bounds a receiver enforces before allocating anything on a manifest's word.
MIN_SHARD_SIZE = 256
MAX_SHARD_SIZE = 64 * 1024 * 1024
MAX_SHARDS = 1 << 20
MIN_PIECE_SIZE = 256
MAX_PIECES = 1 << 22
MAX_TENSORS = 100_000
MAX_NAME_LEN = 1024
MAX_NDIM = 16
MAX_DEPTH = 1 << 20
# Safetensors header allowance on top of the tensor bytes: fixed part plus per-tensor entry.
HEADER_BASE = 4096
HEADER_PER_TENSOR = 256


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the version: its wire dtype, shape and the hash of its final bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    hash: bytes

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * ITEMSIZE[self.dtype]

    def fields(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "hash": self.hash}


@dataclass(frozen=True)
class Manifest:
    """Verified manifest fields. Build with `from_fields` (checks everything, root included)."""

    encoding: str  # "full" | "delta"
    delta_op: str | None  # how a delta is applied: "sub" (zigzag difference) | "xor"; None if full
    parent_root: bytes | None  # root of the version a delta applies to; None for full
    depth: int  # deltas since the last full version: 0 for full, parent's depth + 1 for delta
    dtype: str  # dtype floating weights are carried in: "bf16" | "fp16" | "fp32"
    shuffle: bool  # payload tensors are byte-shuffled (planes) rather than flat bytes
    shard_size: int  # every shard but the last has exactly this many bytes
    piece_size: int  # every piece but the last has exactly this many bytes; divides shard_size
    raw_size: int  # size of the decompressed safetensors payload
    compressed_size: int  # size of the zstd frame, the sum of the shard sizes
    tensors: tuple[TensorEntry, ...]
    shard_hashes: tuple[bytes, ...]
    piece_hashes: tuple[bytes, ...]
    root: bytes

    def manifest_fields(self) -> dict[str, Any]:
        """Plain python (str/int/bool/bytes/None/lists/dicts) for a signed gossip message."""
        return {
            "format": FORMAT,
            "encoding": self.encoding,
            "delta_op": self.delta_op,
            "parent_root": self.parent_root,
            "depth": self.depth,
            "dtype": self.dtype,
            "shuffle": self.shuffle,
            "shard_size": self.shard_size,
            "piece_size": self.piece_size,
            "raw_size": self.raw_size,
            "compressed_size": self.compressed_size,
            "tensors": [t.fields() for t in self.tensors],
            "shard_hashes": list(self.shard_hashes),
            "piece_hashes": list(self.piece_hashes),
            "root": self.root,
        }

    def shard_length(self, index: int) -> int:
        """The exact byte length shard `index` must have."""
        if index < len(self.shard_hashes) - 1:
            return self.shard_size
        return self.compressed_size - self.shard_size * (len(self.shard_hashes) - 1)

    @classmethod
    def from_fields(cls, fields: Any) -> "Manifest":
        """Parse and check manifest fields, including the root. Raises ManifestError."""
        return parse_manifest(fields)


def compute_root(fields: dict[str, Any]) -> bytes:
    """The root over manifest `fields` (the "root" entry, if present, is ignored)."""
    params = {k: _hexed(v) for k, v in fields.items() if k not in ("root", "shard_hashes", "piece_hashes")}
    params["n_shards"] = len(fields["shard_hashes"])
    params["n_pieces"] = len(fields["piece_hashes"])
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return blake2b256(ROOT_TAG + text.encode("ascii") + b"\x00" + b"".join(fields["shard_hashes"])
                      + b"".join(fields["piece_hashes"]))


def _hexed(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: _hexed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hexed(v) for v in value]
    return value


_KEYS = {
    "format", "encoding", "delta_op", "parent_root", "depth", "dtype", "shuffle", "shard_size", "piece_size",
    "raw_size", "compressed_size", "tensors", "shard_hashes", "piece_hashes", "root",
}


def parse_manifest(fields: Any) -> Manifest:
    """Check types, bounds and internal consistency of manifest fields, then the root."""
    if not isinstance(fields, dict) or set(fields) != _KEYS:
        got = sorted(fields) if isinstance(fields, dict) else type(fields).__name__
        raise ManifestError(f"manifest keys must be {sorted(_KEYS)}, got {got}")
    if fields["format"] != FORMAT:
        raise ManifestError(f"unknown format {fields['format']!r}")
    encoding = fields["encoding"]
    if encoding not in ("full", "delta"):
        raise ManifestError(f"bad encoding {encoding!r}")
    parent_root = fields["parent_root"]
    depth = _int(fields, "depth", 0, MAX_DEPTH)
    if encoding == "full" and (parent_root is not None or depth != 0):
        raise ManifestError("a full version has no parent_root and depth 0")
    if encoding == "delta" and (not _is_hash(parent_root) or depth < 1):
        raise ManifestError("a delta version needs a 32-byte parent_root and depth >= 1")
    delta_op = fields["delta_op"]
    if (encoding == "full") != (delta_op is None) or delta_op not in (None, *DELTA_OPS):
        raise ManifestError(f"delta_op must be one of {DELTA_OPS} for a delta, None for full")
    if fields["dtype"] not in CARRY_DTYPES:
        raise ManifestError(f"bad dtype {fields['dtype']!r}")
    if not isinstance(fields["shuffle"], bool):
        raise ManifestError("shuffle must be a bool")
    shard_size = _int(fields, "shard_size", MIN_SHARD_SIZE, MAX_SHARD_SIZE)
    tensors = _tensors(fields["tensors"])
    tensor_bytes = sum(t.nbytes for t in tensors)
    header_max = HEADER_BASE + HEADER_PER_TENSOR * len(tensors) + sum(len(t.name) for t in tensors)
    raw_size = _int(fields, "raw_size", tensor_bytes, tensor_bytes + header_max)
    hashes = fields["shard_hashes"]
    if not isinstance(hashes, list) or not 1 <= len(hashes) <= MAX_SHARDS:
        raise ManifestError("shard_hashes must be a list of 1..MAX_SHARDS hashes")
    if not all(_is_hash(h) for h in hashes):
        raise ManifestError("every shard hash must be 32 bytes")
    compressed = _int(fields, "compressed_size", 1, MAX_SHARDS * MAX_SHARD_SIZE)
    if math.ceil(compressed / shard_size) != len(hashes):
        raise ManifestError("compressed_size and shard_size disagree with the number of shards")
    piece_size = _int(fields, "piece_size", MIN_PIECE_SIZE, shard_size)
    if shard_size % piece_size:
        raise ManifestError(f"piece_size {piece_size} does not divide shard_size {shard_size}")
    pieces = fields["piece_hashes"]
    if not isinstance(pieces, list) or not 1 <= len(pieces) <= MAX_PIECES:
        raise ManifestError("piece_hashes must be a list of 1..MAX_PIECES hashes")
    if not all(_is_hash(h) for h in pieces):
        raise ManifestError("every piece hash must be 32 bytes")
    if math.ceil(compressed / piece_size) != len(pieces):
        raise ManifestError("compressed_size and piece_size disagree with the number of pieces")
    if not _is_hash(fields["root"]):
        raise ManifestError("root must be 32 bytes")
    root = compute_root(fields)
    if root != bytes(fields["root"]):
        raise RootMismatchError(f"root {bytes(fields['root']).hex()} != recomputed {root.hex()}")
    return Manifest(
        encoding=encoding,
        delta_op=delta_op,
        parent_root=None if parent_root is None else bytes(parent_root),
        depth=depth,
        dtype=fields["dtype"],
        shuffle=fields["shuffle"],
        shard_size=shard_size,
        piece_size=piece_size,
        raw_size=raw_size,
        compressed_size=compressed,
        tensors=tensors,
        shard_hashes=tuple(bytes(h) for h in hashes),
        piece_hashes=tuple(bytes(h) for h in pieces),
        root=root,
    )


def _is_hash(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray)) and len(value) == HASH_SIZE


def _int(fields: dict[str, Any], key: str, lo: int, hi: int) -> int:
    value = fields[key]
    if type(value) is not int or not lo <= value <= hi:
        raise ManifestError(f"{key} must be an int in [{lo}, {hi}], got {value!r}")
    return value


def _tensors(items: Any) -> tuple[TensorEntry, ...]:
    if not isinstance(items, list) or len(items) > MAX_TENSORS:
        raise ManifestError("tensors must be a list of at most MAX_TENSORS entries")
    out, seen = [], set()
    for item in items:
        if not isinstance(item, dict) or set(item) != {"name", "dtype", "shape", "hash"}:
            raise ManifestError(f"bad tensor entry {item!r:.200}")
        name, dtype, shape = item["name"], item["dtype"], item["shape"]
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LEN or name in seen:
            raise ManifestError(f"bad or duplicate tensor name {name!r:.200}")
        if dtype not in ITEMSIZE:
            raise ManifestError(f"tensor {name!r}: bad dtype {dtype!r}")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(type(d) is int and 0 <= d < 1 << 40 for d in shape)
        ):
            raise ManifestError(f"tensor {name!r}: bad shape {shape!r:.200}")
        if not _is_hash(item["hash"]):
            raise ManifestError(f"tensor {name!r}: hash must be 32 bytes")
        seen.add(name)
        out.append(TensorEntry(name, dtype, tuple(shape), bytes(item["hash"])))
    return tuple(out)
