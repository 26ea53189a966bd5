"""The shard store: verified atomic writes, bitmaps, resume after restart, garbage collection."""

from __future__ import annotations

import os

import pytest
import torch

from tests.trainer_weights.helpers import model, step
from trainer.weights import RootMismatchError, ShardStore, pack_version, unpack_version
from trainer.weights.manifest import blake2b256

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def versions():
    v0 = model(0)
    p0 = pack_version(v0, None, shard_size=512)
    p1 = pack_version(step(v0), v0, shard_size=512, parent_root=p0.root)
    assert len(p0.shards) >= 9 and p1.encoding == "delta"
    return p0, p1


def files(store: ShardStore) -> list[str]:
    return sorted(str(p.relative_to(store.dir)) for p in store.dir.rglob("*") if p.is_file())


def test_put_get_has_and_mismatch_writes_nothing(tmp_path):
    s = ShardStore(tmp_path)
    data = b"shard bytes"
    h = blake2b256(data)
    assert not s.has(h) and s.get(h) is None
    assert not s.put(h, data + b"!")
    assert files(s) == []
    assert s.put(h, data) and s.has(h) and s.get(h) == data
    assert s.put(h, data)  # idempotent
    assert len(files(s)) == 1


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    s = ShardStore(tmp_path)
    data = os.urandom(4096)

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        s.put(blake2b256(data), data)
    assert files(s) == [] and not s.has(blake2b256(data))
    monkeypatch.undo()

    def replace_fails(a, b):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", replace_fails)
    with pytest.raises(OSError):
        s.put(blake2b256(data), data)
    assert files(s) == []


def test_rotten_shard_is_dropped_on_read(tmp_path):
    s = ShardStore(tmp_path)
    data = b"x" * 100
    h = blake2b256(data)
    s.put(h, data)
    path = s.dir / "shards" / h.hex()[:2] / h.hex()
    path.write_bytes(b"y" * 100)
    assert s.get(h) is None and not s.has(h)


def test_track_bitmap_missing_and_resume_after_restart(tmp_path, versions):
    p0, _ = versions
    n = len(p0.shards)
    s = ShardStore(tmp_path)
    m = s.track(p0.manifest_fields())
    assert m.root == p0.root and s.roots() == [p0.root]
    assert s.held(p0.root) == [False] * n and s.bitmap(p0.root) == bytes((n + 7) // 8)
    got = [0, 2, n - 1]
    for i in got:
        assert s.put_shard(p0.root, i, p0.shards[i])
    assert not s.put_shard(p0.root, 1, p0.shards[0])  # right bytes, wrong slot
    assert not s.put_shard(p0.root, n, p0.shards[0])
    assert not s.put_shard(bytes(32), 0, p0.shards[0])  # untracked root
    assert s.held(p0.root) == [i in got for i in range(n)]
    bm = s.bitmap(p0.root)
    assert [bool(bm[i // 8] & (0x80 >> (i % 8))) for i in range(n)] == s.held(p0.root)
    assert s.shards(p0.root) is None

    restarted = ShardStore(tmp_path)  # a new process: only the disk remains
    assert restarted.roots() == [p0.root]
    assert restarted.missing(p0.root) == [i for i in range(n) if i not in got]
    for i in restarted.missing(p0.root):
        assert restarted.put_shard(p0.root, i, p0.shards[i])
    shards = restarted.shards(p0.root)
    assert shards == list(p0.shards)
    assert unpack_version(restarted.manifest(p0.root), shards).keys() == model(0).keys()


def test_track_rejects_bad_manifest(tmp_path, versions):
    s = ShardStore(tmp_path)
    with pytest.raises(RootMismatchError):
        s.track(dict(versions[0].manifest_fields(), root=bytes(32)))
    assert s.roots() == []


def test_gc_keeps_only_what_kept_roots_need(tmp_path, versions):
    p0, p1 = versions
    s = ShardStore(tmp_path)
    for p in versions:
        s.track(p.manifest_fields())
        for i, data in enumerate(p.shards):
            s.put_shard(p.root, i, data)
    stray = b"untracked"
    s.put(blake2b256(stray), stray)
    fanout = s.dir / "shards" / p1.shard_hashes[0].hex()[:2]  # where a put writes its temp file
    stale = fanout / ".tmp-crashed"
    stale.write_bytes(b"partial")
    os.utime(stale, (0, 0))
    fresh = fanout / ".tmp-inflight"
    fresh.write_bytes(b"partial")

    s.gc(keep=[p1.root])
    assert s.roots() == [p1.root] and s.manifest(p0.root) is None
    assert s.shards(p1.root) == list(p1.shards)
    only_p0 = set(p0.shard_hashes) - set(p1.shard_hashes)
    assert only_p0 and not any(s.has(h) for h in only_p0)
    assert not s.has(blake2b256(stray))
    assert not stale.exists() and fresh.exists()

    s.gc(keep=[])
    assert s.roots() == [] and [f for f in files(s) if ".tmp-" not in f] == []
