"""A task announced with `member_topics` is carried by its members only (gossip/topics.py `MEMBERS`,
swarm/memberlinks.py): relays subscribe to none of its topics, its workers' heartbeats go to its members
topic, and members that only relays joined link to each other and train (issue 27: at 10,000 peers the
members' heartbeats and the task's messages were 70% of what every relay was delivered)."""

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, LocalCommand
from swarm.membership import MembershipConfig
from swarm.roles import welcome
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet
from tests.swarm.test_roles import fake_jobs

ONE_LINK = MembershipConfig(target_connections=1)
PARAMS = {"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8}


def members_behind_relays(member_topics: bool = True):
    """trainer - relay - relay - two workers: the members meet only through relays, and every peer has the
    one link it wants (so any other link is a member link)."""
    def core(key: int, role: str) -> PeerCore:
        return PeerCore(Identity(bytes([key]) * 32), CoreConfig(roles=(role,), membership=ONE_LINK), seed=key)
    trainer, workers, relays = core(1, "trainer"), [core(2, "worker"), core(3, "worker")], [core(8, "relay"), core(9, "relay")]
    net = MemoryNet([trainer, *workers, *relays], T0)
    net.jobs = fake_jobs
    net.start()
    net.connect(trainer.peer_id, relays[0].peer_id)
    net.connect(relays[0].peer_id, relays[1].peer_id)
    for w in workers:
        net.connect(relays[1].peer_id, w.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,), params={**PARAMS, "member_topics": member_topics})
    out = net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    assert [e for e in out if isinstance(e, CommandResult)][0].ok
    return net, trainer, workers, relays, t.task_id


def linked(net: MemoryNet, a: PeerCore, b: PeerCore) -> bool:
    return b.peer_id in net.neighbours(a.peer_id)


def test_members_behind_relays_link_to_each_other_and_train_while_the_relays_carry_none_of_it():
    net, trainer, workers, relays, task_id = members_behind_relays()
    net.run_for(5)  # the workers learn the task
    before = [w.stats.published[topics.STATUS] for w in workers]
    net.run_for(60)
    members_topic = topics.task_topic(task_id, topics.MEMBERS)
    assert trainer.versions[task_id] >= 3, "the workers' batches reach the trainer"
    for w, status in zip(workers, before):
        assert linked(net, w, trainer), "a worker dials the trainer the task names"
        assert set(topics.task_topics(task_id, members=True)) <= net.subs[w.peer_id]
        assert w.stats.published[members_topic] > 0 and w.stats.published[topics.STATUS] == status
    assert trainer.stats.published[topics.STATUS] > 0, "trainers stay on the status topic: the address book"
    version = trainer.versions[task_id]
    assert set(trainer.context.workers_of(task_id, version)) == {w.peer_id for w in workers}
    assert workers[1].peer_id in workers[0].membership.alive_peers(), "workers hear each other on the members topic"
    for r in relays:
        assert task_id in r.tasks.tasks, "relays still know the task (they pass on its announcement)"
        assert not set(topics.task_topics(task_id, members=True, pieces=True)) & net.subs[r.peer_id]
        for kind in ("rollout", "verdict", "manifest", "summary"):
            assert r.stats.delivered_by_kind[kind] == 0, kind
        assert all(w.peer_id not in r.membership.peers or r.membership.peers[w.peer_id].tasks == ()
                   or linked(net, r, w) for w in workers), "a relay hears a worker only over its link"


def test_without_member_topics_relays_carry_the_task_as_before():
    net, trainer, workers, relays, task_id = members_behind_relays(member_topics=False)
    net.run_for(60)
    assert trainer.versions[task_id] >= 3
    for r in relays:
        assert set(topics.task_topics(task_id)) <= net.subs[r.peer_id]
        assert r.stats.delivered_by_kind["rollout"] > 0
    for w in workers:
        assert w.stats.published[topics.STATUS] > 0
        assert w.stats.published[topics.task_topic(task_id, topics.MEMBERS)] == 0


