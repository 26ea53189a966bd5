"""Verdicts: who may act on them, what a bad one costs, and why one lying validator cannot get
honest workers banned (swarm/trust.py, `Trust._weigh_verdicts`), with jobs done by test_roles' fake executor."""

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import Verdict
from swarm import jobs
from swarm.core import CoreConfig, PeerCore
from swarm.io import LocalCommand, MessageVerdict
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet
from tests.swarm.test_roles import CHEATERS, SHARDS_OF, fake_jobs, h, swarm

PARAMS = {"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8}


def validated_swarm(n_validators: int, liars: set[int], with_trainer: bool = True, n_workers: int = 3):
    """Trainer (optional), validators (those in `liars` invert every check) and workers; the task
    trusts every validator."""
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",) if with_trainer else ("relay",)), seed=1)
    validators = [PeerCore(Identity(bytes([0x40 + i]) * 32), CoreConfig(roles=("validator",)), seed=40 + i)
                  for i in range(n_validators)]
    workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2)
               for i in range(n_workers)]
    lying = {validators[i].peer_id for i in liars}

    def executor(peer, job):
        ok, result, error, produced = fake_jobs(peer, job)
        if job.kind == jobs.VERIFY and peer in lying:
            result = (jobs.VerifyResult(True, "ok", b"") if not result.passed
                      else jobs.VerifyResult(False, "toploc", h(b"made up " + job.payload.blob)))
        return ok, result, error, produced

    net = MemoryNet([trainer, *validators, *workers], T0)
    net.jobs = executor
    SHARDS_OF.clear()
    SHARDS_OF.update(net.shards)
    net.start()
    peers = [trainer, *validators, *workers]
    for i, a in enumerate(peers):
        for b in peers[i + 1:]:
            net.connect(a.peer_id, b.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,), params=PARAMS,
             validator_keys=tuple(v.identity.public_key for v in validators))
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    return net, trainer, validators, workers, t


def test_lying_validator_cannot_get_honest_workers_banned_and_loses_trust_everywhere():
    net, trainer, (liar,), workers, t = validated_swarm(1, {0})
    CHEATERS.add(workers[0].peer_id)
    try:
        net.run_for(40)
    finally:
        CHEATERS.clear()
    cheater, honest = workers[0], workers[1:]
    assert trainer.snapshot(net.now)["work"]["trainer"][t.task_id]["version"] >= 3
    for core in [trainer, *honest]:
        assert core.is_banned(cheater.peer_id), core.peer_id  # the trainer's verdict settles it
        assert core.is_banned(liar.peer_id), core.peer_id  # its verdicts contradict the trainer's
        assert "wrong verdict" in core.ledger.get(liar.peer_id).ban_reason
        for w in honest:
            assert not core.is_banned(w.peer_id), (core.peer_id, w.peer_id)
    trained = {f["worker"] for _, f in net.events_named("rollout-trained")}
    assert cheater.peer_id not in trained and trained


def test_without_a_trainer_verdict_one_validator_is_not_enough_and_two_are():
    net, relay, validators, workers, t = validated_swarm(2, liars=set(), with_trainer=False, n_workers=1)
    net.run_for(5)
    w = workers[0]
    from gossip.messages import RolloutCommitment
    c = RolloutCommitment(task_id=t.task_id, policy_version=0, created_at=net.now, blob_hash=h(b"b"), blob_size=1,
                          prompt_indices=(1, 2, 3, 4), samples_per_prompt=4, num_tokens=4, mean_reward=0.5)
    signed = seal(w.identity, c)
    rollouts, verdicts = topics.task_topic(t.task_id, "rollouts"), topics.task_topic(t.task_id, "verdicts")
    assert net.inject(relay.peer_id, rollouts, signed.wire, w.peer_id)[0] == MessageVerdict(True)

    def fail(validator):
        v = Verdict(task_id=t.task_id, commitment_id=signed.msg_id, subject=w.identity.public_key, passed=False,
                    reason="toploc", evidence_hash=h(b"e"), created_at=net.now, detail="")
        return net.inject(relay.peer_id, verdicts, seal(validator.identity, v).wire, validator.peer_id)[0]

    assert fail(validators[0]) == MessageVerdict(True)
    assert not relay.is_banned(w.peer_id), "one validator's word alone bans nobody"
    assert fail(validators[1]) == MessageVerdict(True)
    assert relay.is_banned(w.peer_id) and "2+ validators" in relay.ledger.get(w.peer_id).ban_reason


def test_verdict_about_another_worker_or_from_an_untrusted_key():
    net, trainer, workers, task_id = swarm(n_workers=2)
    net.run_for(10)
    w, other = workers
    book = other.book(task_id)
    cid, seen = next((cid, s) for cid, s in book._by_id.items() if s.worker == w.peer_id)
    topic = topics.task_topic(task_id, "verdicts")

    def verdict(subject: bytes, signer: Identity) -> bytes:
        v = Verdict(task_id=task_id, commitment_id=cid, subject=subject, passed=False, reason="toploc",
                    evidence_hash=h(b"e" + signer.public_key), created_at=net.now, detail="")
        return seal(signer, v).wire

    # A verdict naming someone else than the commitment's signer is malformed evidence.
    wrong = verdict(other.identity.public_key, trainer.identity)
    assert net.inject(other.peer_id, topic, wrong, trainer.peer_id)[0] == MessageVerdict(False, "schema")
    assert not other.is_banned(w.peer_id) and not other.is_banned(other.peer_id)
    # A key the task does not trust may gossip verdicts; nobody acts on them.
    stranger = Identity(b"\x77" * 32)
    assert net.inject(other.peer_id, topic, verdict(w.identity.public_key, stranger), trainer.peer_id)[0].accepted
    assert not other.is_banned(w.peer_id)
    # The trainer's own verdict is acted on by everyone.
    assert net.inject(other.peer_id, topic, verdict(w.identity.public_key, trainer.identity), trainer.peer_id)[0].accepted
    assert other.is_banned(w.peer_id)
    # A verdict that was already delivered is a duplicate, and one from the banned worker is dropped.
    assert net.inject(other.peer_id, topic, verdict(w.identity.public_key, trainer.identity),
                      trainer.peer_id)[0] == MessageVerdict(False, "duplicate")
    assert net.inject(other.peer_id, topic, verdict(other.identity.public_key, w.identity),
                      trainer.peer_id)[0] == MessageVerdict(False, "banned")
