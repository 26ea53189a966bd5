"""Versions as they travel: the trainer's init/train jobs pack shards + manifest, another peer's
unpack job rebuilds bit-identical weights from the shards alone (and the parent), and refuses bad ones."""

import shutil

import pytest
import torch

from gossip.messages import TensorEntry, WeightManifest
from swarm.jobs import TrainJob, UnpackJob
from tests.trainer_jobs.conftest import TASK
from trainer.jobs import JobError, JobWorker
from trainer.policy import base_model, load_weights

T0 = 1.8e9


def signed_form(result, parent_version=-1) -> WeightManifest:
    fields = dict(result.manifest)
    fields["tensors"] = tuple(TensorEntry(*t) for t in fields["tensors"])
    return WeightManifest(task_id="0" * 16, version=result.version, parent_version=parent_version, created_at=T0,
                          **fields)


def test_a_follower_rebuilds_the_trainers_versions_from_shards(initialised, tmp_path):
    trainer, blobs, state, v0 = initialised
    m0 = signed_form(v0)
    assert m0.encoding == "full" and len(m0.shard_hashes) >= 1 and m0.dtype == "bf16"
    # the published weights are what peers rebuild: loadable, rounded to bf16
    model, _ = base_model(TASK.model, 0)
    load_weights(model, (blobs / v0.weights.hex()).read_bytes())
    # version 1: one real GRPO step, packed against version 0
    from tests.trainer_jobs.test_jobs import gen
    rollouts = tuple(gen(trainer, v0, prompts=p).blob for p in ((1, 2), (3, 4)))
    v1 = trainer.run("train", TrainJob(TASK, 0, v0.weights, rollouts, parent_root=m0.root, parent_depth=0))
    m1 = signed_form(v1, 0)
    assert m1.parent_root in (m0.root, b"")
    # another peer: only the shards (fetched by the exchange) and the manifests
    follower = JobWorker(tmp_path / "blobs", tmp_path / "state")
    (tmp_path / "shards").mkdir(exist_ok=True)
    for m in (m0, m1):
        for h in m.shard_hashes:
            shutil.copy(blobs.parent / "shards" / h.hex(), tmp_path / "shards" / h.hex())
    r0 = follower.run("unpack", UnpackJob("0" * 16, 0, m0, b""))
    assert r0.weights == v0.weights, "bit-identical to what the trainer checks rollouts against"
    kept = (tmp_path / "blobs" / r0.weights.hex()).read_bytes()
    (tmp_path / "blobs" / r0.weights.hex()).unlink()  # the job process still holds version 0, parsed
    r1 = follower.run("unpack", UnpackJob("0" * 16, 1, m1, r0.weights))
    assert r1.weights == v1.weights
    # the policy a generate job runs is the same from memory as from the file
    (tmp_path / "blobs" / r0.weights.hex()).write_bytes(kept)
    from_memory, _ = follower.models.policy(TASK.model, r1.weights)
    from_file, _ = JobWorker(tmp_path / "blobs", tmp_path / "state2").models.policy(TASK.model, r1.weights)
    assert follower.versions.unpacked(r1.weights) is not None
    for (k, a), (_, b) in zip(from_memory.state_dict().items(), from_file.state_dict().items()):
        assert torch.equal(a, b), k


def test_unpack_refuses_a_corrupt_or_missing_shard(initialised, tmp_path):
    trainer, blobs, state, v0 = initialised
    m0 = signed_form(v0)
    follower = JobWorker(tmp_path / "blobs", tmp_path / "state")
    with pytest.raises(JobError, match="not in"):
        follower.run("unpack", UnpackJob("0" * 16, 0, m0, b""))
    (tmp_path / "shards").mkdir(exist_ok=True)
    for h in m0.shard_hashes:
        data = bytearray((blobs.parent / "shards" / h.hex()).read_bytes())
        data[len(data) // 2] ^= 1
        (tmp_path / "shards" / h.hex()).write_bytes(bytes(data))
    with pytest.raises(JobError, match="corrupt"):
        follower.run("unpack", UnpackJob("0" * 16, 0, m0, b""))
    assert not list((tmp_path / "blobs").iterdir()), "nothing written"


def test_pack_settings_read_the_piece_size_and_refuse_one_that_does_not_divide_the_shard():
    from trainer.taskconfig import ParamError
    from trainer.versions import pack_settings

    assert pack_settings({})[:2] == (1 << 20, 256 << 10)
    assert pack_settings({"shard_size": 1000})[:2] == (1000, 1000), "no 256 KiB cut: one piece a shard"
    assert pack_settings({"shard_size": 1 << 21, "piece_size": 1 << 20})[:2] == (1 << 21, 1 << 20)
    for bad in ({"piece_size": 300_000}, {"piece_size": 128}, {"piece_size": "big"}):
        with pytest.raises(ParamError, match="piece_size"):
            pack_settings(bad)


def test_the_newest_rebuilt_version_stays_parsed_past_the_budget(monkeypatch, tmp_path):
    """A model bigger than the budget (SmolLM2: 270 MB a version) keeps its newest version parsed, so the
    next unpack's parent and the generate job's policy are not read and hashed again; older ones go."""
    import trainer.versions as versions
    from trainer.blobdir import BlobDir

    monkeypatch.setattr(versions, "UNPACKED_CACHE_BYTES", 100)
    kept = versions.Versions(BlobDir(tmp_path / "blobs"), tmp_path / "shards")
    a, b = {"w": torch.zeros(2)}, {"w": torch.ones(2)}
    kept._remember(b"a" * 32, a, 80)
    kept._remember(b"b" * 32, b, 300)
    assert kept.unpacked(b"b" * 32) is b, "the newest stays though it alone is over the budget"
    assert kept.unpacked(b"a" * 32) is None, "an older one goes once the budget is spent"
    monkeypatch.setattr(versions, "UNPACKED_NEWEST_MAX", 200)
    kept._remember(b"c" * 32, {"w": torch.ones(3)}, 300)
    assert kept.unpacked(b"c" * 32) is None and kept.unpacked(b"b" * 32) is b, "past the cap: not kept at all"
