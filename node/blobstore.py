"""Content-addressed blobs on disk (rollout batches, full weights), served on `/swarm/blob/1`.

A blob's name is the blake2b-256 of its bytes, so whatever is fetched can be checked before it is
stored, and nothing is ever stored under a wrong name. The core deletes weights of released versions
(`DropBlobs`); the store is also bounded by total bytes, oldest evicted first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gossip.hashing import blake2b256
from trainer.fsutil import write_atomic

STALE_TMP_S = 3600.0
RESCAN_S = 10.0


class BlobStore:
    """The byte cap is held against an index of what the store holds: its own writes and deletions
    are counted as they happen, and the directory is scanned again (for what the job process wrote
    behind its back) at most every `rescan_every` seconds. Scanning on every put cost a trainer's
    node a fifth of its CPU once a run had left a few thousand rollout batches behind."""

    def __init__(self, root: Path, max_bytes: int = 4 << 30, rescan_every: float = RESCAN_S,
                 clock=time.monotonic) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.rescan_every = rescan_every
        self._clock = clock
        self._index: dict[str, tuple[float, int]] = {}  # file name -> (mtime, size)
        self._total = 0
        self._scanned_at: float | None = None

    def _path(self, digest: bytes) -> Path:
        return self.root / digest.hex()

    def put(self, data: bytes, expected: bytes | None = None) -> bytes | None:
        """Store `data`; returns its hash, or None (and stores nothing) if it is not `expected`."""
        digest = blake2b256(data)
        if expected is not None and digest != expected:
            return None
        if not self._path(digest).exists():
            write_atomic(self._path(digest), data, point="blob")
            self._count(digest.hex(), time.time(), len(data))
            self._hold_cap()
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
                self._forget(digest.hex())
                removed += 1
        self._hold_cap()
        return removed

    def _count(self, name: str, mtime: float, size: int) -> None:
        self._forget(name)
        self._index[name] = (mtime, size)
        self._total += size

    def _forget(self, name: str) -> None:
        old = self._index.pop(name, None)
        if old is not None:
            self._total -= old[1]

    def _hold_cap(self) -> None:
        """Oldest first down to `max_bytes` (after a rescan when one is due)."""
        now = self._clock()
        if self._scanned_at is None or now - self._scanned_at >= self.rescan_every:
            self._scan()
            self._scanned_at = now
        if self._total <= self.max_bytes:
            return
        for mtime, name in sorted((mtime, name) for name, (mtime, _) in self._index.items()):
            if self._total <= self.max_bytes:
                break
            (self.root / name).unlink(missing_ok=True)
            self._forget(name)

    def _scan(self) -> None:
        """Index the directory afresh; temp files a killed writer left behind go after an hour."""
        self._index, self._total, now = {}, 0, time.time()
        for e in os.scandir(self.root):
            try:
                if not e.is_file():
                    continue
                st = e.stat()
                if e.name.startswith("."):
                    if now - st.st_mtime > STALE_TMP_S:
                        os.unlink(e.path)
                    continue
                self._count(e.name, st.st_mtime, st.st_size)
            except FileNotFoundError:
                continue  # deleted meanwhile (a job process, a concurrent drop)
