"""blake2b-256: the one hash that names blobs, shards, pieces, tensors, messages and evidence.

Kept in the lowest layer so every layer above (swarm, proofs, trainer, node, simulator) names
content the same way.
"""

from __future__ import annotations

import hashlib

HASH_SIZE = 32


def blake2b256(data: bytes | bytearray | memoryview) -> bytes:
    """The 32-byte blake2b digest of `data` (no key, no personalisation)."""
    return hashlib.blake2b(data, digest_size=HASH_SIZE).digest()
