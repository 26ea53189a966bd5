"""The newcomer budget: fresh keys' heartbeats take a bounded part of the table and of our pace
(swarm/membership.py; issue 27, attack 1), while peers something costly vouches for always get in."""

from __future__ import annotations

import pytest

from gossip import errors
from gossip import topics
from gossip.envelope import seal
from gossip.errors import Rejected
from gossip.identity import Identity
from gossip.messages import RolloutCommitment, StatusHeartbeat
from swarm.core import CoreConfig, PeerCore
from swarm.io import LocalCommand, MessageReceived
from swarm.membership import ALIVE, Membership, MembershipConfig
from swarm.newcomers import NoRoom
from tests.samples import ALICE, T0, task
from tests.swarm.harness import MemoryNet
from tests.swarm.test_roles import fake_jobs

HOUR = 3599.5  # what the attack's fakes declared


def beat(now: float, seq: int = 1, interval: float = HOUR, roles=("worker",)) -> StatusHeartbeat:
    return StatusHeartbeat(seq=seq, sent_at=now, interval=interval, roles=roles, agent="t", listen_addrs=(),
                           tasks=(), versions={}, known_peers=())


def flood(m: Membership, now: float, count: int, net: str, prefix: str = "fake") -> int:
    """`count` fresh keys heartbeating once each through `net`: how many found no room."""
    refused = 0
    for i in range(count):
        try:
            m.on_heartbeat(now, f"{prefix}{i:05d}", beat(now), via=net)
        except NoRoom:
            refused += 1
    return refused


def honest(m: Membership, now: float, linked: int = 10) -> list[str]:
    peers = [f"honest{i:02d}" for i in range(linked)]
    for peer in peers:
        m.on_connected(peer, (f"/mem/{peer}",))
        m.on_heartbeat(now, peer, beat(now, interval=2.0), via=None)
    return peers


def test_a_flood_from_one_network_gets_a_bounded_share_and_cannot_stretch_our_interval():
    cfg = MembershipConfig()
    m = Membership("self", cfg)
    honest(m, 100.0)
    before = m.pace()[0]
    refused = flood(m, 100.0, 1116, "10.9.9.0/24")  # the count, all from the attacker's network
    alive = [p for p, i in m.peers.items() if i.state == ALIVE and p.startswith("fake")]
    assert len(alive) == cfg.newcomers_per_net and refused == 1116 - cfg.newcomers_per_net
    # our interval: newcomers count up to the vouched peers' number, so at most doubled
    interval, size = m.pace()
    assert size == 2 * 10 + 1 and interval <= max(cfg.heartbeat_interval, 2 * before)
    assert m.newcomers.refused == refused


def test_many_networks_fill_only_the_newcomers_part_and_the_table_keeps_room_for_the_vouched():
    cfg = MembershipConfig(max_peers=300, newcomers=100, newcomers_per_net=20)
    m = Membership("self", cfg)
    refused = sum(flood(m, 50.0, 40, f"10.{n}.0.0/24", prefix=f"n{n}-") for n in range(20))
    assert sum(1 for i in m.peers.values() if i.state == ALIVE) == 100 and refused == 800 - 100
    # a peer a task names (the core's word) gets in past the budget, and so does a linked one
    m.vouches = lambda peer: peer == "trainer"
    m.on_heartbeat(51.0, "trainer", beat(51.0), via="10.0.0.0/24")
    m.on_connected("neighbour", ("/mem/neighbour",))
    assert m.peers["trainer"].state == ALIVE and m.peers["neighbour"].connected
    # ... even when the table is full of live newcomers: one of them makes room
    full = Membership("self", MembershipConfig(max_peers=50, newcomers=50, newcomers_per_net=50))
    full.vouches = lambda peer: peer == "trainer"
    flood(full, 50.0, 50, "10.1.0.0/24")
    assert len(full.peers) == 50
    full.on_heartbeat(51.0, "trainer", beat(51.0), via="10.1.0.0/24")
    assert full.peers["trainer"].state == ALIVE and len(full.peers) == 50


