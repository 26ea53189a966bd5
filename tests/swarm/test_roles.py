"""Worker and trainer roles driven in memory, with jobs done by a tiny fake executor."""

import hashlib

import pytest

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import RolloutCommitment, WeightManifest
from swarm import jobs, protocols
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, Dial, LocalCommand, MessageVerdict, SendRequest
from swarm.roles import checking
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet, announce_small_task, fake_packed_version


def h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


PRODUCED: dict[bytes, bytes] = {}
CHEATERS: set[str] = set()


def fake_jobs(peer, job):
    """Weights are b'w<version>'; a rollout batch names its version and prompts (and 'CHEAT' when a
    cheater made it); verify fails exactly those. Deterministic."""
    out = _fake_jobs(peer, job)
    PRODUCED.update(out[3])
    return out


def _fake_jobs(peer, job):
    p = job.payload
    if job.kind == jobs.VERIFY:
        blob = PRODUCED.get(p.blob, b"")
        if b"CHEAT" in blob:
            return True, jobs.VerifyResult(False, "toploc", h(b"evidence " + blob)), "", {}
        return True, jobs.VerifyResult(True, "ok", b""), "", {}
    if job.kind == jobs.INIT:
        return packed(0, b"w0")
    if job.kind == jobs.GENERATE:
        blob = f"rollouts v{p.version} {p.prompt_indices} by {peer}".encode() + (b" CHEAT" if peer in CHEATERS else b"")
        return True, jobs.GenerateResult(h(blob), len(blob), 10 * len(p.prompt_indices), 0.5), "", {h(blob): blob}
    if job.kind == jobs.TRAIN:
        return packed(p.version + 1, f"w{p.version + 1}".encode(), {"loss": 0.1})
    raise AssertionError(job.kind)


SHARDS_OF: dict[str, dict[bytes, bytes]] = {}  # unused now (MemoryNet unpacks from its own stores); kept for importers


def packed(version: int, blob: bytes, stats=None):
    return fake_packed_version(version, blob, stats)


