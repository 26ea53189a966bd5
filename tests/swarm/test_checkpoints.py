"""Trainer checkpoints over the exchange: published every `state_every` versions, fetched by standbys
only, handed to the first train job after a takeover; bad ones refused with their own reason."""

import hashlib
from dataclasses import replace

import pytest

from gossip import errors
from gossip.errors import Rejected
from gossip.messages import TrainerCheckpoint
from gossip import topics
from swarm import jobs
from swarm.roles.trainerstate import checkpoint_of
from tests.swarm.test_takeover import PARAMS, chain_jobs, published, swarm

STATE_EVERY = 3


def h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def state_fields(version: int, root: bytes, label: bytes) -> tuple[dict, dict]:
    """A fake packed trainer state of two shards (what trainer/checkpoint.py hands back)."""
    payload = ((label + b"!") * 384)[:384]
    shards = [payload[:256], payload[256:]]
    fields = {"version": version, "weights_root": root, "step": version * 2, "root": h(b"state" + payload),
              "dtype": "fp32", "shard_size": 256, "raw_size": 3 * len(payload), "compressed_size": len(payload),
              "shard_hashes": tuple(h(s) for s in shards), "piece_size": 128,
              "piece_hashes": tuple(h(payload[i:i + 128]) for i in range(0, 384, 128)), "shuffle": True,
              "tensors": (("exp_avg.w", "fp32", (2,), h(label)),)}
    return fields, {h(s): s for s in shards}


JOBS_SEEN: list = []


def state_jobs(peer, job):
    """chain_jobs, plus a packed state whenever the trainer asks for one."""
    ok, result, error, produced = chain_jobs(peer, job)
    if job.kind == jobs.TRAIN:
        JOBS_SEEN.append((peer, job.payload))
        if job.payload.pack_state:
            fields, shards = state_fields(result.version, result.manifest["root"], f"{peer}{result.version}".encode())
            result = replace(result, state=fields)
            produced = {**produced, **shards}
    return ok, result, error, produced


@pytest.fixture
def net():
    JOBS_SEEN.clear()
    net, trainers, workers, task_id = swarm(params={**PARAMS, "state_every": STATE_EVERY})
    net.jobs = state_jobs
    return net, trainers, workers, task_id


def test_the_active_trainer_packs_every_state_every_versions_and_standbys_alone_fetch_it(net):
    net, trainers, workers, task_id = net
    net.run_for(60)
    packed = [p.version + 1 for peer, p in JOBS_SEEN if p.pack_state]
    assert len(packed) >= 2 and all(b - a == STATE_EVERY for a, b in zip(packed, packed[1:]))
    assert [p for p, _ in net.events_named("checkpoint-published")] == [trainers[0].peer_id] * len(packed)
    newest = net.events_named("checkpoint-published")[-1][1]["version"]
    for standby in trainers[1:]:
        fetched = [f["version"] for p, f in net.events_named("checkpoint-fetched") if p == standby.peer_id]
        assert fetched and max(fetched) >= packed[-2]
        snap = standby.snapshot(net.now)["work"]["trainer"][task_id]["checkpoint"]
        assert snap["version"] in (newest, packed[-2]) and snap["fetched"] >= 1
    fetchers = {p for p, _ in net.events_named("checkpoint-fetched")}
    assert not fetchers & {w.peer_id for w in workers}  # workers never download trainer state
    assert all(not p.pack_state for peer, p in JOBS_SEEN if peer != trainers[0].peer_id)
    # operators see how far behind each standby's state is (status: trainer_chain.self)
    head = max(f["version"] for _, f in published(net))
    for standby in trainers[1:]:
        [t] = [t for t in standby.snapshot(net.now)["tasks"] if t["task_id"] == task_id]
        mine = t["trainer_chain"]["self"]
        assert mine["state"] == "standby" and mine["state_version"] is not None
        assert 0 <= mine["state_behind"] <= 2 * STATE_EVERY + 2 and mine["state_version"] <= head


def test_a_standby_hands_the_newest_checkpoint_to_its_first_train_job(net):
    net, trainers, workers, task_id = net
    net.run_for(45)
    fetched = [f["version"] for p, f in net.events_named("checkpoint-fetched") if p == trainers[1].peer_id]
    assert fetched
    net.stop(trainers[0].peer_id)
    net.run_for(60)
    takeover = [f for p, f in net.events_named("trainer-takeover") if p == trainers[1].peer_id]
    assert takeover and takeover[0]["state_version"] == max(fetched)
    first = [p for peer, p in JOBS_SEEN if peer == trainers[1].peer_id]
    assert isinstance(first[0].state, TrainerCheckpoint) and first[0].state.version == max(fetched)
    assert first[0].pack_state  # the new active trainer publishes its own state at once
    assert all(p.state is None for p in first[1:])
    assert first[0].term == 1 == takeover[0]["term"]
    # the third rank now fetches the new chain's checkpoints
    later = [f for p, f in net.events_named("checkpoint-fetched") if p == trainers[2].peer_id and f["term"] == 1]
    assert later and published(net, trainers[1].peer_id)


