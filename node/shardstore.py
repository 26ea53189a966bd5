"""The node's weight shards on disk, named by blake2b-256, their pieces served on `/swarm/shard/2`.

Same layout as blobs (one file per shard, hex name, atomic temp-file + rename writes), in its own
directory `<data-dir>/shards`, which the trainer's job process writes too (trainer/versions.py).
Nothing enters unverified (the core checked the hash against a signed manifest; `put` checks it
again) and every read is re-hashed (a piece read against its own hash from the signed manifest),
so a rotten file is deleted and reported missing rather than served. Garbage collection keeps what
the core still tracks and spares young files, which a job may have written for a version the core
has not heard of yet. A restarted node finds its shards here and resumes its downloads
(`CheckShards` -> `present`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gossip.hashing import blake2b256
from trainer.fsutil import write_atomic

GC_GRACE = 300.0  # seconds: files younger than this survive a gc whatever it says


class ShardDir:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.rotten = 0

    def _path(self, digest: bytes) -> Path:
        return self.root / bytes(digest).hex()

    def put(self, digest: bytes, data: bytes) -> bool:
        if len(digest) != 32 or blake2b256(data) != digest:
            return False
        if not self._path(digest).exists():
            write_atomic(self._path(digest), data, point="shard")
        return True

    def get(self, digest: bytes) -> bytes | None:
        if len(digest) != 32:
            return None
        try:
            data = self._path(digest).read_bytes()
        except FileNotFoundError:
            return None
        if blake2b256(data) != digest:
            self.rotten += 1
            self._path(digest).unlink(missing_ok=True)
            return None
        return data

    def get_piece(self, shard: bytes, digest: bytes, offset: int, length: int) -> bytes | None:
        """`length` bytes at `offset` of stored shard `shard`, if they hash to `digest` (a piece)."""
        if len(shard) != 32 or offset < 0 or length <= 0:
            return None
        try:
            with open(self._path(shard), "rb") as fh:
                fh.seek(offset)
                data = fh.read(length)
        except FileNotFoundError:
            return None
        if len(data) != length or blake2b256(data) != digest:
            self.rotten += 1
            self._path(shard).unlink(missing_ok=True)
            return None
        return data

    def present(self, digests) -> frozenset[bytes]:
        """Which of `digests` are stored (by name; reads re-check the bytes)."""
        return frozenset(d for d in digests if len(d) == 32 and self._path(d).is_file())

    def gc(self, keep: frozenset[bytes], grace: float = GC_GRACE) -> int:
        keep_names = {bytes(d).hex() for d in keep}
        now, removed = time.time(), 0
        for entry in os.scandir(self.root):
            if not entry.is_file() or entry.name in keep_names:
                continue
            try:
                if now - entry.stat().st_mtime < grace:
                    continue
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                continue
        return removed

    def total_bytes(self) -> int:
        return sum(e.stat().st_size for e in os.scandir(self.root) if e.is_file())
