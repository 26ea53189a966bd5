"""A peer that stops running for a while (swarm/stall.py) wakes to a backlog and overdue timers: it must
not take over from a live trainer, drop its live neighbours, or charge the peers that delivered the
backlog for its lateness."""

from gossip import topics
from gossip.envelope import seal
from gossip.messages import Probe
from swarm.io import MessageVerdict
from swarm.stall import StallWatch
from tests.swarm.test_takeover import TAKEOVER, swarm

FREEZE = 90.0  # longer than takeover_after (15 s), gone_after and a heartbeat's window (60 s)


def penalties(core) -> dict:
    return {peer: entry["rejected"] for peer, entry in core.snapshot(0)["reputation"].items() if entry.get("rejected")}


def test_a_standby_that_stalls_does_not_take_over_from_a_live_trainer_or_blame_its_neighbours():
    net, trainers, workers, task_id = swarm(n_trainers=2, n_workers=2)
    net.run_for(30)
    standby = trainers[1]
    assert penalties(standby) == {}
    net.freeze(standby.peer_id)
    net.run_for(FREEZE)
    net.thaw(standby.peer_id)
    net.run_for(3 * TAKEOVER)
    assert [p for p, _ in net.events_named("trainer-takeover")] == []
    [(who, stalled)] = net.events_named("stalled")
    assert who == standby.peer_id and FREEZE - 2 < stalled["seconds"] <= FREEZE
    assert [f["peer"] for p, f in net.events_named("peer-gone") if p == standby.peer_id] == []
    snap = standby.snapshot(net.now)
    assert set(snap["alive"]) == {c.peer_id for c in trainers + workers} - {standby.peer_id}
    assert snap["messages"]["rejected"].get("out-of-window", 0) > 0, "the backlog held heartbeats past their window"
    assert snap["messages"]["excused"] == sum(snap["messages"]["rejected"].values())
    assert penalties(standby) == {} and snap["banned"] == []
    assert snap["stalls"]["stalls"] == 1
    [task] = [t for t in snap["tasks"] if t["task_id"] == task_id]
    assert task["trainer_chain"]["active"]["peer_id"] == trainers[0].peer_id


def test_the_head_trainer_silent_after_the_stall_is_taken_over_a_full_wait_after_waking():
    net, trainers, workers, task_id = swarm(n_trainers=2, n_workers=2)
    net.run_for(30)
    standby = trainers[1]
    net.freeze(standby.peer_id)
    net.run_for(FREEZE)
    net.stop(trainers[0].peer_id)  # dies while the standby is not running
    woke = net.now
    net.thaw(standby.peer_id)
    net.run_for(4 * TAKEOVER)
    takeovers = [t for t, (p, e) in zip(net.events.times, net.events)
                 if e.event == "trainer-takeover" and p == standby.peer_id]
    assert takeovers and woke + TAKEOVER <= takeovers[0] <= woke + 2 * TAKEOVER


def test_lateness_is_charged_again_once_the_backlog_has_had_its_time():
    net, trainers, workers, _ = swarm(n_trainers=1, n_workers=2)
    core, forwarder, signer = workers[0], workers[1], trainers[0]
    net.freeze(core.peer_id)
    net.run_for(20)
    net.thaw(core.peer_id)
    old = seal(signer.identity, Probe(seq=1, sent_at=net.now - 3600, payload=b"")).wire
    assert net.inject(core.peer_id, topics.PROBE, old, forwarder.peer_id)[0] == MessageVerdict(False, "out-of-window")
    assert penalties(core) == {}
    net.run_for(20 + 30 + 1)  # the stall's length again, and EXCUSE_AFTER
    older = seal(signer.identity, Probe(seq=2, sent_at=net.now - 3600, payload=b"")).wire
    assert net.inject(core.peer_id, topics.PROBE, older, forwarder.peer_id)[0] == MessageVerdict(False, "out-of-window")
    assert penalties(core) == {forwarder.peer_id: {"out-of-window": 1}}


def test_only_a_timer_this_late_is_a_stall():
    watch = StallWatch(after=5.0, excuse_after=30.0)
    assert watch.observe(100.0, None) is None and watch.observe(104.9, 100.0) is None
    assert watch.awake_since == float("-inf") and not watch.excused(104.9)
    assert watch.observe(112.0, 100.0) == 12.0 and watch.awake_since == 112.0
    assert watch.excused(112.0 + 12.0 + 29.9) and not watch.excused(112.0 + 12.0 + 30.0)
    assert watch.snapshot() == {"stalls": 1, "longest_s": 12.0, "last_s": 12.0, "awake_since": 112.0}


def test_inputs_that_wake_before_the_timers_catch_up_are_one_stall():
    """The runtime may hand a woken core several inputs before the overdue timers fire: each sees the
    same old deadline, and they are one stall (a real node recorded two, 17.625 s and 17.62 s)."""
    watch = StallWatch(after=5.0, excuse_after=30.0)
    assert watch.observe(117.625, 100.0) == 17.625
    assert watch.observe(117.62, 100.0) is None and watch.observe(118.0, 100.0) is None
    assert watch.stalls == 1
    assert watch.observe(140.0, 118.5) == 21.5, "a later deadline missed is another stall"
    assert watch.stalls == 2