def test_gone_newcomers_free_their_place_and_proven_ones_stop_counting_as_newcomers():
    cfg = MembershipConfig(newcomers=10, newcomers_per_net=10, gone_after=5.0)
    m = Membership("self", cfg)
    honest(m, 0.0, linked=1)
    assert flood(m, 0.0, 10, "net-a") == 0 and flood(m, 0.0, 1, "net-a", prefix="late") == 1
    # the fakes fall silent: gone after at most 4 of our own intervals, and their places are free again
    m.sweep(4 * m.pace()[0] * cfg.gone_factor + 2.0)
    now = 200.0
    assert flood(m, now, 1, "net-a", prefix="late") == 0
    # a newcomer whose work a trusted checker passed (the core's `vouches`) is no newcomer any more
    m.vouches = lambda peer: peer == "late00000"
    m.on_heartbeat(now + 1, "late00000", beat(now + 1, seq=2), via="net-a")
    assert "late00000" not in m.newcomers


def test_a_gossiped_heartbeat_older_than_one_its_link_brought_is_still_forwarded():
    """A ping carries a heartbeat signed after the gossiped one; the gossiped one, arriving later, must
    be accepted (so forwarded to the peers that have not had it) without rolling our entry back."""
    m = Membership("self", MembershipConfig())
    m.on_connected("n", ("/mem/n",))
    m.on_heartbeat(10.0, "n", beat(10.0, seq=5, interval=2.0, roles=("trainer",)), via=None)  # over the link
    assert m.on_heartbeat(10.1, "n", beat(9.9, seq=4, interval=2.0, roles=("worker",)), via="n") == []
    assert m.peers["n"].roles == ("trainer",) and m.peers["n"].last_seq == 5
    with pytest.raises(Rejected) as stale:  # the same gossiped one again, or an older one: stale
        m.on_heartbeat(10.2, "n", beat(9.8, seq=4, interval=2.0), via="n")
    assert stale.value.reason == errors.STALE
    with pytest.raises(Rejected):  # and a link's older one is stale against the link's newest
        m.on_heartbeat(10.3, "n", beat(9.9, seq=4, interval=2.0), via=None)


def test_newcomers_count_up_to_the_vouched_number_heard_first_first_and_proven_ones_count_as_vouched():
    """Our pace and a task's split before anyone commits (`counted_peers`) count newcomers up to the vouched
    peers' number, so a flood after an honest newcomer neither pushes it out nor more than doubles the
    count; roles otherwise read `vouched_alive`, where a newcomer whose work is proven counts at once,
    before its next heartbeat."""
    m = Membership("self", MembershipConfig())
    linked = honest(m, 0.0, linked=3)
    m.on_heartbeat(1.0, "early-worker", beat(1.0), via="net-b")  # a newcomer, before the flood
    flood(m, 2.0, 200, "net-a")
    assert m.vouched_alive() == sorted(linked)
    counted = m.counted_peers()  # what a task's split counts before anyone commits: newcomers heard first first
    assert "early-worker" in counted and len(counted) == m.counted_count() == 2 * 3
    m.vouches = lambda peer: peer == "early-worker"  # a trusted checker passed its first batch
    assert m.vouched_alive() == sorted(linked + ["early-worker"])


