"""Content-addressed blobs on disk (rollout batches, full weights), served on `/swarm/blob/1`.

A blob's name is the blake2b-256 of its bytes, so whatever is fetched can be checked before it is
stored, and nothing is ever stored under a wrong name. The core deletes weights of released versions
(`DropBlobs`); the store is also bounded by total bytes, oldest evicted first.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from node.fsutil import write_atomic

STALE_TMP_S = 3600.0


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

    def drop(self, digests) -> int:
        """Delete these blobs (`DropBlobs`: versions no role uses any more), then hold the byte cap,
        which also covers what the job process wrote behind our back; how many were deleted."""
        removed = 0
        for digest in digests:
            if len(digest) == 32 and self._path(digest).exists():
                self._path(digest).unlink(missing_ok=True)
                removed += 1
        self._evict()
        return removed

    def _evict(self) -> None:
        """Oldest first down to `max_bytes`; temp files a killed writer left behind go after an hour."""
        entries, now = [], time.time()
        for e in os.scandir(self.root):
            try:
                if not e.is_file():
                    continue
                st = e.stat()
                if e.name.startswith("."):
                    if now - st.st_mtime > STALE_TMP_S:
                        os.unlink(e.path)
                    continue
                entries.append((st.st_mtime, e.name, st.st_size))
            except FileNotFoundError:
                continue  # deleted meanwhile (a job process, a concurrent drop)
        entries.sort()
        total = sum(size for _, _, size in entries)
        for _, name, size in entries:
            if total <= self.max_bytes:
                break
            (self.root / name).unlink(missing_ok=True)
            total -= size
