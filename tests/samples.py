"""One valid instance of every message kind, shared by the tests."""

from __future__ import annotations

from gossip.identity import Identity
from gossip.messages import (PeerAddrs, Probe, RolloutCommitment, ShardHave, ShardWant, TrainerCheckpoint, StatusHeartbeat,
                             TaskAnnouncement, TaskSummary, TensorEntry, Verdict, WeightManifest)

ALICE = Identity(bytes(range(32)))
BOB = Identity(bytes(range(1, 33)))
T0 = 1_800_000_000.0


def task(**overrides) -> TaskAnnouncement:
    fields = dict(name="digit-sort", model="builtin:digit-sort-tiny", env="digit-sort", created_at=T0,
                  expires_at=T0 + 86400, trainer_keys=(ALICE.public_key,), validator_keys=(BOB.public_key,),
                  async_level=2, params={"lr": 3e-5, "group_size": 16, "weights_dtype": "bf16", "decoupled": False})
    fields.update(overrides)
    return TaskAnnouncement(**fields)


def all_messages() -> list:
    tid = task().task_id
    h = bytes(32)
    return [
        task(),
        StatusHeartbeat(seq=1, sent_at=T0, interval=2.0, roles=("worker",), agent="swarm/test", listen_addrs=("/ip4/127.0.0.1/tcp/1",),
                        tasks=(tid,), versions={tid: 3}, known_peers=(PeerAddrs(BOB.peer_id, ("/ip4/127.0.0.1/tcp/2",)),)),
        RolloutCommitment(task_id=tid, policy_version=3, created_at=T0, blob_hash=h, blob_size=100,
                          prompt_indices=(1, 2, 3), samples_per_prompt=16, num_tokens=480, mean_reward=0.5),
        Verdict(task_id=tid, commitment_id=h, subject=BOB.public_key, passed=False, reason="toploc",
                evidence_hash=h, created_at=T0, detail="chunk 2 mismatch"),
        WeightManifest(task_id=tid, version=4, parent_version=3, parent_root=h, encoding="delta", dtype="bf16",
                       root=h, shard_size=1 << 20, raw_size=10, compressed_size=(1 << 20) + 5, shard_hashes=(h, h),
                       tensors=(TensorEntry("w", "bf16", (2, 3), h),), created_at=T0, delta_op="sub", depth=1),
        TrainerCheckpoint(task_id=tid, version=4, term=1, rank=1, weights_root=h, step=4, root=h, dtype="fp32",
                          shard_size=1 << 20, raw_size=30, compressed_size=(1 << 20) + 5, shard_hashes=(h, h),
                          piece_size=1 << 18, piece_hashes=(h,) * 5, tensors=(TensorEntry("exp_avg.w", "fp32", (2, 3), h),),
                          created_at=T0),
        ShardHave(task_id=tid, root=h, version=4, bitmap=b"\x05", sent_at=T0),
        ShardWant(task_id=tid, root=h, indices=(0, 1), sent_at=T0),
        TaskSummary(task_id=tid, version=4, term=1, workers=(BOB.peer_id,), completions=128,
                    trainers_alive=(BOB.peer_id,), versions=16, sent_at=T0),
        Probe(seq=7, sent_at=T0, payload=b"x" * 1024),
    ]