def beat(signer: Identity, now: float, tasks: tuple[str, ...], seq: int = 1) -> bytes:
    hb = StatusHeartbeat(seq=seq, sent_at=now, interval=10.0, roles=("worker",), agent="x",
                         listen_addrs=("/ip4/10.9.9.9/tcp/1",), tasks=tasks, versions={}, known_peers=(), peers=0)
    return seal(signer, hb).wire


def test_a_heartbeat_on_a_members_topic_must_name_its_task():
    net, trainer, workers, relays, task_id = members_behind_relays()
    net.run_for(20)
    stranger = Identity(b"\x30" * 32)
    members_topic = topics.task_topic(task_id, topics.MEMBERS)
    net.inject(workers[0].peer_id, members_topic, beat(stranger, net.now, ()), trainer.peer_id)
    verdict = [v for p, v in net.verdicts if p == workers[0].peer_id][-1]
    assert not verdict.accepted and verdict.reason == "wrong-topic"


def test_a_fresh_key_that_claims_to_work_on_the_task_is_never_dialled():
    net, trainer, workers, relays, task_id = members_behind_relays()
    net.run_for(20)
    fake = Identity(b"\x31" * 32)
    w = workers[0]
    net.inject(w.peer_id, topics.task_topic(task_id, topics.MEMBERS), beat(fake, net.now, (task_id,)), trainer.peer_id)
    assert fake.peer_id in w.membership.peers, "taken as a newcomer"
    assert not w.member_links.is_member(w.membership.peers[fake.peer_id], task_id)
    assert w.member_links.is_member(w.membership.peers[trainer.peer_id], task_id)
    net.run_for(30)  # the worker wants 4 member links and knows of 2 members: it looks for more all along
    assert w.membership.peers[fake.peer_id].dial_failures == 0, "never dialled: nothing shows it works on the task"


def test_a_member_that_links_after_the_version_went_by_gets_it_within_seconds():
    """Gossip does not replay, and a members-only task's members join its mesh only once linked to a
    member: the trainer re-announces soon after a link opens (swarm/roles/welcome.py), not at its next
    `republish_interval` (300 s here)."""
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",), membership=ONE_LINK), seed=1)
    relay = PeerCore(Identity(b"\x08" * 32), CoreConfig(roles=("relay",), membership=ONE_LINK), seed=8)
    late = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("worker",), membership=ONE_LINK), seed=2)
    net = MemoryNet([trainer, relay, late], T0)
    net.jobs = fake_jobs
    net.start()
    net.connect(trainer.peer_id, relay.peer_id)
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,),
             params={**PARAMS, "member_topics": True, "republish_interval": 300.0})
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    net.run_for(40)
    assert trainer.versions[t.task_id] == 0 and t.task_id not in late.versions
    net.connect(relay.peer_id, late.peer_id)
    net.run_for(30)
    assert linked(net, late, trainer)
    assert late.versions.get(t.task_id, -1) >= 0, "the late member has the version well before the 300-s re-announcement"


def test_links_opening_one_after_another_bring_the_reannouncement_forward_at_most_once_per_gap():
    """The trainer re-announced at 90 s (republish_interval 300); links open at 100 and 105 s: the next
    re-announcement comes at 120 s (WELCOME_GAP after the last), not 2 s after the second link."""
    net, trainer, workers, relays, task_id = members_behind_relays()
    net.run_for(20)
    state = next(r for r in trainer.roles if r.name == "trainer").tasks[task_id]
    name = f"trainer:{task_id}:announce"
    state.announced_at = 90.0
    trainer.timers.set(name, 390.0)
    welcome.soon(trainer.context, 100.0, {task_id: state})
    assert trainer.timers.due(name) == 90.0 + welcome.WELCOME_GAP
    welcome.soon(trainer.context, 105.0, {task_id: state})
    assert trainer.timers.due(name) == 90.0 + welcome.WELCOME_GAP, "one early re-announcement per gap"
    welcome.soon(trainer.context, 200.0, {task_id: state})
    assert trainer.timers.due(name) == 90.0 + welcome.WELCOME_GAP, "never later than it was due"