def swarm(n_workers=3, params=None, executor=fake_jobs):
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2)
               for i in range(n_workers)]
    net = MemoryNet([trainer, *workers], T0)
    net.jobs = executor
    net.start()
    for w in workers:
        net.connect(trainer.peer_id, w.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,),
             params=params or {"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    out = net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    assert [e for e in out if isinstance(e, CommandResult)][0].ok
    return net, trainer, workers, t.task_id


def test_versions_advance_and_every_worker_follows():
    net, trainer, workers, task_id = swarm()
    net.run_for(30)
    work = trainer.snapshot(net.now)["work"]["trainer"][task_id]
    assert work["version"] >= 5, work
    for w in workers:
        wk = w.snapshot(net.now)["work"]["worker"][task_id]
        assert wk["commitments"] > 0 and max(wk["held_versions"]) >= work["version"] - 1
    installed = [f["version"] for p, f in net.events_named("version-installed")]
    assert installed and max(installed) >= work["version"] - 1
    # Every trained batch came from a worker, and each worker was assigned its own prompts.
    trained = net.events_named("rollout-trained")
    assert {f["worker"] for _, f in trained} <= {w.peer_id for w in workers}
    assert len({f["commitment_id"] for _, f in trained}) == len(trained), "nothing trained twice"


def test_generate_jobs_use_hash_assigned_prompts():
    from gossip.assignment import assign_prompts
    net, trainer, workers, task_id = swarm(n_workers=1)
    net.run_for(10)
    gens = [j.payload for p, j in net.jobs_run if j.kind == jobs.GENERATE]
    assert gens
    by_version = {}
    for g in gens:
        by_version.setdefault(g.version, []).extend(g.prompt_indices)
    for version, indices in by_version.items():
        assert indices == assign_prompts(task_id, workers[0].identity.public_key, version, len(indices), 1 << 30)


def test_too_old_rollouts_are_refused_with_a_reason():
    net, trainer, workers, task_id = swarm(n_workers=1)
    net.run_for(20)
    version = trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"]
    assert version >= 4
    stale = RolloutCommitment(task_id=task_id, policy_version=version - 3, created_at=net.now, blob_hash=h(b"x"),
                              blob_size=1, prompt_indices=(1, 2, 3, 4), samples_per_prompt=4, num_tokens=1,
                              mean_reward=0.0)
    wire = seal(workers[0].identity, stale).wire
    verdict = net.inject(trainer.peer_id, topics.task_topic(task_id, "rollouts"), wire, workers[0].peer_id)[0]
    assert verdict == MessageVerdict(False, "too-old")


def test_manifest_from_a_key_the_task_does_not_name_is_unauthorized():
    net, trainer, workers, task_id = swarm(n_workers=1)
    net.run_for(5)
    forged = WeightManifest(task_id=task_id, version=99, parent_version=-1, parent_root=b"", encoding="full",
                            dtype="safetensors", root=h(b"evil"), shard_size=4, raw_size=4, compressed_size=4,
                            shard_hashes=(h(b"evil"),), tensors=(), created_at=net.now)
    wire = seal(Identity(b"\x66" * 32), forged).wire
    verdict = net.inject(workers[0].peer_id, topics.task_topic(task_id, "weights"), wire, trainer.peer_id)
    assert verdict[0] == MessageVerdict(False, "unauthorized")
    assert workers[0].snapshot(net.now)["work"]["worker"][task_id]["latest_version"] < 99


@pytest.mark.parametrize("damage,reason", [(lambda v: bytes([v[0] ^ 1]) + v[1:], "bad-shard"),
                                           (lambda v: v[:-1], "truncated")])
def test_corrupt_weights_are_never_installed(damage, reason):
    def corrupting(peer, job):
        ok, result, error, produced = fake_jobs(peer, job)
        if job.kind in (jobs.INIT, jobs.TRAIN):  # the trainer's store holds bytes that do not match
            produced = {k: damage(v) for k, v in produced.items()}
        return ok, result, error, produced
    net, trainer, workers, task_id = swarm(n_workers=1, executor=corrupting)
    net.check_reads = False  # the trainer's runtime sends what its disk holds: the worker's checks must hold
    net.run_for(15)
    assert not net.events_named("version-installed")
    rejected = net.events_named("shard-rejected")
    assert rejected and {f["reason"] for _, f in rejected} == {reason}
    assert {f["peer"] for _, f in rejected} == {trainer.peer_id}
    assert not net.shards[workers[0].peer_id], "nothing unverified is stored"
    assert workers[0].ledger.get(trainer.peer_id).rejected[reason] >= 1


def test_failed_jobs_are_retried_and_rollouts_not_lost():
    net, trainer, workers, task_id = swarm(n_workers=2)
    real_jobs = net.jobs
    failures = {"n": 0}

    def flaky(peer, job):
        if job.kind == jobs.TRAIN and failures["n"] < 2:
            failures["n"] += 1
            return False, None, "out of memory", {}
        return real_jobs(peer, job)
    net.jobs = flaky
    net.run_for(40)
    assert [f for _, f in net.events_named("job-failed") if f["kind"] == "train"]
    assert trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"] >= 3


def test_cheater_is_caught_banned_by_everyone_and_never_trained_on():
    net, trainer, workers, task_id = swarm(n_workers=4)
    CHEATERS.add(workers[0].peer_id)
    try:
        net.run_for(40)
    finally:
        CHEATERS.clear()
    cheater = workers[0].peer_id
    for core in [trainer, *workers[1:]]:
        assert core.is_banned(cheater), core.peer_id
    trained = [f for _, f in net.events_named("rollout-trained")]
    assert trained and cheater not in {f["worker"] for f in trained}
    for honest in workers[1:]:
        assert not any(c.is_banned(honest.peer_id) for c in [trainer, *workers])
    assert trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"] >= 3


def test_replayed_commitment_is_proof_and_bans():
    net, trainer, workers, task_id = swarm(n_workers=2)
    net.run_for(10)
    w = workers[0]
    (_, first), *_ = [(p, j) for p, j in net.jobs_run if p == w.peer_id and j.kind == jobs.GENERATE]
    blob = h(f"rollouts v{first.payload.version} {first.payload.prompt_indices} by {w.peer_id}".encode())
    again = RolloutCommitment(task_id=task_id, policy_version=trainer.versions[task_id], created_at=net.now,
                              blob_hash=blob, blob_size=10, prompt_indices=(7, 8, 9, 10), samples_per_prompt=4,
                              num_tokens=1, mean_reward=1.0)
    verdict = net.inject(trainer.peer_id, topics.task_topic(task_id, "rollouts"), seal(w.identity, again).wire,
                         w.peer_id)[0]
    assert verdict == MessageVerdict(False, "cheated")
    assert trainer.is_banned(w.peer_id)


def test_verdicts_forged_replayed_or_about_unknown_commitments_are_rejected():
    from gossip.messages import Verdict
    net, trainer, workers, task_id = swarm(n_workers=1)
    topic = topics.task_topic(task_id, "verdicts")
    unknown = Verdict(task_id=task_id, commitment_id=h(b"nothing"), subject=workers[0].identity.public_key,
                      passed=False, reason="toploc", evidence_hash=h(b"e"), created_at=net.now, detail="")
    wire = seal(trainer.identity, unknown).wire
    assert net.inject(workers[0].peer_id, topic, wire, trainer.peer_id)[0] == MessageVerdict(False, "unknown-commitment")
    assert net.inject(workers[0].peer_id, topic, wire[:-1] + bytes([wire[-1] ^ 1]), trainer.peer_id)[0].reason in (
        "bad-signature", "malformed")
    assert net.inject(workers[0].peer_id, topic, wire, trainer.peer_id)[0] == MessageVerdict(False, "duplicate")


def test_validator_role_checks_and_its_verdicts_ban_cheaters():
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    validator = PeerCore(Identity(b"\x09" * 32), CoreConfig(roles=("validator",)), seed=9)
    workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2) for i in range(3)]
    net = MemoryNet([trainer, validator, *workers], T0)
    net.jobs = fake_jobs
    net.start()
    for other in [validator, *workers]:
        net.connect(trainer.peer_id, other.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,), validator_keys=(validator.identity.public_key,),
             params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    CHEATERS.add(workers[0].peer_id)
    try:
        net.run_for(30)
    finally:
        CHEATERS.clear()
    work = validator.snapshot(net.now)["work"]["validator"][t.task_id]
    assert work["passed"] > 0 and work["failed"] >= 1
    assert all(c.is_banned(workers[0].peer_id) for c in [trainer, validator, *workers[1:]])


