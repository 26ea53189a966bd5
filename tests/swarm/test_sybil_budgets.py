"""Issue 27, item 2 (core side): budgets by evidence, not by peer id, since fresh keys cost nothing.

The two attacks as they were tried against a real node at 550a7a7, replayed against cores wired by
MemoryNet (the attacker's traffic injected as if its link delivered it):

1. Heartbeat flood: 1,116 valid heartbeats from fresh keys at 18/s (under the 20/s fresh-signer
   bucket), each declaring a 3,599.5 s interval. Before: the peer table hit its 1,024 cap (and so did
   the neighbour's, the victim forwarded them all), the victim's interval stretched from 2 s to 102 s,
   the fakes counted as alive for about 3 hours, and a peer joining then saw nobody.
2. Live junk tasks: 16 fresh announcers x 2 tasks, all naming one trainer key that heartbeats every
   2 s. Before: never "silent", never evicted, and an honest new task was refused `capacity`.
"""

from __future__ import annotations

from collections import Counter

from gossip import topics
from gossip.envelope import seal
from gossip.errors import Rejected
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, LocalCommand, MessageVerdict
from swarm.membership import ALIVE, Membership, MembershipConfig
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet

FLOOD, RATE, DECLARED = 1116, 18.0, 3599.5


def forged_beat(key: Identity, now: float) -> bytes:
    return seal(key, StatusHeartbeat(seq=int(now * 1000), sent_at=now, interval=DECLARED, roles=("relay",),
                                     agent="sybil", listen_addrs=(), tasks=(), versions={}, known_peers=(),
                                     peers=1 << 20)).wire


def net_of(n: int) -> tuple[MemoryNet, list[PeerCore]]:
    cores = [PeerCore(Identity(bytes([i + 1]) * 32), CoreConfig(), seed=i) for i in range(n)]
    net = MemoryNet(cores, T0)
    net.start()
    return net, cores


def alive(core: PeerCore) -> set[str]:
    return set(core.membership.alive_peers())


def test_a_heartbeat_flood_from_fresh_keys_fills_one_links_share_and_stretches_nothing():
    # victim, five honest neighbours, the attacker's link, and a newcomer that joins mid-flood
    net, cores = net_of(8)
    victim, honest, attacker, newcomer = cores[0], cores[1:6], cores[6], cores[7]
    for other in honest + [attacker]:
        net.connect(victim.peer_id, other.peer_id)
    net.run_for(10)
    verdicts = []
    for i in range(FLOOD):
        net.run_for(1 / RATE)
        key = Identity(b"sybil-%05d" % i + bytes(21))
        effects = net.inject(victim.peer_id, topics.STATUS, forged_beat(key, net.now), attacker.peer_id)
        verdicts.append(next(e for e in effects if isinstance(e, MessageVerdict)))
        if i == FLOOD // 2:  # 31 s in: a new honest peer joins through the victim and one neighbour
            net.connect(newcomer.peer_id, victim.peer_id)
            net.connect(newcomer.peer_id, honest[0].peer_id)
            joined = net.now
        if i == FLOOD // 2 + int(10 * RATE):  # within 10 s it sees its neighbours, and they see it
            assert {victim.peer_id, honest[0].peer_id} <= alive(newcomer)
            assert newcomer.peer_id in alive(victim) and net.now - joined <= 10.5
    m = victim.membership
    share = victim.config.membership.unproven_per_link
    held = len(set(m.peers) - {c.peer_id for c in cores})
    assert held <= share  # was 1,024 - 7: the attacker's link's share at most
    # Refused ones are never forwarded; past a full share, a link's relays make one new entry a second.
    accepted = sum(v.accepted for v in verdicts)
    assert accepted <= share + FLOOD / RATE * victim.config.membership.unproven_rate
    assert {v.reason for v in verdicts if not v.accepted} == {"capacity"}
    assert victim.ledger.score(attacker.peer_id) >= 0  # refused at no cost to the link: an honest relay may carry them
    assert all(h.peer_id in alive(victim) for h in honest)
    assert m.interval == m.heartbeat_interval() == 2.0  # was 102 s: fakes through one of six links count nothing
    for neighbour in honest + [newcomer]:  # the neighbours got at most what the victim let through
        assert len(neighbour.membership.peers) <= len(cores) + share
        assert neighbour.membership.heartbeat_interval() == 2.0
    # A declared hour keeps no unproven key alive: silent fakes are gone within 3 x twice our interval.
    fakes = set(m.peers) - {c.peer_id for c in cores}
    net.run_for(15)
    assert not fakes & alive(victim)
    assert all(h.peer_id in alive(victim) for h in honest + [newcomer])


def beat(now: float, interval: float = 2.0) -> StatusHeartbeat:
    return StatusHeartbeat(seq=int(now * 1000), sent_at=now, interval=interval, roles=("relay",), agent="t",
                           listen_addrs=(), tasks=(), versions={}, known_peers=(), peers=0)


