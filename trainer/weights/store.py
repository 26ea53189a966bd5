"""An on-disk, content-addressed shard store: what a peer holds, serves and resumes from.

Shards are stored by their own hash, so identical shards of different versions are stored once,
and a restarted peer resumes a download simply by finding the shards already on disk: the
manifest (kept per root) says which hashes it needs, `held` says which it has.

Layout under `dir`:
    shards/<first 2 hex chars>/<64 hex chars>    one file per shard, named by blake2b-256
    roots/<64 hex chars>.json                    the manifest fields of each tracked version

Every write goes to a temporary file in the destination directory, is fsynced, then renamed over
the final name with os.replace (atomic on POSIX): a crash or error leaves either no file or the
complete one, never a partial shard under a valid name. Hashes are checked before writing (nothing
unverified enters the store) and again on read (disk rot is caught, the shard dropped and
re-fetched). The store belongs to one peer process; threads within it may share it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .jsonio import manifest_from_json, manifest_to_json
from .manifest import HASH_SIZE, Manifest, blake2b256, parse_manifest

_TMP_PREFIX = ".tmp-"


class ShardStore:
    """Shards by hash, plus the manifests of tracked roots. See the module docstring."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        self._shards = self.dir / "shards"
        self._roots = self.dir / "roots"
        self._shards.mkdir(parents=True, exist_ok=True)
        self._roots.mkdir(parents=True, exist_ok=True)
        self._manifests: dict[bytes, Manifest] = {}

    # -- shards -----------------------------------------------------------------------------

    def has(self, shard_hash: bytes) -> bool:
        return self._shard_path(shard_hash).is_file()

    def get(self, shard_hash: bytes) -> bytes | None:
        """The shard's bytes, or None if absent or rotten on disk (a rotten file is removed)."""
        path = self._shard_path(shard_hash)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if blake2b256(data) != shard_hash:
            path.unlink(missing_ok=True)
            return None
        return data

    def put(self, shard_hash: bytes, data: bytes) -> bool:
        """Store `data` under `shard_hash` if it hashes to it; False (nothing written) otherwise."""
        if blake2b256(data) != shard_hash:
            return False
        path = self._shard_path(shard_hash)
        if not path.is_file():
            path.parent.mkdir(exist_ok=True)
            _atomic_write(path, data)
        return True

    def put_shard(self, root: bytes, index: int, data: bytes) -> bool:
        """Store shard `index` of tracked version `root` if it is exactly that shard."""
        m = self.manifest(root)
        if m is None or type(index) is not int or not 0 <= index < len(m.shard_hashes):
            return False
        if len(data) != m.shard_length(index):
            return False
        return self.put(m.shard_hashes[index], data)

    # -- roots ------------------------------------------------------------------------------

    def track(self, manifest_fields: dict[str, Any] | Manifest) -> Manifest:
        """Record a version's manifest (root checked) so its shards can be counted and kept."""
        m = manifest_fields if isinstance(manifest_fields, Manifest) else parse_manifest(manifest_fields)
        path = self._root_path(m.root)
        if not path.is_file():
            _atomic_write(path, manifest_to_json(m.manifest_fields()).encode())
        self._manifests[m.root] = m
        return m

    def roots(self) -> list[bytes]:
        """Roots of all tracked versions, sorted."""
        out = []
        for p in self._roots.glob("*.json"):
            try:
                out.append(_hash_from_hex(p.stem))
            except ValueError:
                continue
        return sorted(out)

    def manifest(self, root: bytes) -> Manifest | None:
        """The tracked manifest for `root`, or None (an unreadable record counts as absent)."""
        if root in self._manifests:
            return self._manifests[root]
        try:
            m = parse_manifest(manifest_from_json(self._root_path(root).read_text()))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        if m.root != root:
            return None
        self._manifests[root] = m
        return m

    def held(self, root: bytes) -> list[bool]:
        """For each shard index of `root`, whether it is on disk ([] if `root` is not tracked)."""
        m = self.manifest(root)
        return [] if m is None else [self.has(h) for h in m.shard_hashes]

    def bitmap(self, root: bytes) -> bytes:
        """`held` packed BitTorrent-style: shard i is bit (7 - i % 8) of byte i // 8."""
        held = self.held(root)
        out = bytearray((len(held) + 7) // 8)
        for i, h in enumerate(held):
            if h:
                out[i // 8] |= 0x80 >> (i % 8)
        return bytes(out)

    def missing(self, root: bytes) -> list[int]:
        """Indices of `root`'s shards not yet on disk."""
        return [i for i, h in enumerate(self.held(root)) if not h]

    def shards(self, root: bytes) -> list[bytes] | None:
        """All of `root`'s shards in order, or None if any is missing."""
        m = self.manifest(root)
        if m is None:
            return None
        out = []
        for h in m.shard_hashes:
            data = self.get(h)
            if data is None:
                return None
            out.append(data)
        return out

    # -- garbage collection -----------------------------------------------------------------

    def gc(self, keep: Iterable[bytes], stale_tmp_s: float = 3600.0) -> int:
        """Forget roots not in `keep`, delete shards no kept root needs, and stale temp files.

        Returns the number of files removed. Shards put without any tracked root are removed
        too, so track a version before downloading it if it should survive a gc.
        """
        keep = set(keep)
        removed = 0
        for root in self.roots():
            if root not in keep:
                self._root_path(root).unlink(missing_ok=True)
                self._manifests.pop(root, None)
                removed += 1
        needed = set()
        for root in self.roots():
            m = self.manifest(root)
            if m is not None:
                needed.update(m.shard_hashes)
        now = time.time()
        for sub in [self._roots, *self._shards.iterdir()]:
            if not sub.is_dir():
                continue
            for p in sub.iterdir():
                if p.name.startswith(_TMP_PREFIX):
                    if now - p.stat().st_mtime > stale_tmp_s:
                        p.unlink(missing_ok=True)
                        removed += 1
                elif sub != self._roots and _parse_hex(p.name) not in needed:
                    p.unlink(missing_ok=True)
                    removed += 1
        return removed

    # -- paths ------------------------------------------------------------------------------

    def _shard_path(self, shard_hash: bytes) -> Path:
        h = _check_hash(shard_hash).hex()
        return self._shards / h[:2] / h

    def _root_path(self, root: bytes) -> Path:
        return self._roots / f"{_check_hash(root).hex()}.json"


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via temp file + fsync + os.replace; on any error remove the temp file and re-raise."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _check_hash(h: bytes) -> bytes:
    if not isinstance(h, (bytes, bytearray)) or len(h) != HASH_SIZE:
        raise ValueError("hashes are 32 bytes")
    return bytes(h)


def _hash_from_hex(text: str) -> bytes:
    h = bytes.fromhex(text)
    return _check_hash(h)


def _parse_hex(name: str) -> bytes | None:
    try:
        return _hash_from_hex(name)
    except ValueError:
        return None
