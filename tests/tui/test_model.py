"""The TUI's pure view functions on real PeerCore snapshots, and on every field missing or mistyped."""

import copy

import pytest

from node.metrics import render_metrics
from node.tui import model
from node.tui.chart import bar_chart, sparkline
from tests.tui.swarm_fixture import LiveSwarm

ODD_SNAPSHOTS = [{}, {"peers": None, "work": "x"}, {"peers": [{"peer_id": "p", "versions": {"t": "new"}}]},
                 {"gossip": {"topics": {"t": {"accepted": "many"}}}, "messages": {"rejected": {"r": None}}},
                 {"work": {"trainer": {"t": {"history": [{"version": 1, "reward": "nan"}, 3]}}}},
                 {"banned": ["ghost"], "reputation": {"ghost": {"banned": True, "ban_reason": "spam"}}}]


@pytest.fixture(scope="module")
def live():
    swarm = LiveSwarm()
    swarm.send_garbage(10)
    return swarm


def test_views_of_the_trainer(live):
    snap = live.status(live.trainer)
    rows = dict(model.peer_rows(snap))
    assert set(rows) == {c.peer_id for c in live.cores[1:]}
    assert rows[live.attacker.peer_id][-1].startswith("BANNED")
    assert rows[live.workers[0].peer_id][1] == "worker" and rows[live.workers[0].peer_id][3] == "connected"
    assert [pid for pid, _ in model.peer_rows(snap, "relay")] == [live.attacker.peer_id]
    view = model.task_view(snap)[live.task_id]
    assert view["current"] == snap["work"]["trainer"][live.task_id]["version"] >= 3
    assert view["held"] == [] and view["lag"] is None  # a trainer holds no worker copies
    lags = {r[0]: int(r[4]) for r in model.peer_version_rows(snap)}
    assert len(lags) == len(live.workers) and all(0 <= lag <= 4 for lag in lags.values())
    series = model.reward_series(snap)[live.task_id]
    assert [h["version"] for h in series] == sorted(h["version"] for h in series)
    rewards = [h["reward"] for h in series if "reward" in h]  # version 0 (the initial weights) has none
    assert len(rewards) >= 3 and rewards[-1] > rewards[0]  # the fixture's reward rises with the version
    assert model.metric_names(model.reward_series(snap)) == ["reward", "loss"]
    trainer_row = model.work_rows(snap)[0]
    assert trainer_row[0] == "trainer" and int(trainer_row[5]) == view["current"]


def test_views_of_a_worker(live):
    snap = live.status(live.workers[0])
    view = model.task_view(snap)[live.task_id]
    assert view["held"] and view["lag"] == view["current"] - view["held"][-1] >= 0
    row = model.work_rows(snap)[0]
    assert row[0] == "worker" and int(row[3]) == snap["work"]["worker"][live.task_id]["commitments"] > 0


def test_events_from_snapshot_diffs(live):
    before = live.status(live.trainer)
    live.net.run_for(6)
    live.send_garbage(2)
    after = live.status(live.trainer)
    kinds = {kind for kind, _ in model.diff_events(before, after)}
    assert "version" in kinds and "rejected" in kinds
    fresh = live.status(live.trainer)
    unbanned = copy.deepcopy(fresh)
    unbanned["banned"] = []
    events = model.diff_events(unbanned, fresh)
    assert any(kind == "ban" and "malformed" in text for kind, text in events)
    assert model.diff_events(None, fresh) == []
    assert model.diff_events(fresh, fresh) == []


def test_rates_need_two_snapshots(live):
    a = live.status(live.trainer)
    live.net.run_for(4)
    b = live.status(live.trainer)
    rows = {r[0]: r for r in model.topic_rows(a, b, b["now"] - a["now"])}
    assert float(rows["swarm/1/status"][1]) > 0
    assert all(r[1] == "-" for r in model.topic_rows(None, b, None))


def _mutations(value, path=()):
    """Every (path, replacement) that swaps one field of the snapshot for a missing or wrong value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path + (k,), None
            yield from _mutations(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from _mutations(v, path + (i,))
    else:
        for bad in (None, "x", [], {}):
            yield path, bad


def _apply(snap, path, bad):
    out = copy.deepcopy(snap)
    node = out
    for key in path[:-1]:
        node = node[key]
    if bad is None and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = bad
    return out


def test_no_view_raises_on_any_missing_or_mistyped_field(live):
    snap = live.status(live.trainer)
    snap["work"]["trainer"][live.task_id]["history"] = snap["work"]["trainer"][live.task_id]["history"][-2:]
    mutated = [_apply(snap, path, bad) for path, bad in _mutations(snap)] + ODD_SNAPSHOTS
    assert len(mutated) > 200
    for odd in mutated:
        model.identity_lines(odd)
        model.peer_rows(odd, "a")
        model.topic_rows(snap, odd, 1.0)
        model.topic_rows(odd, snap, 1.0)
        model.verdict_rows(odd)
        model.task_rows(odd)
        model.peer_version_rows(odd)
        model.work_rows(odd)
        model.metric_names(model.reward_series(odd))
        model.diff_events(snap, odd)
        model.diff_events(odd, snap)
        render_metrics(odd)


def test_chart_and_sparkline():
    lines = bar_chart([(v, v / 10) for v in range(12)], width=40, height=4)
    assert lines[0].startswith("   1.100 ") and lines[3].startswith("   0.000 ")
    assert lines[0].endswith("█") and lines[-1] == " " * 10 + "v0" + " " * 7 + "v11"  # 12 columns wide
    assert "no reward yet" in bar_chart([], 40)[0]
    assert sparkline([0, 1, 2]) == "▁▅█" and sparkline([]) == "" and sparkline([3, 3]) == "▄▄"


def test_tasks_show_the_active_trainer_and_its_term(live):
    snap = live.status(live.workers[0])
    view = model.task_view(snap)[live.task_id]
    assert view["active_trainer"] == f"{model.short_id(live.trainer.peer_id)} r0 t0"
    [row] = [r for r in model.task_rows(snap) if r[0] == live.task_id[:12]]
    assert row[-2] == view["active_trainer"] and len(row) == len(model.TASK_COLUMNS)
    assert isinstance(view["workers"], int) and row[-1] == str(view["workers"])  # by the trainer's summary
    taken_over = {"tasks": [{"task_id": "t1", "trainer_chain": {"active": {"peer_id": "12D3KooWabcdefghijklmnop",
                                                                           "rank": 1, "term": 3}}}]}
    assert model.task_view(taken_over)["t1"]["active_trainer"] == "12D3Ko..klmnop r1 t3"
    assert model.task_view({"tasks": [{"task_id": "t2"}]})["t2"]["active_trainer"] == "-"