def test_an_unproven_peer_never_pushes_out_a_proven_one():
    m = Membership("self", MembershipConfig(max_peers=8, unproven_per_link=4, unproven_quota=6))
    for i in range(4):
        m.on_connected(f"proven-{i}", (), 0.0)
        m.on_heartbeat(1.0, f"proven-{i}", beat(1.0))
    for i in range(4):  # one link's share
        m.on_heartbeat(1.0, f"fake-{i}", beat(1.0), via="attacker")
    try:
        m.on_heartbeat(1.0, "fake-4", beat(1.0), via="attacker")
        raise AssertionError("a fifth unproven peer through one link got an entry")
    except Rejected as rej:
        assert rej.reason == "capacity"
    assert sum(p.startswith("proven") for p in m.peers) == 4
    # A proven newcomer (a link) takes an unproven peer's place when the table is full.
    m.on_connected("proven-4", (), 2.0)
    assert "proven-4" in m.peers and len(m.peers) == 8 and sum(p.startswith("fake") for p in m.peers) == 3
    # A link that lasted proves its peer for good; a brief one leaves it unproven.
    m.on_disconnected("proven-4", 40.0)
    m.on_connected("brief", (), 40.0)
    m.on_disconnected("brief", 41.0)
    assert m.is_proven(m.peers["proven-4"]) and not m.is_proven(m.peers["brief"])


def announce(net: MemoryNet, core: PeerCore, name: str) -> CommandResult:
    t = task(name=name, trainer_keys=(core.identity.public_key,))
    effects = net.deliver(core.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    return next(e for e in effects if isinstance(e, CommandResult))


def test_junk_tasks_kept_live_by_one_keys_heartbeats_make_room_for_an_honest_task():
    net, (victim, junk_trainer, attacker, honest) = net_of(4)
    for other in (junk_trainer, attacker, honest):
        net.connect(victim.peer_id, other.peer_id)
    announcers = [Identity(b"announcer-%02d" % i + bytes(20)) for i in range(16)]
    for i, key in enumerate(announcers):
        for j in range(2):
            wire = seal(key, task(name=f"junk-{i}-{j}", trainer_keys=(junk_trainer.identity.public_key,))).wire
            effects = net.inject(victim.peer_id, topics.TASKS, wire, attacker.peer_id)
            assert next(e for e in effects if isinstance(e, MessageVerdict)).accepted
    assert len(victim.tasks.tasks) == 32
    net.run_for(30)  # the junk trainer heartbeats every 2 s all along
    assert junk_trainer.peer_id in alive(victim)
    result = announce(net, honest, "real")  # was refused `capacity` for as long as the heartbeats went on
    assert result.ok, result.error
    real = result.result["task_id"]
    assert real in victim.tasks.tasks
    # More junk keeps coming through fresh announcers: it evicts junk, never the honest task.
    for i in range(8):
        key = Identity(b"late-%02d" % i + bytes(25))
        net.inject(victim.peer_id, topics.TASKS,
                   seal(key, task(name=f"late-{i}", trainer_keys=(junk_trainer.identity.public_key,))).wire,
                   attacker.peer_id)
        net.run_for(5)
    assert real in victim.tasks.tasks and len(victim.tasks.tasks) == 32


def test_budget_bookkeeping_matches_the_table_under_random_traffic():
    """The per-neighbour counts and silent sets kept for O(1) budgets agree with a scan of the table."""
    from swarm.rng import Rng
    rng = Rng(7)
    m = Membership("self", MembershipConfig(max_peers=40, unproven_per_link=6, unproven_quota=24))
    now = 0.0
    for step in range(1500):
        now += 0.05
        peer, link = f"p{rng.randrange(80)}", f"l{rng.randrange(4)}"
        roll = rng.random()
        try:
            if roll < 0.6:
                m.on_heartbeat(now, peer, beat(now), via=link)
            elif roll < 0.7:
                m.on_connected(peer, (), now)
            elif roll < 0.8:
                m.on_disconnected(peer, now)
            elif roll < 0.85:
                m.vouch(peer)
            else:
                m.sweep(now)
        except Rejected as rej:
            assert rej.reason == "capacity"
        unproven = {p for p, i in m.peers.items() if not i.proven and not i.connected}
        assert m._unproven == unproven, step
        assert dict(m._via) == dict(Counter(m.peers[p].via for p in unproven))
        assert {p for s in m._silent.values() for p in s} == {p for p in unproven if m.peers[p].state != ALIVE}
        relayed = [p for p in unproven if m.peers[p].via.startswith("l")]  # the rest: brief links of their own
        assert all(m._via[v] <= 6 for v in m._via if v.startswith("l")) and len(relayed) <= 24
