"""The job process's view of the node's blob directory: content-addressed files named by hash.

The same layout and hash as `node.blobstore.BlobStore` (blake2b-256, hex file names, atomic
writes), written here because `trainer/` must not import `node/`. Reads re-hash the bytes, so a
truncated or tampered file is an error, never a silently wrong policy.
"""

from __future__ import annotations

import os
from pathlib import Path

from gossip.hashing import blake2b256
from trainer.fsutil import write_atomic


class BlobError(RuntimeError):
    """A blob is missing or does not match its name."""


class BlobDir:
    def __init__(self, root: Path, point: str = "blob") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.point = point  # the crash point of its writes (trainer/crashpoints.py): "blob" or "shard"

    def path(self, digest: bytes) -> Path:
        return self.root / bytes(digest).hex()

    def read(self, digest: bytes, what: str = "blob") -> bytes:
        """The blob's bytes, checked against its hash; BlobError if missing or corrupt."""
        digest = bytes(digest)
        if len(digest) != 32:
            raise BlobError(f"{what} hash must be 32 bytes, got {len(digest)}")
        try:
            data = self.path(digest).read_bytes()
        except FileNotFoundError:
            raise BlobError(f"{what} {digest.hex()[:16]} is not in {self.root} (not fetched yet, "
                            "or evicted)") from None
        if blake2b256(data) != digest:
            raise BlobError(f"{what} {digest.hex()[:16]} in {self.root} is corrupt (its bytes hash "
                            "to something else); delete the file so it is fetched again")
        return data

    def write(self, data: bytes) -> bytes:
        """Store `data` atomically under its hash; returns the hash."""
        digest = blake2b256(data)
        target = self.path(digest)
        if target.exists():
            os.utime(target)  # fresh again for the store's oldest-first eviction
            return digest
        write_atomic(target, data, point=self.point)
        return digest
