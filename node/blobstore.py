"""Content-addressed blobs on disk (rollout batches, full weights), served on `/swarm/blob/1`.

A blob's name is the blake2b-256 of its bytes, so whatever is fetched can be checked before it is
stored, and nothing is ever stored under a wrong name. Bounded by total bytes: oldest evicted first.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from node.fsutil import write_atomic


def blob_hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


class BlobStore:
    def __init__(self, root: Path, max_bytes: int = 4 << 30) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes

    def _path(self, digest: bytes) -> Path:
        return self.root / digest.hex()

    def put(self, data: bytes, expected: bytes | None = None) -> bytes | None:
        """Store `data`; returns its hash, or None (and stores nothing) if it is not `expected`."""
        digest = blob_hash(data)
        if expected is not None and digest != expected:
            return None
        if not self._path(digest).exists():
            write_atomic(self._path(digest), data)
            self._evict()
        return digest

    def get(self, digest: bytes) -> bytes | None:
        if len(digest) != 32:
            return None
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            return None

    def has(self, digest: bytes) -> bool:
        return len(digest) == 32 and self._path(digest).exists()

    def _evict(self) -> None:
        entries = sorted((e.stat().st_mtime, e.name, e.stat().st_size) for e in os.scandir(self.root)
                         if e.is_file() and not e.name.startswith("."))
        total = sum(size for _, _, size in entries)
        for _, name, size in entries:
            if total <= self.max_bytes:
                break
            (self.root / name).unlink(missing_ok=True)
            total -= size
