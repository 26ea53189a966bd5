"""The Textual app in the headless pilot, fed by real PeerCore snapshots through a fake control call."""

import asyncio
import functools
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Input, RichLog, Static, TabbedContent  # noqa: E402

from node.tui.app import PANELS, SwarmTUI  # noqa: E402
from node.tui.chart import RewardChart  # noqa: E402
from tests.tui.swarm_fixture import FakeControl, LiveSwarm  # noqa: E402



def on_asyncio(fn):
    """Textual's pilot needs asyncio; the repo's pytest runs async tests under trio, so run our own loop."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))
    return run


@pytest.fixture(scope="module")
def live():
    swarm = LiveSwarm()
    swarm.send_garbage(10)  # the trainer bans the attacker
    return swarm


def app_for(live, n_nodes=1, interval=0.1, advance=1.0):
    control = FakeControl(live, advance=advance)
    dirs = [Path(f"/nodes/peer{i}") for i in range(n_nodes)]
    return quiet(SwarmTUI(dirs, interval=interval, call=control)), control


def quiet(app):
    app.animation_level = "none"  # the pilot waits for animations to finish after each key
    return app


async def wait_for(pilot, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the app"
        await pilot.pause(0.05)


def text_of(app, selector):
    return str(app.query_one(selector, Static).render())


def log_text(app):
    return "\n".join(line.text for line in app.query_one("#events-log", RichLog).lines)


@on_asyncio
async def test_every_panel_renders_real_snapshot_data(live):
    app, _ = app_for(live)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.applied >= 3)
        trainer = live.trainer.peer_id
        tabs = app.query_one("#panels", TabbedContent)
        for i, (panel, _) in enumerate(PANELS):
            await pilot.press(str(i + 1))
            assert tabs.active == panel
        assert trainer in text_of(app, "#identity") and "/mem/" in text_of(app, "#identity")
        assert "digit-sort" in text_of(app, "#summary") and "reward" in text_of(app, "#summary")
        peers = app.query_one("#peers-table", DataTable)
        assert peers.row_count == len(live.cores) - 1
        banned_row = peers.get_row(live.attacker.peer_id)
        assert banned_row[-1].startswith("BANNED")
        assert app.query_one("#topics-table", DataTable).row_count >= 3
        reasons = [app.query_one("#verdicts-table", DataTable).get_row_at(i)[1]
                   for i in range(app.query_one("#verdicts-table", DataTable).row_count)]
        assert "malformed" in reasons
        tasks = app.query_one("#tasks-table", DataTable)
        assert tasks.row_count == 1 and tasks.get_row_at(0)[0] == live.task_id[:12]
        assert app.query_one("#peer-versions-table", DataTable).row_count == len(live.workers)
        work = app.query_one("#work-table", DataTable)
        assert work.get_row_at(0)[0] == "trainer" and int(work.get_row_at(0)[5]) >= 3  # trainer steps
        chart = str(app.query_one("#chart", RewardChart).render())
        assert "reward per policy version" in chart and "█" in chart and "latest v" in chart
        assert "new peer" in log_text(app) or "version" in log_text(app)


@on_asyncio
async def test_rates_come_from_successive_snapshots(live):
    app, _ = app_for(live, advance=4.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await wait_for(pilot, lambda: app.applied >= 3)
        table = app.query_one("#topics-table", DataTable)
        rates = {table.get_row_at(i)[0]: table.get_row_at(i)[1] for i in range(table.row_count)}
        # Each poll advances the swarm four virtual seconds (the node's `now`), in which every peer
        # sends at least one 2-second heartbeat: 4 peers -> about 1 message/s on the status topic.
        assert 0.5 <= float(rates["swarm/1/status"]) <= 3.0, rates


@on_asyncio
async def test_keys_switch_filter_metric_and_quit(live):
    app, _ = app_for(live)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.applied >= 1)
        tabs = app.query_one("#panels", TabbedContent)
        await pilot.press("tab")
        assert tabs.active == "peers"
        await pilot.press("shift+tab", "shift+tab")
        assert tabs.active == "events"
        await pilot.press("1", "slash")
        assert tabs.active == "peers" and isinstance(app.focused, Input)
        await pilot.press(*"relay")
        peers = app.query_one("#peers-table", DataTable)
        await wait_for(pilot, lambda: peers.row_count == 1)
        assert peers.get_row_at(0)[1] == "relay"
        await pilot.press("q")  # typed into the filter, not a quit
        assert app.is_running and app.peer_filter == "relayq"
        await pilot.press("escape")
        await wait_for(pilot, lambda: peers.row_count == len(live.cores) - 1)
        await pilot.press("6")
        assert "reward per policy version" in str(app.query_one("#chart", RewardChart).render())
        await pilot.press("m")
        assert "loss per policy version" in str(app.query_one("#chart", RewardChart).render())
        await pilot.press("q")
        await pilot.pause(0.1)
        assert not app.is_running


@on_asyncio
async def test_switching_between_nodes(live):
    app, control = app_for(live, n_nodes=3)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.applied >= 1 and app.snap is not None)
        assert app.snap["peer_id"] == live.trainer.peer_id
        await pilot.press("n")
        await wait_for(pilot, lambda: app.snap is not None and app.snap["peer_id"] == live.workers[0].peer_id)
        assert "node 2/3" in text_of(app, "#status")
        await pilot.press("p", "p")
        await wait_for(pilot, lambda: app.snap is not None and app.snap["peer_id"] == live.workers[1].peer_id)
        # Only the selected node is polled.
        calls_before = len(control.calls)
        await pilot.pause(0.3)
        assert set(control.calls[calls_before:]) == {"peer2"}


@on_asyncio
async def test_disconnect_is_shown_and_reconnect_recovers(live):
    app, control = app_for(live)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.connected is True)
        control.down = True
        await wait_for(pilot, lambda: app.connected is False)
        assert "DISCONNECTED" in text_of(app, "#status") and "not answering" in text_of(app, "#status")
        assert live.trainer.peer_id in text_of(app, "#identity"), "the last data stays on screen"
        for key in "1234567":  # every panel still draws
            await pilot.press(key)
        control.down = False
        await wait_for(pilot, lambda: app.connected is True)
        assert "DISCONNECTED" not in text_of(app, "#status")
        log = log_text(app)
        assert "disconnected from" in log and "reconnected to" in log


ODD_ANSWERS = [{}, {"peers": "junk", "work": {"trainer": {"t": None}}, "versions": [1]},
               {"peer_id": 5, "gossip": {"topics": {"x": 3}}, "messages": {"rejected": [1]}, "uptime": "x"},
               {"peers": [{"peer_id": "p", "latency_ms": "fast", "roles": 3}], "tasks": [None, {"task_id": 1}],
                "work": {"worker": {"t": {"held_versions": "all"}}, "trainer": {"t": {"history": [{"version": "v"}]}}}},
               7, None, ["not", "a", "dict"]]


@on_asyncio
async def test_partial_or_wrong_snapshots_never_crash():
    answers = list(ODD_ANSWERS)
    current = [answers[0]]

    def call(data_dir, cmd, args=None, timeout=10.0):
        return current[0]
    app = quiet(SwarmTUI([Path("/nodes/peer0")], interval=0.05, call=call))
    async with app.run_test(size=(120, 40)) as pilot:
        for answer in answers:
            current[0] = answer
            seen = app.applied
            await wait_for(pilot, lambda: app.applied >= seen + 2)
            for panel, _ in PANELS:  # each panel draws itself when shown
                app.action_show_panel(panel)
                await pilot.pause()
            assert app.is_running
            assert app.connected is isinstance(answer, dict), answer


@on_asyncio
async def test_a_hanging_node_does_not_freeze_the_screen():
    release = threading.Event()

    def hanging(data_dir, cmd, args=None, timeout=10.0):
        release.wait(20)
        return {}
    app = quiet(SwarmTUI([Path("/nodes/peer0")], interval=0.05, call=hanging))
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            for key, panel in (("2", "peers"), ("7", "events"), ("1", "overview")):
                await pilot.press(key)
                assert app.query_one("#panels", TabbedContent).active == panel
            assert app.applied == 0 and app.poller.calls == 1, "keys answered while the one status call hangs"
            assert "connecting" in text_of(app, "#status")
    finally:
        release.set()