def test_bad_checkpoints_are_refused_with_their_own_reason(net):
    net, trainers, workers, task_id = net
    net.run_for(20)
    standby = trainers[1]
    fork = standby.chains.tasks[task_id]
    trainer_task = next(r for r in trainers[0].roles if r.name == "trainer").tasks[task_id]
    version = trainer_task.version
    good_root = trainer_task.manifests[version].root
    fields, _ = state_fields(version, good_root, b"forged")
    task = standby.tasks.tasks[task_id].task
    key0, key1 = task.trainer_keys[0], task.trainer_keys[1]
    c = checkpoint_of(net.now, task_id, 0, 0, fields)
    fork.judge_checkpoint(task, c, key0)  # the genuine article passes
    with pytest.raises(Rejected) as bad:
        fork.judge_checkpoint(task, replace(c, weights_root=h(b"elsewhere")), key0)
    assert bad.value.reason == errors.CHECKPOINT_MISMATCH
    with pytest.raises(Rejected) as bad:
        fork.judge_checkpoint(task, replace(c, rank=1), key1)  # a standby's state is not the chain's
    assert bad.value.reason == errors.SUPERSEDED
    with pytest.raises(Rejected) as bad:
        fork.judge_checkpoint(task, replace(c, rank=1), key0)
    assert bad.value.reason == errors.UNAUTHORIZED
    with pytest.raises(Rejected) as bad:
        fork.judge_checkpoint(task, replace(c, version=version + 50), key0)
    assert bad.value.reason == errors.STALE  # its manifest not seen yet: no penalty, not taken

    # over the network: a checkpoint signed by a key the task does not list costs its sender
    from gossip.envelope import seal
    from gossip.identity import Identity
    stranger = Identity(b"\x77" * 32)
    out = net.inject(standby.peer_id, topics.task_topic(task_id, "weights"), seal(stranger, replace(c, created_at=net.now)).wire,
                     workers[0].peer_id)
    assert [e.reason for e in out if type(e).__name__ == "MessageVerdict"] == [errors.UNAUTHORIZED]
    mismatched = seal(trainers[0].identity, replace(c, weights_root=h(b"elsewhere"), created_at=net.now)).wire
    out = net.inject(standby.peer_id, topics.task_topic(task_id, "weights"), mismatched, trainers[0].peer_id)
    assert [e.reason for e in out if type(e).__name__ == "MessageVerdict"] == [errors.CHECKPOINT_MISMATCH]
    assert standby.ledger.get(trainers[0].peer_id).rejected[errors.CHECKPOINT_MISMATCH] == 1


def test_with_standby_checks_a_standby_checks_batches_and_its_first_step_starts_at_takeover():
    JOBS_SEEN.clear()
    net, trainers, workers, task_id = swarm(params={**PARAMS, "state_every": STATE_EVERY, "standby_checks": True})
    net.jobs = state_jobs
    net.run_for(40)
    verifies = [(p, j.payload.blob) for p, j in net.jobs_run if j.kind == jobs.VERIFY]
    for standby in trainers[1:]:  # checked while standing by, a step's worth at a time
        assert any(p == standby.peer_id for p, _ in verifies)
        assert not [f for p, f in net.events_named("version-published") if p == standby.peer_id]
    verdicts = {p for p, f in net.events_named("verdict")}
    assert trainers[1].peer_id in verdicts
    net.stop(trainers[0].peer_id)
    net.run_for(40)
    [(who, takeover)] = [(p, f) for p, f in net.events_named("trainer-takeover")]
    at = next(t for t, (p, e) in zip(net.events.times, net.events) if e.event == "trainer-takeover")
    first_train = next(t for t, (p, e) in zip(net.events.times, net.events)
                       if p == who and e.event == "version-published" and t > at)
    # no fetch or check stands between the takeover and the first step: one job's time
    assert first_train - at <= 2 * net.job_seconds + 0.5, first_train - at


class FetchLog:
    """The slice of a role context `trainerstate.heard` uses, recording what it asks for."""

    awake_since = 0.0

    def __init__(self) -> None:
        self.wanted: list[int] = []
        self.released: list[bytes] = []

    def want_shards(self, now, c, owner, source=""):
        self.wanted.append(c.version)
        return []

    def release_shards(self, now, root, owner):
        self.released.append(root)
        return []


def test_a_standby_gives_up_a_fetch_once_two_newer_checkpoints_say_it_is_no_longer_served():
    """The active trainer serves its two newest checkpoints, so a fetch outrun by two newer ones can
    never finish: waiting out STUCK_AFTER would leave the standby's state stale for ten minutes."""
    from swarm.roles.trainerstate import STUCK_AFTER, Checkpoints, heard

    def cp(version):
        fields, _ = state_fields(version, h(b"manifest%d" % version), b"v%d" % version)
        return checkpoint_of(1.0, "ab" * 8, 0, 0, fields)

    ctx = FetchLog()
    cps = Checkpoints(ctx, "ab" * 8, STATE_EVERY)
    heard(ctx, 10.0, cps, cp(3), "trainer")
    heard(ctx, 20.0, cps, cp(6), "trainer")  # one newer: 3 is still served, finish it first
    heard(ctx, 25.0, cps, cp(6), "trainer")  # its re-announcement changes nothing
    assert ctx.wanted == [3] and cps.fetching.version == 3 and cps.queued.version == 6
    heard(ctx, 30.0, cps, cp(9), "trainer")  # the trainer now serves 9 and 6: 3 is gone
    assert ctx.wanted == [3, 9] and cps.fetching.version == 9 and cps.queued is None
    assert ctx.released == [cp(3).root]
    assert 30.0 - 10.0 < STUCK_AFTER  # given up on the evidence, not the timeout
