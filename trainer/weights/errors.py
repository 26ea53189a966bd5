"""Errors raised while checking a packed policy version.

Every failure is a `WeightsError` (a `ValueError`), so a peer can catch one class, count the
offence against whoever sent the bytes, and move on; the subclasses say *what* failed so the
caller can tell a bad shard (fetch it again from someone else) from a bad manifest (drop the
publisher's message) from a wrong parent (fetch the parent first).
"""

from __future__ import annotations


class WeightsError(ValueError):
    """Base class: the bytes or fields at hand do not form a valid policy version."""


class ManifestError(WeightsError):
    """The manifest fields are malformed, out of bounds or inconsistent with each other."""


class RootMismatchError(ManifestError):
    """The root recomputed from the manifest fields differs from the root the manifest claims."""


class ShardCountError(WeightsError):
    """The number of shards handed over differs from the number the manifest lists."""


class ShardHashError(WeightsError):
    """Shard `index` does not hash to the manifest's shard hash (corrupt, truncated or forged)."""

    def __init__(self, index: int, reason: str = "hash mismatch"):
        super().__init__(f"shard {index}: {reason}")
        self.index = index


class PayloadError(WeightsError):
    """The verified shards do not decode: bad zstd frame, bad safetensors, wrong tensor layout."""


class DecompressionLimitError(PayloadError):
    """Decompression would exceed the declared raw size or the hard cap (a zstd bomb)."""


class ParentMismatchError(WeightsError):
    """A delta cannot be applied: no parent given, or its tensors do not match the index."""


class TensorHashError(WeightsError):
    """Reconstructed tensor `name` does not hash to the index entry (most often: wrong parent)."""

    def __init__(self, name: str, reason: str = "hash mismatch"):
        super().__init__(f"tensor {name!r}: {reason}")
        self.name = name
