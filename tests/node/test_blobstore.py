"""The node's blob store: content-addressed, deletes what the core drops, holds its byte cap even
for files the job process wrote behind its back."""

import os
import time

from gossip.hashing import blake2b256
from node.blobstore import RESCAN_S, STALE_TMP_S, BlobStore


def test_put_checks_the_hash_and_get_reads_back(tmp_path):
    store = BlobStore(tmp_path)
    digest = store.put(b"batch")
    assert digest == blake2b256(b"batch") and store.get(digest) == b"batch" and store.has(digest)
    assert store.put(b"other", expected=digest) is None and not store.has(blake2b256(b"other"))
    assert store.get(b"short") is None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_drop_deletes_released_weights_and_holds_the_cap(tmp_path):
    clock = Clock()
    store = BlobStore(tmp_path, max_bytes=3000, clock=clock)
    old, kept = store.put(b"o" * 1000), store.put(b"k" * 1000)
    # a job process writes blobs straight into the directory (trainer/blobdir.py), past the cap
    written = []
    for i in range(3):
        data = bytes([i]) * 1000
        (tmp_path / blake2b256(data).hex()).write_bytes(data)
        os.utime(tmp_path / blake2b256(data).hex(), (time.time() + i + 1,) * 2)  # newer than old and kept
        written.append(blake2b256(data))
    clock.now += RESCAN_S  # the store looks at the directory again
    assert store.drop([old, b"\x00" * 32]) == 1 and not store.has(old)
    # 4,000 bytes left for a 3,000 byte cap: the oldest (kept) goes, the job's newer blobs stay
    assert not store.has(kept) and all(store.has(d) for d in written)


def test_the_cap_holds_between_scans_and_the_directory_is_scanned_only_when_due(tmp_path, monkeypatch):
    """Its own puts and drops are counted as they happen; a scan (for the job's writes) is due only
    every RESCAN_S seconds, however many blobs arrive."""
    import node.blobstore as blobstore

    scans = []
    real = os.scandir
    monkeypatch.setattr(blobstore.os, "scandir", lambda path: scans.append(path) or real(path))
    clock = Clock()
    store = BlobStore(tmp_path, max_bytes=2500, clock=clock)
    digests = []
    for i in range(5):
        digests.append(store.put(bytes([i]) * 1000))
        os.utime(tmp_path / digests[-1].hex(), (time.time() + i,) * 2)
    assert len(scans) == 1, "one scan for five puts"
    assert [store.has(d) for d in digests] == [False, False, False, True, True]
    job = tmp_path / blake2b256(b"j" * 1000).hex()
    job.write_bytes(b"j" * 1000)  # the job process's newest blob, unseen until a scan
    os.utime(job, (time.time() + 10,) * 2)
    store.drop([])
    assert len(scans) == 1 and store.has(digests[3])
    clock.now += RESCAN_S
    store.drop([])
    assert len(scans) == 2 and not store.has(digests[3]) and store.has(blake2b256(b"j" * 1000))


def test_stale_temp_files_of_a_killed_writer_are_removed(tmp_path):
    store = BlobStore(tmp_path)
    stale, fresh = tmp_path / ".abc.tmp", tmp_path / ".def.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    then = time.time() - STALE_TMP_S - 10
    os.utime(stale, (then, then))
    store.drop([])
    assert not stale.exists() and fresh.exists()


def test_a_piece_is_read_from_its_stored_shard_and_checked(tmp_path):
    """Pieces of stored shards are served from disk by offset; a piece that no longer hashes to the
    signed manifest's (a rotten file) is not served, and the shard is deleted so it is fetched again."""
    from node.shardstore import ShardDir

    h = blake2b256

    shards = ShardDir(tmp_path / "shards")
    shard = bytes(range(256)) * 4
    assert shards.put(h(shard), shard) and not shards.put(h(b"other"), shard)
    assert shards.get_piece(h(shard), h(shard[256:512]), 256, 256) == shard[256:512]
    assert shards.get_piece(h(b"absent"), h(shard[:256]), 0, 256) is None
    path = tmp_path / "shards" / h(shard).hex()
    path.write_bytes(shard[:300] + b"\xff" + shard[301:])  # a bit of piece 1 rots on disk
    assert shards.get_piece(h(shard), h(shard[:256]), 0, 256) == shard[:256], "piece 0 is intact"
    assert shards.get_piece(h(shard), h(shard[256:512]), 256, 256) is None
    assert not path.exists() and shards.rotten == 1
    assert shards.put(h(shard), shard)
    assert shards.get_piece(h(shard), h(shard[768:]), 768, 300) is None, "shorter than asked: refused"
