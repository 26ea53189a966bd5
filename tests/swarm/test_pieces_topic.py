"""Piece bitmaps (ShardHave) go to a task's pieces topic, joined only by peers that hold or fetch one of
its versions: a relay that fetches nothing is delivered none of them (issue 27: it was delivered every
follower's bitmaps, more the more followers the swarm had)."""

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import ShardHave
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, LocalCommand
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet
from tests.swarm.test_roles import fake_jobs


def swarm_with_a_relay(lifetime: float = 86400.0):
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2) for i in range(2)]
    relay = PeerCore(Identity(b"\x09" * 32), CoreConfig(roles=("relay",)), seed=9)
    net = MemoryNet([trainer, *workers, relay], T0)
    net.jobs = fake_jobs
    net.start()
    for peer in (*workers, relay):
        net.connect(trainer.peer_id, peer.peer_id)
    for w in workers:
        net.connect(relay.peer_id, w.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,), expires_at=T0 + lifetime,
             params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    out = net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    assert [e for e in out if isinstance(e, CommandResult)][0].ok
    return net, trainer, workers, relay, t.task_id


def test_only_the_peers_in_the_exchange_join_the_pieces_topic_and_bitmaps_reach_only_them():
    net, trainer, workers, relay, task_id = swarm_with_a_relay()
    net.run_for(30)
    pieces = topics.task_topic(task_id, topics.PIECES)
    assert trainer.versions[task_id] >= 5
    for core in (trainer, *workers):
        assert pieces in net.subs[core.peer_id]
    assert set(topics.task_topics(task_id)) <= net.subs[relay.peer_id], "the relay knows the task"
    assert pieces not in net.subs[relay.peer_id]
    assert relay.stats.delivered_by_kind["have"] == 0
    assert sum(w.stats.published[pieces] for w in workers) > 0, "followers announce what they hold"
    assert sum(w.stats.accepted[pieces] for w in workers) > 0, "...and hear each other's bitmaps"
    for w in workers:
        assert w.stats.published[topics.task_topic(task_id, "weights")] == 0


def test_a_bitmap_on_the_weights_topic_from_an_older_release_is_still_taken():
    net, trainer, workers, relay, task_id = swarm_with_a_relay()
    net.run_for(10)
    old = Identity(b"\x0a" * 32)
    have = ShardHave(task_id=task_id, root=bytes(32), version=1, bitmap=b"\x05", sent_at=net.now)
    before = workers[0].stats.delivered_by_kind["have"]
    net.inject(workers[0].peer_id, topics.task_topic(task_id, "weights"), seal(old, have).wire, trainer.peer_id)
    assert [v.accepted for p, v in net.verdicts if p == workers[0].peer_id][-1]
    assert workers[0].stats.delivered_by_kind["have"] == before + 1


def test_a_task_that_expires_is_let_go_by_every_role_topic_and_store():
    """Its topics (the pieces topic too), the roles' state, the exchange's downloads and the weights
    blobs. A trainer whose task expired used to crash on its next finished job (the task's chain was
    asked of a table that no longer held it)."""
    net, trainer, workers, relay, task_id = swarm_with_a_relay(lifetime=40.0)
    pieces = topics.task_topic(task_id, topics.PIECES)
    net.run_for(20)
    assert all(pieces in net.subs[w.peer_id] for w in workers)
    assert all(core.blobs.held() for core in (trainer, *workers))
    net.run_for(40)
    assert [p for p, _ in net.events_named("task-expired")].count(trainer.peer_id) == 1
    for core in (trainer, *workers, relay):
        assert not set(topics.task_topics(task_id, pieces=True)) & net.subs[core.peer_id]
        assert not core.shards.exchange.downloads
        assert not core.blobs.held(), "every weights blob of the task is deleted"
        assert all(task_id not in work for work in core.snapshot(net.now)["work"].values())