@pytest.mark.parametrize("job_remembers", [True, False])
def test_a_crash_restarted_worker_never_commits_a_slice_twice(job_remembers):
    """The batch counter is in the core's memory; a restarted worker starts at slice 0 of the newest
    version again. Its job process remembers the slices it generated (trainer/generated.py) and
    answers `repeated`, so the worker moves on; without that memory it re-commits a slice and is
    banned as a replayer (found by the simulator's churn scenario)."""
    made: dict[str, set] = {}
    training = [True]

    def remembering(peer, job):
        if job.kind == jobs.TRAIN and not training[0]:
            return False, None, "paused by the test", {}
        if job.kind == jobs.GENERATE and job_remembers:
            key = (job.payload.version, tuple(job.payload.prompt_indices))
            if key in made.setdefault(peer, set()):
                return True, jobs.GenerateResult(b"", 0, 0, 0.0, repeated=True), "", {}
            made[peer].add(key)
        return fake_jobs(peer, job)

    net, trainer, (worker,), task_id = swarm(n_workers=1, executor=remembering)
    net.run_for(6)
    training[0] = False  # the version stays put, so the restarted worker comes back to the same one
    net.run_for(10)
    version = trainer.versions[task_id]
    committed = [f["version"] for p, f in net.events_named("rollouts-committed") if p == worker.peer_id]
    assert committed[-1] == version
    net.stop(worker.peer_id)
    restarted = PeerCore(worker.identity, CoreConfig(roles=("worker",)), seed=99)
    net.cores[worker.peer_id], net.subs[worker.peer_id], net.gossip_seen[worker.peer_id] = restarted, set(), set()
    net.start(worker.peer_id)
    net.connect(trainer.peer_id, worker.peer_id)
    net.run_for(10)
    training[0] = True
    net.run_for(10)
    assert trainer.is_banned(worker.peer_id) is not job_remembers
    if job_remembers:
        skipped = [f for p, f in net.events_named("rollouts-skipped") if p == worker.peer_id]
        assert skipped and {f["version"] for f in skipped} == {version}
        assert trainer.versions[task_id] > version + 2  # training went on with the restarted worker


