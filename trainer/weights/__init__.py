"""Weight packing for policy versions: XOR deltas, zstd, content-addressed shards.

A trainer calls `pack_version` and gossips `PackedVersion.manifest_fields()` inside a signed
message; shards travel over request/response streams and are checked one by one with
`verify_shard`; a peer holding all shards (and, for a delta, the parent) calls `unpack_version`,
which returns only fully verified tensors. Shards on disk are the node's (node/shardstore.py) and
the job process's (trainer/versions.py).

Modules: tensors (bytes, XOR, shuffle), manifest (fields, bounds, root), payload (safetensors +
zstd), pack, unpack, errors.
"""

from swarm.pieces import DEFAULT_PIECE_SIZE, default_piece_size

from .errors import (
    DecompressionLimitError,
    ManifestError,
    ParentMismatchError,
    PayloadError,
    RootMismatchError,
    ShardCountError,
    ShardHashError,
    TensorHashError,
    WeightsError,
)
from .manifest import Manifest, TensorEntry, compute_root, parse_manifest
from .pack import DEFAULT_SHARD_SIZE, PackedVersion, pack_version
from .payload import HARD_MAX_RAW_SIZE
from .unpack import unpack_version, verify_shard

__all__ = [
    "DEFAULT_PIECE_SIZE",
    "DEFAULT_SHARD_SIZE",
    "HARD_MAX_RAW_SIZE",
    "DecompressionLimitError",
    "Manifest",
    "ManifestError",
    "PackedVersion",
    "ParentMismatchError",
    "PayloadError",
    "RootMismatchError",
    "ShardCountError",
    "ShardHashError",
    "TensorEntry",
    "TensorHashError",
    "WeightsError",
    "compute_root",
    "default_piece_size",
    "pack_version",
    "parse_manifest",
    "unpack_version",
    "verify_shard",
]
