"""Task summaries: the active trainer's one message for the whole task (swarm/roles/summary.py), held by
every peer of the task (swarm/summaries.py), and the evidence a relay takes from it (swarm/evidence.py)."""

from __future__ import annotations

from gossip import errors, topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat, TaskSummary
from swarm.core import CoreConfig, PeerCore
from swarm.io import MessageReceived
from swarm.roles import summary
from swarm.summaries import TaskSummaries
from tests.samples import ALICE, BOB, T0, task
from tests.swarm.harness import MemoryNet, announce_small_task
from tests.swarm.test_roles import fake_jobs


def summary_of(t, version=3, term=0, workers=(), sent_at=T0) -> TaskSummary:
    return TaskSummary(task_id=t.task_id, version=version, term=term, workers=tuple(workers), completions=0,
                       trainers_alive=(), versions=1, sent_at=sent_at)


def small_swarm():
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    relay = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("relay",)), seed=2)
    workers = [PeerCore(Identity(bytes([3 + i]) * 32), CoreConfig(roles=("worker",)), seed=3 + i) for i in range(2)]
    net = MemoryNet([trainer, relay, *workers], T0)
    net.jobs = fake_jobs
    net.start()
    for w in workers:
        net.connect(relay.peer_id, w.peer_id)
    net.connect(trainer.peer_id, relay.peer_id)
    net.run_for(3)
    t = announce_small_task(net, trainer)
    return net, trainer, relay, workers, t


def test_every_peer_holds_the_trainers_summary_which_lists_its_workers_and_goes_out_at_most_every_30_s():
    net, trainer, relay, workers, t = small_swarm()
    sent = []
    publish = trainer.context.publish

    def counting(now, topic, message):
        if isinstance(message, TaskSummary):
            sent.append((now, message))
        return publish(now, topic, message)

    trainer.context.publish = counting
    net.run_for(70)
    assert len(sent) == 3, [at - T0 for at, _ in sent]  # at the first version, then every 30 s or so
    for (a, older), (b, newer) in zip(sent, sent[1:]):
        assert b - a >= summary.SUMMARY_EVERY and newer.version - older.version >= 10  # a version every few s
    newest = sent[-1][1]
    assert set(newest.workers) == {w.peer_id for w in workers} and newest.trainers_alive == (trainer.peer_id,)
    assert newest.completions > 0 and newest.versions == summary.SUMMARY_VERSIONS
    for peer in (relay, *workers):
        held = peer.summaries.get(t.task_id)
        assert held is not None and held.summary == newest and held.signer == trainer.peer_id
        snap = next(x for x in peer.snapshot(net.now)["tasks"] if x["task_id"] == t.task_id)["summary"]
        assert snap["workers"] == 2 and snap["version"] == newest.version and snap["trainers_alive"] == 1


def test_a_summary_signed_by_a_key_the_task_does_not_name_is_refused_unauthorized():
    relay = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("relay",)), seed=2)
    t = task()
    relay.tasks.add(T0, seal(ALICE, t))
    topic = topics.task_topic(t.task_id, "weights")
    forged = relay.handle(T0, MessageReceived(topic, seal(BOB, summary_of(t, workers=(BOB.peer_id,))).wire, "x"))[0]
    assert not forged.accepted and forged.reason == errors.UNAUTHORIZED and relay.summaries.get(t.task_id) is None
    assert relay.handle(T0, MessageReceived(topic, seal(ALICE, summary_of(t)).wire, "x"))[0].accepted
    assert relay.summaries.get(t.task_id).signer == ALICE.peer_id


def test_the_newest_summary_of_the_highest_term_is_kept():
    t = task()
    held = TaskSummaries()
    assert held.add(summary_of(t, version=5, term=1), "a")
    assert not held.add(summary_of(t, version=9, term=0, sent_at=T0 + 9), "b")  # an older chain's, however new
    assert held.add(summary_of(t, version=6, term=1), "a")
    assert not held.add(summary_of(t, version=6, term=1, sent_at=T0 - 1), "a")
    assert held.add(summary_of(t, version=2, term=2, workers=("w",)), "c")  # a takeover's first
    assert held.get(t.task_id).signer == "c" and held.lists(t.task_id, "w") and not held.lists(t.task_id, "a")
    held.forget(t.task_id)
    assert held.get(t.task_id) is None and not held.lists(t.task_id, "w")


def test_the_summary_reaches_back_16_versions_and_lists_the_most_recent_workers_first_when_full():
    recent = summary.Recent()
    for v in range(20):
        recent.trained([f"w{v}"], 10)
    assert recent.versions() == summary.SUMMARY_VERSIONS and recent.completions() == 10 * summary.SUMMARY_VERSIONS
    assert recent.workers() == tuple(f"w{v}" for v in range(19, 3, -1))  # versions 4..19, newest first
    crowded = summary.Recent()
    crowded.trained([f"old{i}" for i in range(400)], 1)
    crowded.trained([f"new{i}" for i in range(400)] + ["old0"], 1)
    workers = crowded.workers()
    assert len(workers) == summary.MAX_WORKERS and workers[:400] == tuple(f"new{i}" for i in range(400))
    assert workers[400] == "old0" and len(set(workers)) == len(workers)


def test_a_relay_relays_a_listed_workers_heartbeat_and_keeps_a_fresh_keys():
    """A relay that joined after a worker's commitments went by holds none of them; the summary still
    shows the worker works on the task, where a fresh key naming it has nothing behind it."""
    relay = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("relay",)), seed=2)
    t = task()
    relay.tasks.add(T0, seal(ALICE, t))
    listed, fresh = Identity(b"\x0a" * 32), Identity(b"\x0b" * 32)
    topic = topics.task_topic(t.task_id, "weights")
    assert relay.handle(T0, MessageReceived(topic, seal(ALICE, summary_of(t, workers=(listed.peer_id,))).wire, "x"))[0].accepted
    verdicts = {}
    for key in (listed, fresh):
        beat = StatusHeartbeat(seq=1, sent_at=T0, interval=2.0, roles=("worker",), agent="t", listen_addrs=(),
                               tasks=(t.task_id,), versions={}, known_peers=(), peers=0)
        verdicts[key.peer_id] = relay.handle(T0, MessageReceived(topics.STATUS, seal(key, beat).wire, "far"))[0]
    assert verdicts[listed.peer_id].accepted
    assert not verdicts[fresh.peer_id].accepted and verdicts[fresh.peer_id].reason == errors.KEPT