def test_weights_of_released_versions_are_deleted_everywhere():
    """Every version is a weights blob on every peer; those older than the async window plus a margin
    are dropped (a 900 s local run kept 5.6 GB of them per worker before), the newest never."""
    net, trainer, workers, task_id = swarm(n_workers=2)
    net.run_for(30)
    newest = trainer.versions[task_id]
    assert newest >= 8
    for core in [trainer, *workers]:
        dropped = {d for p, d in net.dropped_blobs if p == core.peer_id}
        held = (range(newest + 1) if core is trainer else  # a worker may skip versions, never holding them
                {f["version"] for p, f in net.events_named("version-installed") if p == core.peer_id})
        old = {h(f"w{v}".encode()) for v in held if v < newest - 5}  # window 2, margin 1, a version behind
        assert len(old) >= newest - 12 and old <= dropped, (core.peer_id, len(old), len(dropped))
        assert h(f"w{newest}".encode()) not in dropped and h(f"w{newest}".encode()) in net.blobs[core.peer_id]
    for w in workers:  # what a worker still holds is still on its disk
        for digest in w.blobs.held():
            assert digest in net.blobs[w.peer_id]


def test_a_trainer_with_no_link_to_a_worker_dials_it_for_the_blob():
    """A commitment reaches the trainer through another peer; its blob is only at the worker. The
    trainer dials the worker and fetches it once the link opens (not when the retry is due: a checker
    waiting BLOB_RETRY for a dial that takes milliseconds trained a sixth of a 16-worker swarm's batches
    two versions staler), instead of dropping the batch (in a 1,000-peer simulation one dropped batch
    stalled every later step)."""
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    near = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("worker",)), seed=2)
    far = PeerCore(Identity(b"\x03" * 32), CoreConfig(roles=("worker",)), seed=3)
    net = MemoryNet([trainer, near, far], T0)
    net.jobs = fake_jobs
    dials = []
    carry = net._carry_out

    fetches, opened = [], []  # when the trainer asked the far worker for a blob; when its dial went through

    def no_link_to_far(peer, inp, effect):  # only the trainer's blob retry may open that link
        if isinstance(effect, Dial) and {peer, effect.peer} == {trainer.peer_id, far.peer_id}:
            dials.append(net.now)
            if not any(e[0] == "rollouts-committed" for e in far_commits()):
                return
            opened.append(net.now)
        if isinstance(effect, SendRequest) and peer == trainer.peer_id and effect.peer == far.peer_id \
                and effect.protocol == protocols.BLOB:
            fetches.append(net.now)
        carry(peer, inp, effect)
    net._carry_out = no_link_to_far

    def far_commits():
        return [("rollouts-committed", f) for p, f in net.events_named("rollouts-committed") if p == far.peer_id]
    net.start()
    net.connect(trainer.peer_id, near.peer_id)
    net.connect(near.peer_id, far.peer_id)
    net.run_for(3)
    t = announce_small_task(net, trainer)
    net.run_for(20)
    assert far_commits(), "the far worker got the weights through the near one and committed"
    assert dials, "the trainer dialed the far worker"
    assert opened and fetches and fetches[0] - opened[0] < 0.1 < checking.BLOB_RETRY, (opened, fetches)
    dropped = [f for p, f in net.events_named("rollout-dropped") if p == trainer.peer_id]
    assert not [f for f in dropped if "blob not served" in f["reason"]], dropped
    trained = {f["worker"] for p, f in net.events_named("rollout-trained")}
    assert far.peer_id in trained, "the far worker's batches were fetched and trained on"


def test_roles_reach_the_peer_only_through_their_context():
    """Every role (the shard exchange too) is built with a `RoleContext` and holds no reference to the
    core; no role module names the core or a private of the context (swarm/context.py)."""
    import re
    from pathlib import Path

    import swarm.roles
    from swarm.context import RoleContext

    core = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("worker", "trainer", "validator", "mirror")), seed=1)
    assert [r.name for r in core.roles] == ["worker", "trainer", "validator", "mirror"]
    for role in core.roles + [core.shards]:
        assert role.ctx is core.context and isinstance(role.ctx, RoleContext)
        assert not any(value is core for value in vars(role).values())
    for path in sorted(Path(swarm.roles.__file__).parent.glob("*.py")):
        source = path.read_text()
        assert not re.search(r"\bcore\.|\bctx\._|\._[a-z]\w*\(", source.replace("self._", "")), path.name


