"""Issue 20, item 6, and issue 27, attack 2: a flood of fresh keys cannot fill the task table and lock
real tasks out.

Before: 32 junk tasks from 32 fresh keys, expiring in the year 5138, filled the table and a real task
then failed with `capacity`. Then (issue 27): 16 fresh announcers x 2 tasks all naming one trainer key
that heartbeats were never silent, so never evicted, and a real task was refused for as long as the
heartbeats went on.
"""

from __future__ import annotations

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from swarm.core import PeerCore
from swarm.io import CommandResult, Emit, LocalCommand, MessageVerdict
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet, star_net

YEAR_5138 = 99_999_999_999.0


def junk(i: int, **overrides) -> bytes:
    key = Identity(b"junk-%03d" % i + bytes(24))
    return seal(key, task(name=f"junk-{i}", trainer_keys=(key.public_key,), **overrides)).wire


def offer(net: MemoryNet, victim: PeerCore, wire: bytes, forwarder: str, from_net: str = "") -> MessageVerdict:
    effects = net.inject(victim.peer_id, topics.TASKS, wire, forwarder, from_net)
    return next(e for e in effects if isinstance(e, MessageVerdict))


def announce(net: MemoryNet, core: PeerCore, name: str) -> CommandResult:
    t = task(name=name, trainer_keys=(core.identity.public_key,))
    effects = net.deliver(core.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    return next(e for e in effects if isinstance(e, CommandResult))


def test_junk_tasks_from_fresh_keys_do_not_lock_out_a_real_task():
    net, (victim, trainer, attacker) = star_net(3)
    far = [offer(net, victim, junk(i, expires_at=YEAR_5138), attacker.peer_id) for i in range(32)]
    assert all(v.reason == "out-of-window" for v in far), "a task living past 30 days is refused"
    # The attacker reaches the victim from two networks, 16 tasks each (one network's share).
    assert all(offer(net, victim, junk(100 + i), attacker.peer_id, f"10.0.{i % 2}.0/24").accepted for i in range(32))
    assert len(victim.tasks.tasks) == 32
    # A real task from a peer whose trainer is heard: junk with no live trainer makes room for it.
    net.run_for(5)
    result = announce(net, trainer, "real")
    assert result.ok, result.error
    assert result.result["task_id"] in victim.tasks.tasks
    assert any(isinstance(e, Emit) and e.event == "task-evicted" for _, e in net.events)
    # The junk keeps coming: the real task, whose trainer heartbeats, stays.
    for i in range(64):
        offer(net, victim, junk(200 + i), attacker.peer_id, f"10.0.{i % 2}.0/24")
        net.run_for(1)
    assert result.result["task_id"] in victim.tasks.tasks and len(victim.tasks.tasks) == 32


def test_one_announcer_has_at_most_two_tasks():
    net, (victim, _trainer, attacker) = star_net(3)
    key = Identity(b"one-announcer".ljust(32, b"\0"))
    wires = [seal(key, task(name=f"t{i}", trainer_keys=(key.public_key,))).wire for i in range(3)]
    verdicts = [offer(net, victim, w, attacker.peer_id) for w in wires]
    assert [v.accepted for v in verdicts] == [True, True, False] and verdicts[2].reason == "capacity"


def test_tasks_with_live_trainers_are_kept_and_the_operator_always_gets_in():
    net, cores = star_net(5, max_tasks=4)
    victim, trainers = cores[0], cores[1:]
    for i, trainer in enumerate(trainers):
        assert announce(net, trainer, f"live-{i}").ok
    net.run_for(400)  # past trainer_silence: only heartbeats keep the tasks alive
    assert len(victim.tasks.tasks) == 4
    refused = offer(net, victim, junk(1), trainers[0].peer_id)
    assert not refused.accepted and refused.reason == "capacity"
    own = announce(net, victim, "operators-own")
    assert own.ok, own.error
    assert own.result["task_id"] in victim.tasks.tasks and len(victim.tasks.tasks) == 4
    assert victim.tasks.tasks[own.result["task_id"]].own


def test_one_network_holds_at_most_half_the_table():
    """Keys are free, networks are not: the tasks that came through one network take 16 of 32 slots at
    most, a newcomer from it replacing its own most silent, and the rest stay open to other networks."""
    net, (victim, trainer, attacker) = star_net(3)
    verdicts = [offer(net, victim, junk(i), attacker.peer_id, "10.0.0.0/24") for i in range(40)]
    assert all(v.accepted for v in verdicts)  # each newcomer evicts the most silent junk of its network
    held = [k for k in victim.tasks.tasks.values() if k.via == "10.0.0.0/24"]
    assert len(held) == 16 and len(victim.tasks.tasks) == 16
    result = announce(net, trainer, "real")
    assert result.ok and result.result["task_id"] in victim.tasks.tasks
    assert victim.tasks.tasks[result.result["task_id"]].via == trainer.peer_id  # the simulator's rule


def test_one_network_of_live_tasks_refuses_more_from_it():
    net, cores = star_net(4, max_tasks=4)
    victim, trainers = cores[0], cores[1:]
    victim.tasks.per_network = 2
    live = [seal(t.identity, task(name=f"live-{i}", trainer_keys=(t.identity.public_key,))).wire
            for i, t in enumerate(trainers)]
    assert offer(net, victim, live[0], trainers[0].peer_id, "10.0.0.0/24").accepted
    assert offer(net, victim, live[1], trainers[0].peer_id, "10.0.0.0/24").accepted
    net.run_for(5)  # their trainers heartbeat: neither is silent
    refused = offer(net, victim, live[2], trainers[0].peer_id, "10.0.0.0/24")
    assert not refused.accepted and refused.reason == "capacity"
    other = seal(trainers[2].identity, task(name="live-2b", trainer_keys=(trainers[2].identity.public_key,))).wire
    assert offer(net, victim, other, trainers[1].peer_id, "10.0.1.0/24").accepted  # another network


def test_one_live_trainer_key_does_not_keep_a_junk_flood_alive():
    """Attack 2: 16 fresh announcers x 2 tasks, all naming one trainer key that heartbeats, from two
    networks so they fill the table. A key named by more than 2 tasks here vouches for none of them: a
    real task evicts one at once, and keeps its place while the junk and the heartbeats go on."""
    net, (victim, decoy, real_trainer, attacker) = star_net(4)
    for i in range(32):
        announcer = Identity((b"announcer-%02d" % (i // 2)).ljust(32, b"\0"))
        wire = seal(announcer, task(name=f"junk-{i}", trainer_keys=(decoy.identity.public_key,))).wire
        assert offer(net, victim, wire, attacker.peer_id, f"10.0.{i % 2}.0/24").accepted
    net.run_for(400)  # past trainer_silence: the decoy heartbeats all along
    assert len(victim.tasks.tasks) == 32
    result = announce(net, real_trainer, "real")
    assert result.ok and result.result["task_id"] in victim.tasks.tasks
    assert any(isinstance(e, Emit) and e.event == "task-evicted" for _, e in net.events)
    for i in range(8):
        announcer = Identity((b"late-announcer-%02d" % i).ljust(32, b"\0"))
        offer(net, victim, seal(announcer, task(name=f"late-{i}", trainer_keys=(decoy.identity.public_key,))).wire,
              attacker.peer_id, f"10.0.{i % 2}.0/24")
        net.run_for(10)
    assert result.result["task_id"] in victim.tasks.tasks


def test_a_trainer_of_two_tasks_keeps_both_alive():
    net, cores = star_net(4, max_tasks=2)
    victim, trainer, newcomer = cores[0], cores[1], cores[2]
    for i in range(2):
        announcer = Identity((b"announcer-%02d" % i).ljust(32, b"\0"))
        wire = seal(announcer, task(name=f"t{i}", trainer_keys=(trainer.identity.public_key,))).wire
        assert offer(net, victim, wire, trainer.peer_id).accepted
    net.run_for(400)
    wire = seal(newcomer.identity, task(name="new", trainer_keys=(newcomer.identity.public_key,))).wire
    refused = offer(net, victim, wire, newcomer.peer_id)
    assert not refused.accepted and refused.reason == "capacity"