def test_a_task_vouches_for_its_trainer_only_where_a_role_works_on_it():
    """Announcers' keys are free, so holding a task does not make its named keys costly; working on it
    does (the worker needs its trainer counted and its heartbeats relayed). A relay holds the task and
    still relays the trainer's heartbeats, because they name it."""
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    relay = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("relay",)), seed=2)
    worker = PeerCore(Identity(b"\x03" * 32), CoreConfig(roles=("worker",)), seed=3)
    net = MemoryNet([trainer, relay, worker], T0)
    net.jobs = fake_jobs
    net.start()
    net.connect(trainer.peer_id, relay.peer_id)
    net.connect(relay.peer_id, worker.peer_id)  # the worker reaches the trainer only through the relay
    net.run_for(3)
    t = task(trainer_keys=(trainer.identity.public_key,),
             params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    net.run_for(60)
    assert t.task_id in relay.tasks.tasks and t.task_id in worker.tasks.tasks
    assert not relay._vouches(trainer.peer_id) and worker._vouches(trainer.peer_id)
    assert trainer.peer_id in worker.membership.alive_peers()  # relayed: its heartbeats name the task
    assert trainer.peer_id in worker.membership.vouched_alive()


def relay_holding_a_task() -> tuple[PeerCore, str]:
    relay = PeerCore(Identity(b"\x02" * 32), CoreConfig(roles=("relay",)), seed=2)
    t = task()
    relay.tasks.add(T0, seal(ALICE, t))
    return relay, t.task_id


def heartbeat_from(relay: PeerCore, key: Identity, tasks: tuple, role: str = "worker", seq: int = 1):
    """`key`'s heartbeat naming `tasks`, as a flooder forwards it: the relay's verdict."""
    beat_ = StatusHeartbeat(seq=seq, sent_at=T0, interval=2.0, roles=(role,), agent="t", listen_addrs=(),
                            tasks=tasks, versions={}, known_peers=(), peers=0)
    return relay.handle(T0, MessageReceived(topics.STATUS, seal(key, beat_).wire, "flooder"))[0]


def gossip_fresh_beats(relay: PeerCore, task_id: str, role: str):
    """A heartbeat from a fresh key naming the task, then one from another naming none, as the flooder
    forwards them: (name, key, the relay's verdict) for each."""
    for n, (name, tasks) in enumerate((("names", (task_id,)), ("none", ()))):
        key = Identity(bytes([n + 7]) * 32)
        yield name, key, heartbeat_from(relay, key, tasks, role)


def commit(relay: PeerCore, key: Identity, task_id: str) -> None:
    """`key` commits rollouts to the task, as gossip brings the commitment to the relay."""
    c = RolloutCommitment(task_id=task_id, policy_version=0, created_at=T0, blob_hash=bytes(key.public_key),
                          blob_size=100, prompt_indices=(1, 2), samples_per_prompt=4, num_tokens=80, mean_reward=0.5)
    topic = topics.task_topic(task_id, "rollouts")
    assert relay.handle(T0, MessageReceived(topic, seal(key, c).wire, "flooder"))[0].accepted


def test_past_the_budget_only_a_heartbeat_whose_signer_the_task_names_is_still_relayed():
    """Gossip judges a message at its first arrival only: a flooder that relays an honest trainer's
    heartbeat to us first must not get it dropped here for good. Past the budget it makes no entry, and
    is relayed if its signer is shown to work on a task we hold (the task names it), kept otherwise:
    naming the task is free (swarm/evidence.py)."""
    relay, task_id = relay_holding_a_task()
    relay.membership.newcomers.per_net = 0  # the flooder's network has spent its budget
    verdicts = {}
    for name, key, verdict in gossip_fresh_beats(relay, task_id, "trainer"):
        verdicts[name] = verdict
        assert key.peer_id not in relay.membership.peers  # no entry either way
    named = heartbeat_from(relay, ALICE, (task_id,), "trainer")  # the task's own trainer
    assert named.accepted and ALICE.peer_id not in relay.membership.peers
    for name in ("names", "none"):
        assert not verdicts[name].accepted and verdicts[name].reason == errors.KEPT


def test_naming_a_task_relays_nothing_until_the_signer_commits_to_it():
    """A fresh key's heartbeat naming the task is taken and kept (it earns no reputation); once we hold a
    rollout commitment it signed for the task, its heartbeats are relayed and credit it."""
    relay, task_id = relay_holding_a_task()
    key = Identity(b"\x09" * 32)
    first = heartbeat_from(relay, key, (task_id,))
    assert not first.accepted and first.reason == errors.KEPT and key.peer_id in relay.membership.peers
    assert relay.ledger.get(key.peer_id) is None and relay.ledger.get("flooder") is None
    commit(relay, key, task_id)
    assert heartbeat_from(relay, key, (task_id,), seq=2).accepted
    assert relay.ledger.get(key.peer_id).accepted >= 1
    # evidence for one task is not evidence for another: a heartbeat naming only that one is kept
    other = task(name="other")
    relay.tasks.add(T0, seal(ALICE, other))
    assert heartbeat_from(relay, key, (other.task_id,), seq=3).reason == errors.KEPT


def test_a_kept_heartbeat_earns_its_signer_and_its_forwarder_nothing():
    """Nothing vouches for a kept heartbeat's signer: a flood of keys minted one per heartbeat made a
    ledger record per key (each evicting another)."""
    relay, task_id = relay_holding_a_task()
    for name, key, verdict in gossip_fresh_beats(relay, task_id, "worker"):
        assert verdict.reason == errors.KEPT and key.peer_id in relay.membership.peers  # taken, not relayed
        assert relay.ledger.get(key.peer_id) is None
    assert relay.ledger.get("flooder") is None


def test_a_workers_first_commitment_brings_its_next_heartbeat_forward_and_only_the_first():
    """A worker's heartbeats are relayed past its neighbours only once peers hold its commitment: so it
    gossips one `FIRST_WORK_BEAT` after its first commitment to a task, whatever its pace, which
    carries the addresses its trainer dials for the batch."""
    from dataclasses import replace

    from swarm.context import FIRST_WORK_BEAT

    worker = PeerCore(Identity(b"\x03" * 32), CoreConfig(roles=("worker",)), seed=3)
    t = task()
    worker.tasks.add(T0, seal(ALICE, t))
    worker.timers.set("heartbeat", T0 + 500.0)  # a big swarm's pace
    c = RolloutCommitment(task_id=t.task_id, policy_version=0, created_at=T0, blob_hash=bytes(32), blob_size=100,
                          prompt_indices=(1, 2), samples_per_prompt=4, num_tokens=80, mean_reward=0.5)
    worker.context.publish(T0, topics.task_topic(t.task_id, "rollouts"), c)
    assert worker.timers.due("heartbeat") == T0 + FIRST_WORK_BEAT
    worker.timers.set("heartbeat", T0 + 500.0)
    worker.context.publish(T0 + 3, topics.task_topic(t.task_id, "rollouts"),
                           replace(c, policy_version=1, blob_hash=bytes([1]) * 32))
    assert worker.timers.due("heartbeat") == T0 + 500.0
    # no heartbeat timer yet (no link): nothing to bring forward
    fresh = PeerCore(Identity(b"\x04" * 32), CoreConfig(roles=("worker",)), seed=4)
    fresh.tasks.add(T0, seal(ALICE, t))
    fresh.context.publish(T0, topics.task_topic(t.task_id, "rollouts"), c)
    assert "heartbeat" not in fresh.timers


def test_the_kept_counts_match_a_scan_of_the_table_under_random_traffic():
    """Newcomers keeps its alive counts as entries turn alive and gone (a rescan per admission was a tenth
    of a 3,000-peer flood run), and so does the table its count of live entries: after every step they
    equal what a scan of the table gives."""
    from swarm.rng import Rng

    cfg = MembershipConfig(gone_after=5.0, forget_after=30.0, max_peers=60, newcomers=20, newcomers_per_net=6)
    m = Membership("self", cfg)
    rng = Rng(11)
    peers, nets, seqs, now = [f"p{i:02d}" for i in range(80)], ["net-a", "net-b", "net-c"], {}, 100.0
    for _ in range(3000):
        now += rng.uniform(0.0, 0.4)
        peer, action = peers[rng.randrange(len(peers))], rng.randrange(10)
        if action < 7:
            seqs[peer] = seqs.get(peer, 0) + 1
            try:
                m.on_heartbeat(now, peer, beat(now, seq=seqs[peer], interval=2.0), via=nets[rng.randrange(3)])
            except NoRoom:
                pass
        elif action == 7:
            m.on_connected(peer, (f"/mem/{peer}",))
        elif action == 8:
            m.link_dead(now, peer)
        else:
            m.sweep(now)
        kept = m.newcomers
        alive = {p for p in kept.charged if m.peers[p].state == ALIVE}
        assert set(kept.charged) <= set(m.peers) and kept.alive == alive
        for net in nets:
            assert kept._alive_by_net.get(net, 0) == sum(1 for p in alive if kept.charged[p] == net) <= 6
        assert len(alive) <= 20
        vouched_alive = sum(1 for p, i in m.peers.items() if i.state == ALIVE) - len(alive)
        assert m.counted_count() == vouched_alive + min(len(alive), vouched_alive)
        assert len(m.vouched_alive()) == vouched_alive