def test_a_peer_that_refuses_the_task_stops_working_on_it_and_the_others_go_on():
    """A job error starting 'refused: ' (trainer/pins.py: another generator version, other weights)
    stops that peer's role for the task: one task-refused event, no retries, no verdicts from it,
    and no penalty for anyone; the other workers keep training."""
    net, trainer, workers, task_id = swarm(n_workers=3)
    odd = workers[0].peer_id
    real_jobs = net.jobs
    reason = ("refused: the task's environment 'reasoning-gym:x' needs reasoning-gym==0.1.25, this peer has "
              "reasoning-gym==0.1.24" + " (details)" * 40 + ": run `pip install 'reasoning-gym==0.1.25'`")

    def jobs_of(peer, job):
        if peer == odd:
            return False, None, reason, {}
        return real_jobs(peer, job)
    net.jobs = jobs_of
    net.run_for(40)
    refused = net.events_named("task-refused")
    assert refused == [(odd, {"task_id": task_id, "role": "worker", "reason": reason})]
    # refused once, never asked again (it still follows and relays the versions: unpack jobs)
    assert [run.kind for peer, run in net.jobs_run if peer == odd and run.kind != jobs.UNPACK] == [jobs.GENERATE]
    assert not [f for p, f in net.events_named("job-failed") if p == odd]
    assert workers[0].snapshot(net.now)["work"]["worker"][task_id]["refused"] == reason
    assert trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"] >= 3
    assert not trainer.ledger.banned_peers() and not workers[1].ledger.banned_peers()


def test_a_trainer_that_refuses_the_task_starts_nothing_more():
    trainer_id = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1).peer_id
    net, trainer, workers, task_id = swarm(n_workers=1, executor=lambda peer, job: (
        (False, None, "refused: model 'hf:a/b@x' is not in the cache", {}) if peer == trainer_id
        else fake_jobs(peer, job)))
    net.run_for(30)
    assert [p for p, _ in net.events_named("task-refused")] == [trainer.peer_id]
    assert [run.kind for peer, run in net.jobs_run if peer == trainer.peer_id] == [jobs.INIT]
    work = trainer.snapshot(net.now)["work"]["trainer"][task_id]
    assert work["version"] == -1 and work["refused"].startswith("refused: model")
    assert not net.events_named("job-failed")


def test_a_validator_that_refuses_the_task_judges_nothing():
    """A trusted validator whose generator differs from the task's would fail honest batches: its
    verify job is refused instead, and it publishes no verdict at all; the swarm trains on."""
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    validator = PeerCore(Identity(b"\x09" * 32), CoreConfig(roles=("validator",)), seed=9)
    workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2) for i in range(2)]
    net = MemoryNet([trainer, validator, *workers], T0)
    net.jobs = lambda peer, job: ((False, None, "refused: needs reasoning-gym==0.1.25, this peer has 0.1.24", {})
                                  if peer == validator.peer_id else fake_jobs(peer, job))
    net.start()
    for other in [validator, *workers]:
        net.connect(trainer.peer_id, other.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,), validator_keys=(validator.identity.public_key,),
             params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    net.run_for(30)
    work = validator.snapshot(net.now)["work"]["validator"][t.task_id]
    assert work["refused"].startswith("refused: needs") and work["passed"] == work["failed"] == 0
    assert [p for p, _ in net.events_named("task-refused")] == [validator.peer_id]
    started = [run.kind for p, run in net.jobs_run if p == validator.peer_id and run.kind != jobs.UNPACK]
    assert set(started) == {jobs.VERIFY}  # the ones already running when the first answer came
    net.run_for(20)
    assert len([1 for p, run in net.jobs_run if p == validator.peer_id and run.kind != jobs.UNPACK]) == len(started)
    assert not any(c.ledger.banned_peers() for c in [trainer, validator, *workers])
    assert trainer.snapshot(net.now)["work"]["trainer"][t.task_id]["version"] >= 3
