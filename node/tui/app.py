"""`swarm-node tui`: a Textual app that watches one running node at a time through its control API.

Why it is built this way: the node must not slow down because someone watches it, so the app never
calls the node from the UI loop. A `Poller` thread makes one status call per interval and puts each
answer on a queue; the UI drains the queue ten times a second and redraws from the newest snapshot.
Rates (messages/s) and the event log come from differences between successive snapshots of the same
node, so the node needs no extra API. A failed call marks the node disconnected (the last data stays
on screen, marked stale) and polling simply goes on, which is the reconnect.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any, Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Input, RichLog, Static, TabbedContent, TabPane

from node.tui import model
from node.tui.chart import RewardChart, sparkline
from node.tui.client import PollResult, Poller, default_call

PANELS = (("overview", "1 Overview"), ("peers", "2 Peers"), ("gossip", "3 Gossip"), ("tasks", "4 Tasks"),
          ("work", "5 Work"), ("rewards", "6 Rewards"), ("events", "7 Events"))


class SwarmTUI(App):
    TITLE = "swarm-node tui"
    CSS = """
    Screen { overflow: hidden; }
    #status { height: 1; padding: 0 1; background: $boost; }
    #panels, #panels > ContentSwitcher, TabPane { height: 1fr; }
    #status.disconnected { background: $error; color: $text; }
    .section { padding: 0 1; }
    .title { text-style: bold; padding: 0 1; }
    DataTable { height: auto; max-height: 24; }
    #peer-filter { width: 40; }
    #peers-bar { height: 3; }
    #peers-count { padding: 1 1; }
    #events-log { height: 1fr; }
    """
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("tab", "cycle_panel(1)", "Next panel", priority=True, show=False),
        Binding("shift+tab", "cycle_panel(-1)", "Prev panel", priority=True, show=False),
        *[Binding(str(i + 1), f"show_panel('{pid}')", label.split(" ", 1)[1], show=False)
          for i, (pid, label) in enumerate(PANELS)],
        Binding("slash", "filter", "Filter peers"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("n", "cycle_node(1)", "Next node"),
        Binding("p", "cycle_node(-1)", "Prev node"),
        Binding("m", "cycle_metric", "Chart metric"),
        Binding("t", "cycle_task", "Chart task"),
    ]

    def __init__(self, data_dirs: list[Path], *, interval: float = 1.0, call: Callable[..., Any] = default_call,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.data_dirs = [Path(p) for p in data_dirs]
        self.interval = interval
        self.clock = clock
        self._results: queue.SimpleQueue[PollResult] = queue.SimpleQueue()
        self.poller = Poller(self.data_dirs, self._results.put, interval=interval, call=call)
        self.snap: dict | None = None  # newest snapshot of the selected node (kept while disconnected)
        self.snap_at: float | None = None
        self.prev: dict | None = None
        self.prev_at: float | None = None
        self.connected: bool | None = None  # None: no answer yet
        self.last_error = ""
        self.peer_filter = ""
        self.metric = "reward"
        self.chart_task: str | None = None
        self.applied = 0  # results applied (tests wait on it)
        self._shown: dict[str, tuple] = {}  # table id -> rows last drawn (unchanged tables are not redrawn)

    # ----- layout -----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static("connecting...", id="status")
        with TabbedContent(initial="overview", id="panels"):
            with TabPane(PANELS[0][1], id="overview"):
                with VerticalScroll():
                    yield Static("", id="identity", classes="section")
                    yield Static("", id="summary", classes="section")
            with TabPane(PANELS[1][1], id="peers"):
                with Horizontal(id="peers-bar"):
                    yield Input(placeholder="filter peers: / to type, esc to clear", id="peer-filter")
                    yield Static("", id="peers-count")
                yield DataTable(id="peers-table", zebra_stripes=True, cursor_type="row")
            with TabPane(PANELS[2][1], id="gossip"):
                with VerticalScroll():
                    yield Static("messages by topic (rates from successive snapshots)", classes="title")
                    yield DataTable(id="topics-table", zebra_stripes=True)
                    yield Static("accepted / rejected by reason, drops, deliveries, latency", classes="title")
                    yield DataTable(id="verdicts-table", zebra_stripes=True)
            with TabPane(PANELS[3][1], id="tasks"):
                with VerticalScroll():
                    yield Static("tasks and policy versions (lag = current - newest held)", classes="title")
                    yield DataTable(id="tasks-table", zebra_stripes=True)
                    yield Static("versions other peers report", classes="title")
                    yield DataTable(id="peer-versions-table", zebra_stripes=True)
            with TabPane(PANELS[4][1], id="work"):
                with VerticalScroll():
                    yield DataTable(id="work-table", zebra_stripes=True)
                    yield Static("", id="driver", classes="section")
            with TabPane(PANELS[5][1], id="rewards"):
                yield RewardChart(id="chart", classes="section")
            with TabPane(PANELS[6][1], id="events"):
                yield RichLog(id="events-log", max_lines=2000, wrap=True, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        columns = {"peers-table": model.PEER_COLUMNS, "topics-table": model.TOPIC_COLUMNS,
                   "verdicts-table": ("what", "reason / kind", "count"), "tasks-table": model.TASK_COLUMNS,
                   "peer-versions-table": ("peer", "roles", "task", "version", "lag"), "work-table": model.WORK_COLUMNS}
        for table_id, cols in columns.items():
            self.query_one(f"#{table_id}", DataTable).add_columns(*cols)
        self.log_event("tui", f"watching {len(self.data_dirs)} node(s); polling every {self.interval:g}s")
        self.set_interval(0.1, self._drain)
        self.set_interval(1.0, self._tick_status)  # ages keep counting while disconnected
        self.poller.start()

    def on_unmount(self) -> None:
        self.poller.stop()

    # ----- polling results ---------------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            try:
                result = self._results.get_nowait()
            except queue.Empty:
                return
            try:
                self.apply(result)
            except NoMatches:  # a timer that fired while the app tears its widgets down
                return

    def apply(self, result: PollResult) -> None:
        """Take one poll outcome: update connection state, derive events, redraw."""
        if result.data_dir != self.poller.selected:
            return
        self.applied += 1
        if result.snapshot is None:
            if self.connected is not False:
                self.log_event("error", f"disconnected from {result.data_dir}: {result.error}")
            self.connected, self.last_error = False, result.error or "?"
            self._update_status_line()
            return
        snap = result.snapshot
        if self.connected is False:
            self.log_event("node", f"reconnected to {result.data_dir}")
        elif self.connected is None:
            self.log_event("node", f"connected to {model.short_id(snap.get('peer_id'))} at {result.data_dir}: "
                                   f"{len(model.lst(snap.get('alive')))} peers alive, "
                                   f"{len(model.lst(snap.get('tasks')))} task(s)")
        self.connected, self.last_error = True, ""
        old = self.snap
        if old is not None and (model.num(snap.get("uptime")) or 0) < (model.num(old.get("uptime")) or 0):
            self.log_event("node", "the node restarted (uptime went back); rates start over")
            old = None
        for kind, text in model.diff_events(old, snap):
            self.log_event(kind, text)
        self.prev, self.prev_at = old, self.snap_at if old is not None else None
        self.snap, self.snap_at = snap, result.at
        self.refresh_panels()

    def log_event(self, kind: str, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self.query_one("#events-log", RichLog).write(f"{stamp} {kind:<8} {text}")

    # ----- drawing -----------------------------------------------------------------------------------
    def _tick_status(self) -> None:
        try:
            self._update_status_line()
        except NoMatches:  # fired during teardown
            pass

    def _update_status_line(self) -> None:
        status = self.query_one("#status", Static)
        index = self.poller.data_dirs.index(self.poller.selected)
        where = f"node {index + 1}/{len(self.data_dirs)} {self.poller.selected}"
        peer = model.short_id(model.d(self.snap).get("peer_id")) if self.snap else "?"
        age = "" if self.snap_at is None else f"  data {self.clock() - self.snap_at:.0f}s old"
        if self.connected is False:
            status.update(f"DISCONNECTED  {where}  ({self.last_error[:80]})  retrying every {self.interval:g}s{age}")
            status.add_class("disconnected")
        else:
            state = "connecting..." if self.connected is None else "connected"
            status.update(f"{state}  {where}  peer {peer}{age}  [n/p: node  1-7/tab: panel  /: filter  q: quit]")
            status.remove_class("disconnected")

    def refresh_panels(self) -> None:
        """Redraw the status line and the visible panel only: hidden panels are drawn when shown."""
        self._update_status_line()
        panel = self.query_one("#panels", TabbedContent).active
        draw = getattr(self, f"_draw_{panel}", None)
        if draw is not None:
            draw(self.snap or {})

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_panels()

    def _draw_overview(self, snap: dict) -> None:
        self.query_one("#identity", Static).update("\n".join(model.identity_lines(snap)))
        self.query_one("#summary", Static).update(self._summary(snap))

    def _draw_peers(self, snap: dict) -> None:
        rows = model.peer_rows(snap, self.peer_filter)
        self._fill("peers-table", [cells for _, cells in rows], keys=[pid for pid, _ in rows])
        self.query_one("#peers-count", Static).update(f"{len(rows)} of {len(model.peer_rows(snap))} peers")

    def _draw_gossip(self, snap: dict) -> None:
        dt = self._seconds_between(self.prev, self.snap, self.prev_at, self.snap_at)
        self._fill("topics-table", model.topic_rows(self.prev, snap, dt))
        self._fill("verdicts-table", model.verdict_rows(snap))

    def _draw_tasks(self, snap: dict) -> None:
        self._fill("tasks-table", model.task_rows(snap))
        self._fill("peer-versions-table", model.peer_version_rows(snap))

    def _draw_work(self, snap: dict) -> None:
        self._fill("work-table", model.work_rows(snap))
        driver = model.d(model.d(snap.get("host")).get("driver"))
        self.query_one("#driver", Static).update(
            "runtime counters: " + ("  ".join(f"{k} {v}" for k, v in sorted(driver.items())) or "-"))

    def _draw_rewards(self, snap: dict) -> None:
        self._draw_chart(snap)

    @staticmethod
    def _seconds_between(prev: dict | None, snap: dict | None, prev_at: float | None, at: float | None) -> float | None:
        """The node's own clock (`now`) when both snapshots carry it, else when the answers came."""
        a, b = model.num(model.d(prev).get("now")), model.num(model.d(snap).get("now"))
        if a is not None and b is not None and b > a:
            return b - a
        return None if prev_at is None or at is None else at - prev_at

    def _summary(self, snap: dict) -> str:
        lines = ["", "tasks"]
        series = model.reward_series(snap)
        for tid, v in model.task_view(snap).items():
            records = series.get(tid, [])
            rewards = [h.get("reward") for h in records]
            last = next((r for r in reversed(rewards) if model.num(r) is not None), None)
            lines.append(f"  {tid[:12]}  {v['name'] or '?'}  version {model.fmt_num(v['current'])}"
                         f"  held {model.fmt_num(v['held'][-1] if v['held'] else None)}  lag {model.fmt_num(v['lag'])}  trainer {v['active_trainer']}"
                         + (f"  reward {model.fmt_num(last, 3)} {sparkline(rewards)}" if records else ""))
        if len(lines) == 2:
            lines.append("  (no task known yet)")
        lines += ["", "peers"]
        widths = (14, 16, 6, 9, 10, 9, 9, 10, 6, 6)
        for cells in [model.PEER_COLUMNS] + [cells for _, cells in model.peer_rows(snap)[:12]]:
            lines.append("  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip())
        return "\n".join(lines)

    def _draw_chart(self, snap: dict) -> None:
        series = model.reward_series(snap)
        if self.chart_task not in series:
            self.chart_task = next(iter(series), None)
        names = model.metric_names(series)
        if names and self.metric not in names:
            self.metric = names[0]
        self.query_one("#chart", RewardChart).show(series, self.chart_task, self.metric)

    def _fill(self, table_id: str, rows: list[tuple[str, ...]], keys: list[str] | None = None) -> None:
        """Replace a table's rows (when they changed), keeping the cursor on the same row number."""
        table = self.query_one(f"#{table_id}", DataTable)
        if self._shown.get(table_id) == (rows, keys):
            return
        self._shown[table_id] = (rows, keys)
        row = table.cursor_row
        table.clear()
        for i, cells in enumerate(rows):
            table.add_row(*cells, key=None if keys is None else keys[i])
        if rows and row:
            table.move_cursor(row=min(row, len(rows) - 1))

    # ----- keys --------------------------------------------------------------------------------------
    def action_show_panel(self, panel: str) -> None:
        self.query_one("#panels", TabbedContent).active = panel

    def action_cycle_panel(self, step: int) -> None:
        ids = [pid for pid, _ in PANELS]
        tabs = self.query_one("#panels", TabbedContent)
        tabs.active = ids[(ids.index(tabs.active) + step) % len(ids)]

    def action_filter(self) -> None:
        self.action_show_panel("peers")
        self.query_one("#peer-filter", Input).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#peer-filter", Input)
        box.value = ""
        self.query_one("#peers-table", DataTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "peer-filter":
            self.peer_filter = event.value
            self.refresh_panels()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#peers-table", DataTable).focus()  # keep the filter, give the keys back

    def action_cycle_node(self, step: int) -> None:
        if len(self.data_dirs) < 2:
            return
        self.poller.select(self.data_dirs.index(self.poller.selected) + step)
        self.snap = self.prev = self.snap_at = self.prev_at = None
        self.connected = None
        self.log_event("node", f"switched to {self.poller.selected}")
        self.refresh_panels()

    def action_cycle_metric(self) -> None:
        names = model.metric_names(model.reward_series(self.snap or {}))
        if names:
            self.metric = names[(names.index(self.metric) + 1) % len(names)] if self.metric in names else names[0]
            self._draw_chart(self.snap or {})

    def action_cycle_task(self) -> None:
        tasks = list(model.reward_series(self.snap or {}))
        if tasks:
            self.chart_task = tasks[(tasks.index(self.chart_task) + 1) % len(tasks)] if self.chart_task in tasks else tasks[0]
            self._draw_chart(self.snap or {})


def run_tui(data_dirs: list[Path], interval: float = 1.0) -> int:
    SwarmTUI(data_dirs, interval=interval).run()
    return 0
