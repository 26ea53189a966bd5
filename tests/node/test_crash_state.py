"""The node's own files killed mid-write (trainer/crashpoints.py), in-process: a forked child armed
with one point dies there, and what the node reads back on restart is whole, or absent and said so.
(The trainer's files: tests/trainer_jobs/test_crash_points.py; a real node: test_crash_restart.py.)"""

import os

import pytest

from gossip.hashing import blake2b256
from node.blobstore import BlobStore
from node.keystore import load_or_create_identity
from node.records import Records, read_records
from node.shardstore import ShardDir
from tests.crash import crash_in_child
from trainer.fsutil import write_atomic

NODE_FILES = ("identity-key", "peers-json", "control-json", "task-record", "generated")


@pytest.mark.parametrize("point", NODE_FILES)
def test_a_state_file_killed_mid_write_keeps_its_old_bytes(tmp_path, point):
    path = tmp_path / "state.json"
    path.write_bytes(b"old and whole")
    new = b"n" * 1000
    crash_in_child(point, lambda: write_atomic(path, new, point=point))
    assert path.read_bytes() == b"old and whole"
    temps = [p for p in tmp_path.iterdir() if p.name.startswith(".state.json.")]
    assert [p.read_bytes() for p in temps] == [new[:500]]  # the half-written temp is all that is left


def test_a_node_killed_writing_its_key_gets_a_whole_key_on_restart(tmp_path):
    crash_in_child("identity-key", lambda: load_or_create_identity(tmp_path))
    first = load_or_create_identity(tmp_path)  # no key was ever used: a new one, whole
    assert load_or_create_identity(tmp_path).peer_id == first.peer_id


def test_a_torn_record_line_is_skipped_and_the_next_record_is_not_lost(tmp_path):
    def two_records():
        records = Records(tmp_path)
        records.append(1.0, "version-published", {"version": 1})
        records.append(2.0, "version-published", {"version": 2})  # dies half-way through this line

    crash_in_child("records:2", two_records)
    assert not (tmp_path / "records.jsonl").read_text().endswith("\n")
    Records(tmp_path).append(3.0, "version-published", {"version": 3})
    assert [r["version"] for r in read_records(tmp_path, "version-published")] == [1, 3]


def test_a_blob_or_shard_killed_mid_write_is_never_served_and_its_temp_is_cleaned(tmp_path):
    blobs, shards = BlobStore(tmp_path / "blobs"), ShardDir(tmp_path / "shards")
    data = os.urandom(4096)
    digest = blake2b256(data)
    crash_in_child("blob", lambda: BlobStore(tmp_path / "blobs").put(data))
    crash_in_child("shard", lambda: ShardDir(tmp_path / "shards").put(digest, data))
    assert blobs.get(digest) is None and not blobs.has(digest)
    assert shards.get(digest) is None and shards.present([digest]) == frozenset()
    assert shards.get_piece(digest, blake2b256(data[:1024]), 0, 1024) is None
    temps = [p for d in ("blobs", "shards") for p in (tmp_path / d).iterdir()]
    assert len(temps) == 2 and all(p.name.startswith(".") and p.stat().st_size == 2048 for p in temps)
    # the stores delete what a killed writer left: the shard gc at once (nothing keeps it), the
    # blob store once the temp is an hour old (a live writer's temp is younger)
    assert shards.gc(frozenset(), grace=0) == 1
    old = os.stat(temps[0]).st_mtime - 7200
    for p in temps:
        if p.exists():
            os.utime(p, (old, old))
    BlobStore(tmp_path / "blobs", rescan_every=0).drop([])
    assert not any(p.exists() for p in temps)
    assert blobs.put(data) == digest and blobs.get(digest) == data  # fetched again, whole


def test_a_crash_point_that_does_not_exist_is_refused():
    from trainer import crashpoints

    for spec in ("nope", "blob:0", "blob:x"):
        with pytest.raises(ValueError, match="SWARM_CRASH_AT"):
            crashpoints.arm(spec)
    assert not crashpoints.armed()


def test_a_damaged_generated_slices_file_is_set_aside_with_a_log_line(tmp_path, capfd):
    from trainer import generated

    generated.record(tmp_path, b"w" * 32, 3, (1, 2))
    assert generated.seen(tmp_path, b"w" * 32, 3, (1, 2))
    (tmp_path / generated.FILE).write_text("[not, json")
    assert not generated.seen(tmp_path, b"w" * 32, 3, (1, 2))
    assert "state-file-discarded" in capfd.readouterr().err
    assert (tmp_path / (generated.FILE + ".damaged")).read_text() == "[not, json"
    generated.record(tmp_path, b"w" * 32, 4, (5, 6))  # and it records again from scratch
    assert generated.seen(tmp_path, b"w" * 32, 4, (5, 6))
