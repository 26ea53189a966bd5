"""Issue 20, item 6: a flood of fresh keys cannot fill the task table and lock real tasks out.

Before: 32 junk tasks from 32 fresh keys, expiring in the year 5138, filled the table and a real task
then failed with `capacity`.
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


def offer(net: MemoryNet, victim: PeerCore, wire: bytes, forwarder: str) -> MessageVerdict:
    effects = net.inject(victim.peer_id, topics.TASKS, wire, forwarder)
    return next(e for e in effects if isinstance(e, MessageVerdict))


def announce(net: MemoryNet, core: PeerCore, name: str) -> CommandResult:
    t = task(name=name, trainer_keys=(core.identity.public_key,))
    effects = net.deliver(core.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    return next(e for e in effects if isinstance(e, CommandResult))


def test_junk_tasks_from_fresh_keys_do_not_lock_out_a_real_task():
    net, (victim, trainer, attacker) = star_net(3)
    far = [offer(net, victim, junk(i, expires_at=YEAR_5138), attacker.peer_id) for i in range(32)]
    assert all(v.reason == "out-of-window" for v in far), "a task living past 30 days is refused"
    assert all(offer(net, victim, junk(100 + i), attacker.peer_id).accepted for i in range(32))
    assert len(victim.tasks.tasks) == 32
    # A real task from a peer whose trainer is heard: junk with no live trainer makes room for it.
    net.run_for(5)
    result = announce(net, trainer, "real")
    assert result.ok, result.error
    assert result.result["task_id"] in victim.tasks.tasks
    assert any(isinstance(e, Emit) and e.event == "task-evicted" for _, e in net.events)
    # The junk keeps coming: the real task, whose trainer heartbeats, stays.
    for i in range(64):
        offer(net, victim, junk(200 + i), attacker.peer_id)
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
