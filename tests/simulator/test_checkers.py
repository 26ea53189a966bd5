"""Checkers on synthetic traces: each invariant passes on a clean trace and catches its violation."""

import json

from simulator.checkers import Evaluator, evaluate, read_trace
from simulator.run import run_scenario

from tests.simulator.helpers import tiny

H1, H2, H3, BAD = "honest1", "honest2", "honest3", "mallory"


def _base():
    return [
        (0.0, 0, "peer", {"id": H1, "adversary": ""}),
        (0.0, 1, "peer", {"id": H2, "adversary": ""}),
        (0.0, 2, "peer", {"id": H3, "adversary": ""}),
        (0.0, 3, "peer", {"id": BAD, "adversary": "spam", "detectable": True}),
        *[(0.0, i, "start", {"incarnation": 1}) for i in range(4)],
        (10.0, 0, "task", {"task_id": "t1", "expires": 1e9}),
        *[(11.0, i, "emit.task-learned", {"task_id": "t1"}) for i in range(4)],
    ]


def _results(records, end=200.0, settle=50.0):
    ev = Evaluator()
    for rec in records:
        ev.feed(*rec)
    return ev.results(end, settle)


def test_clean_synthetic_trace_passes():
    pub = [(20.0, 0, "publish", {"m": "aa", "topic": "swarm/1/probe", "size": 10}),
           (20.1, 1, "deliver", {"m": "aa", "from": 0}), (20.2, 2, "deliver", {"m": "aa", "from": 1})]
    res = _results(_base() + pub + [(50.0, 0, "emit.peer-banned", {"peer": BAD, "reason": "rate-limited"})])
    assert all(r.ok for r in res.values()), {n: r.detail for n, r in res.items() if not r.ok}
    # With nothing measured, delivery cannot be claimed complete.
    assert not _results(_base())["delivery-complete"].ok


def test_task_not_learned_is_caught_and_restarts_must_relearn():
    recs = [r for r in _base() if not (r[2] == "emit.task-learned" and r[1] == 2)]
    res = _results(recs)
    assert not res["tasks-learned"].ok and res["tasks-learned"].violations == [{"peer": 2, "task": "t1"}]
    # Peer 1 crashes and restarts: its new incarnation has forgotten the task.
    recs = _base() + [(60.0, 1, "crash", {}), (90.0, 1, "start", {"incarnation": 2})]
    assert not _results(recs)["tasks-learned"].ok
    assert _results(recs + [(95.0, 1, "emit.task-learned", {"task_id": "t1"})])["tasks-learned"].ok
    # A peer that restarted inside the settle period is not judged yet.
    recs = _base() + [(160.0, 1, "crash", {}), (170.0, 1, "start", {"incarnation": 2})]
    assert _results(recs)["tasks-learned"].ok


def test_honest_peer_banned_by_honest_peer_is_caught():
    res = _results(_base() + [(30.0, 0, "emit.peer-banned", {"peer": H2, "reason": "malformed"})])
    assert not res["honest-not-banned"].ok
    assert res["honest-not-banned"].violations[0]["banned"] == 1
    # An adversary banning an honest peer is not the honest swarm's fault.
    assert _results(_base() + [(30.0, 3, "emit.peer-banned", {"peer": H2})])["honest-not-banned"].ok


def test_versions_going_backwards_are_caught_per_incarnation():
    v = lambda t, p, ver: (t, p, "emit.version-installed", {"task_id": "t1", "version": ver})
    assert _results(_base() + [v(20, 0, 1), v(30, 0, 2), v(40, 0, 2), v(50, 1, 1)])["versions-forward"].ok
    res = _results(_base() + [v(20, 0, 3), v(30, 0, 2)])
    assert not res["versions-forward"].ok and res["versions-forward"].violations[0]["from"] == 3
    # After a crash and restart the state is gone: starting again from an older version is allowed.
    assert _results(_base() + [v(20, 0, 3), (25, 0, "crash", {}), (26, 0, "start", {"incarnation": 2}),
                               v(30, 0, 1)])["versions-forward"].ok


def test_a_trainer_that_stops_publishing_is_caught():
    pub = lambda t, ver: (t, 0, "emit.version-published", {"task_id": "t1", "version": ver})
    assert _results(_base() + [pub(20, 0), pub(90, 1), pub(150, 2)])["training-advances"].ok
    res = _results(_base() + [pub(20, 0), pub(90, 1)])  # nothing after 140 = 20 + (200 - 20) * 2/3
    assert not res["training-advances"].ok and res["training-advances"].violations[0]["newest"] == 1
    assert _results(_base())["training-advances"].ok, "no version yet: nothing to judge (tasks-learned is)"


def test_training_on_bad_sources_is_caught():
    trained = lambda t, trainer, worker: (t, trainer, "emit.rollout-trained",
                                          {"task_id": "t1", "commitment_id": "c", "worker": worker})
    assert _results(_base() + [trained(40, 0, H2)])["no-bad-training"].ok
    res = _results(_base() + [trained(40, 0, BAD)])
    assert not res["no-bad-training"].ok and "adversary" in res["no-bad-training"].violations[0]["why"]
    res = _results(_base() + [(30, 0, "emit.peer-banned", {"peer": H2}), trained(40, 0, H2)])
    assert "banned by this trainer" in res["no-bad-training"].violations[0]["why"]
    res = _results(_base() + [(30, 1, "job-done", {"job": 1, "kind": "generate", "ok": True, "honest": False}),
                              trained(40, 0, H2)])
    assert "forged" in res["no-bad-training"].violations[0]["why"]


