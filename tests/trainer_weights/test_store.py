"""Weights on disk, as the job process keeps them: atomic writes, a blob dir that re-hashes what it
reads, and versions packed into the shard dir and rebuilt from it alone (trainer/versions.py)."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest
import torch

from gossip.hashing import blake2b256
from gossip.messages import TensorEntry, WeightManifest
from swarm.jobs import TaskSpec, UnpackJob
from tests.trainer_weights.helpers import model, step
from trainer.blobdir import BlobDir, BlobError
from trainer.fsutil import write_atomic
from trainer.versions import VersionError, Versions

torch.set_num_threads(1)

TASK = TaskSpec("t-store", "builtin:digit-sort-tiny", "digit-sort", {"shard_size": 512})
T0 = 1.8e9


def files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def versions_at(root) -> Versions:
    """A job process's versions over `root` (blobs/ and shards/ beside each other, as in a data dir)."""
    return Versions(BlobDir(root / "blobs"), root / "shards")


def signed(result: tuple, version: int, parent_version: int = -1) -> WeightManifest:
    fields = dict(result[2])
    fields["tensors"] = tuple(TensorEntry(*t) for t in fields["tensors"])
    return WeightManifest(task_id="0" * 16, version=version, parent_version=parent_version, created_at=T0, **fields)


def copy_shards(source, target, manifest: WeightManifest) -> None:
    """What the shard exchange does for a follower: the version's shards, nothing else."""
    (target / "shards").mkdir(parents=True, exist_ok=True)
    for h in manifest.shard_hashes:
        shutil.copy(source / "shards" / h.hex(), target / "shards" / h.hex())


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(trainer dir, (digest, size, fields) of version 0, the same of version 1: a delta against 0)."""
    root = tmp_path_factory.mktemp("trainer")
    trainer = versions_at(root)
    v0 = model(0)
    r0 = trainer.publish(TASK, v0)
    r1 = trainer.publish(TASK, step(v0), r0[0], r0[2]["root"], 0)
    assert len(r0[2]["shard_hashes"]) >= 3 and r1[2]["encoding"] == "delta"
    return root, r0, r1


def test_blob_dir_round_trip_and_refusals(tmp_path):
    blobs = BlobDir(tmp_path)
    data = b"blob bytes"
    digest = blobs.write(data)
    assert digest == blake2b256(data) and blobs.read(digest) == data
    assert blobs.write(data) == digest and files(tmp_path) == [digest.hex()]  # idempotent
    with pytest.raises(BlobError, match="is not in"):
        blobs.read(blake2b256(b"absent"))
    with pytest.raises(BlobError, match="must be 32 bytes"):
        blobs.read(digest[:16])


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "state" / "trainer.json"
    write_atomic(path, b"old")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        write_atomic(path, b"new")
    assert files(tmp_path) == ["state/trainer.json"] and path.read_bytes() == b"old"
    monkeypatch.undo()

    def replace_fails(a, b):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", replace_fails)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "state" / "optimizer.json", b"new")
    assert files(tmp_path) == ["state/trainer.json"] and path.read_bytes() == b"old"


def test_rotten_blob_is_an_error_on_read(tmp_path):
    blobs = BlobDir(tmp_path)
    digest = blobs.write(b"x" * 100)
    blobs.path(digest).write_bytes(b"y" * 100)
    with pytest.raises(BlobError, match="corrupt"):
        blobs.read(digest)


def test_a_version_rebuilds_from_the_shard_dir_alone(published, tmp_path):
    root, r0, _ = published
    m0 = signed(r0, 0)
    assert all(blake2b256((root / "shards" / h.hex()).read_bytes()) == h for h in m0.shard_hashes)
    copy_shards(root, tmp_path, m0)
    follower = versions_at(tmp_path)  # another peer, or a restart: only the disk remains
    rebuilt = follower.unpack(UnpackJob("0" * 16, 0, m0, b""))
    assert rebuilt.weights == r0[0] and rebuilt.size == r0[1], "bit-identical to the published blob"
    assert (tmp_path / "blobs" / r0[0].hex()).read_bytes() == (root / "blobs" / r0[0].hex()).read_bytes()


def test_a_manifest_with_a_wrong_root_is_refused(published, tmp_path):
    root, r0, _ = published
    m0 = signed(r0, 0)
    copy_shards(root, tmp_path, m0)
    forged = dataclasses.replace(m0, root=bytes(32))  # shards and tensors as published, another name
    with pytest.raises(VersionError, match="version 0 does not rebuild"):
        versions_at(tmp_path).unpack(UnpackJob("0" * 16, 0, forged, b""))
    assert files(tmp_path / "blobs") == []


def test_a_delta_rebuilds_from_its_parent_and_not_without_it(published, tmp_path):
    root, r0, r1 = published
    m0, m1 = signed(r0, 0), signed(r1, 1, 0)
    assert m1.encoding == "delta" and m1.parent_root == m0.root
    copy_shards(root, tmp_path / "without-parent", m1)
    with pytest.raises(BlobError, match="parent weights"):
        versions_at(tmp_path / "without-parent").unpack(UnpackJob("0" * 16, 1, m1, r0[0]))
    for m in (m0, m1):
        copy_shards(root, tmp_path / "follower", m)
    follower = versions_at(tmp_path / "follower")
    assert follower.unpack(UnpackJob("0" * 16, 0, m0, b"")).weights == r0[0]
    assert follower.unpack(UnpackJob("0" * 16, 1, m1, r0[0])).weights == r1[0]