def test_unbanned_detectable_adversary_is_caught():
    res = _results(_base())
    assert not res["adversaries-banned"].ok and res["adversaries-banned"].violations == [{"peer": 3, "kind": "spam"}]


def test_delivery_miss_is_caught():
    pub = [(20.0, 0, "publish", {"m": "aa", "topic": "swarm/1/probe", "size": 10}),
           (20.1, 1, "deliver", {"m": "aa", "from": 0}), (20.2, 3, "deliver", {"m": "aa", "from": 1})]
    res = _results(_base() + pub)
    assert not res["delivery-complete"].ok
    assert res["delivery-complete"].violations == [{"m": "aa", "topic": "swarm/1/probe", "published": 20.0, "peer": 2}]
    res = _results(_base() + pub + [(21.0, 2, "deliver", {"m": "aa", "from": 1})])
    assert res["delivery-complete"].ok


def test_trace_file_evaluates_like_the_live_run(tmp_path):
    s = tiny(duration=90, checks=("tasks-learned", "delivery-complete"),
             extra='[[tasks]]\nat = 15\nby = "peer"\n[workload]\nprobe_rate = 1.0\n')
    path = tmp_path / "t.jsonl"
    live = run_scenario(s, trace_path=str(path))
    checks, metrics = evaluate(read_trace(str(path)), end=90.0, settle=30.0)
    assert {n: c.ok for n, c in checks.items()} == {n: c.ok for n, c in live.checks.items()}
    assert metrics["delivery"]["delivered"] == live.metrics["delivery"]["delivered"] > 0
    assert all(json.loads(line)["ev"] for line in path.read_text().splitlines())


def test_a_swarm_still_forked_after_a_heal_is_caught():
    head = lambda t, peer, term, rank: (t, peer, "emit.chain-switched", {"task_id": "t1", "term": term, "rank": rank})
    standby = (12.0, 0, "emit.trainer-standby", {"task_id": "t1", "takeover_after": 30.0})
    forked = _base() + [standby, head(20, 1, 0, 0), head(20, 2, 0, 0), (60.0, -1, "heal", {}), head(61, 1, 1, 1)]
    res = _results(forked)["one-chain"]
    assert not res.ok and res.violations[0]["heads"] == {"0/0": 1, "1/1": 1}
    joined = _results(forked + [head(75, 2, 1, 1)])["one-chain"]
    assert joined.ok and "[15.0]" in joined.detail  # the last peer switched 15 s after the heal


def test_training_on_another_chains_rollouts_is_caught():
    installed = (20.0, 0, "emit.version-installed", {"task_id": "t1", "version": 4, "term": 0})
    trained = lambda term: (40.0, 0, "emit.rollout-trained", {"task_id": "t1", "commitment_id": "c", "worker": H2,
                                                               "policy_version": 4, "policy_term": term})
    assert _results(_base() + [installed, trained(0)])["trained-on-own-chain"].ok
    assert not _results(_base() + [installed, trained(1)])["trained-on-own-chain"].ok


def test_a_training_gap_past_takeover_plus_two_version_periods_is_caught():
    pub = lambda t, ver: (t, 0, "emit.version-published", {"task_id": "t1", "version": ver})
    start = (12.0, 0, "emit.trainer-starting", {"task_id": "t1", "takeover_after": 30.0})
    steady = [pub(20.0 + 10 * k, k) for k in range(14)]  # 10 s apart up to 150 s
    assert _results(_base() + [start] + steady + [pub(195.0, 14)])["training-advances"].ok  # 45 s <= 30 + 2 x 10
    gap = _results(_base() + [start] + steady[:-1] + [pub(195.0, 13)])["training-advances"]
    assert not gap.ok and gap.violations[0]["longest_gap"] == 55.0


def _learning(after_rewards, takeover=True):
    recs = _base()
    for v, r in enumerate([0.2] * 5 + [0.3] * 5):
        recs.append((20.0 + v, 0, "emit.version-published", {"task_id": "t1", "version": v, "reward": r}))
    if takeover:
        recs.append((40.0, 1, "emit.trainer-takeover", {"task_id": "t1", "term": 1, "rank": 1}))
    for k, r in enumerate(after_rewards):
        recs.append((41.0 + k, 1, "emit.version-published", {"task_id": "t1", "version": 10 + k, "reward": r}))
    return _results(recs)["learning-continues"]


def test_learning_continues_passes_above_the_base_and_catches_a_return_to_it():
    ok = _learning([0.3, 0.31, 0.29, 0.32, 0.3])
    assert ok.ok and "0.200 -> 0.304" in ok.detail
    back = _learning([0.2, 0.19, 0.21, 0.2, 0.2])  # a standby that restarted from the base policy
    assert not back.ok and back.violations[0]["after_reward"] == 0.2
    assert not _learning([0.3, 0.3]).ok  # too few versions after the takeover to tell
    assert _learning([0.3] * 5, takeover=False).detail == "no takeover"


def test_the_learning_failover_scenario_has_two_trainers_a_crash_and_real_jobs():
    from simulator.scenario import load
    s = load("learning-failover")
    assert s.tasks[0].trainers == 2 and s.faults.crashes[0].peer == "trainer:0"
    assert {spec.mode for spec in s.jobs.values()} == {"real"}
    assert "learning-continues" in s.checks and "one-chain" in s.checks
