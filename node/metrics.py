"""A node's Prometheus metrics, read from its status snapshot at scrape time.

Why from the snapshot: the TUI, `status --json` and these metrics then show the same numbers, and
nothing in the core has to know about Prometheus. `SnapshotCollector` is a prometheus_client
collector for a per-node `CollectorRegistry` (several nodes can live in one process); each scrape
turns one snapshot into metric families. It tolerates any missing or odd field: a field the node
does not report is left out. Naming follows the client library's conventions: a `swarm_` prefix,
counters ending `_total`, seconds and bytes as base units, latencies as histograms (their buckets
are kept by the node itself: swarm/stats.py `Buckets`). docs/operating.md lists every series.

The HTTP side is node/metrics_http.py.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

PREFIX = "swarm_"


class _Families:
    """One family per name (HELP/TYPE written once), label names fixed by the first sample."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[Metric, tuple[str, ...]]] = {}

    def _family(self, cls, name: str, help_text: str, labels: dict) -> tuple[Metric, tuple[str, ...]] | None:
        name = PREFIX + name
        found = self._families.get(name)
        if found is None:
            names = tuple(labels)
            found = self._families[name] = (cls(name, help_text, labels=names), names)
        family, names = found
        if not isinstance(family, cls) or set(names) != set(labels):
            return None  # a field that would clash with another series of the same name: left out
        return found

    def _add(self, cls, name: str, help_text: str, value: Any, labels: dict) -> None:
        number = _number(value)
        found = None if number is None else self._family(cls, name, help_text, labels)
        if found is not None:
            family, names = found
            family.add_metric([str(labels[n]) for n in names], number)

    def gauge(self, name: str, help_text: str, value: Any, /, **labels: Any) -> None:
        self._add(GaugeMetricFamily, name, help_text, value, labels)

    def counter(self, name: str, help_text: str, value: Any, /, **labels: Any) -> None:
        """`name` ends in `_total`: that is the series name a scrape shows."""
        self._add(CounterMetricFamily, name, help_text, value, labels)

    def histogram(self, name: str, help_text: str, hist: Any, /, **labels: Any) -> None:
        """`hist` is a `Buckets.snapshot()`: {"buckets": [[bound, cumulative count], ...], "sum", "count"}."""
        hist = _dict(hist)
        rows = [r for r in _list(hist.get("buckets")) if isinstance(r, list) and len(r) == 2]
        count, total = _number(hist.get("count")), _number(hist.get("sum"))
        if count is None or total is None or any(_number(x) is None for r in rows for x in r):
            return
        found = self._family(HistogramMetricFamily, name, help_text, labels)
        if found is not None:
            family, names = found
            buckets = [(floatToGoString(float(b)), float(c)) for b, c in rows] + [("+Inf", count)]
            family.add_metric([str(labels[n]) for n in names], buckets, total)

    def families(self) -> list[Metric]:
        return [family for family, _ in self._families.values()]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def families(snap: dict, version: str = "", protocol: str | None = None) -> list[Metric]:
    """Every metric family of one status snapshot."""
    snap = _dict(snap)
    m = _Families()
    if version:
        m.gauge("build_info", "Always 1: this node's package and protocol version as labels.", 1,
                version=version, protocol=str(protocol))
    m.gauge("uptime_seconds", "Seconds since the node started.", snap.get("uptime"))
    _peer_metrics(m, snap)
    _message_metrics(m, snap)
    _task_metrics(m, snap)
    _work_metrics(m, _dict(snap.get("work")))
    _host_metrics(m, _dict(snap.get("host")))
    weights = _dict(snap.get("weight_bytes"))
    m.counter("weight_bytes_received_total", "Weight and trainer-state piece bytes received and checked.",
              weights.get("received"))
    m.counter("weight_bytes_served_total", "Weight and trainer-state piece bytes served to peers.", weights.get("served"))
    for kind, hist in sorted(_dict(_dict(snap.get("jobs")).get("seconds")).items()):
        m.histogram("job_duration_seconds", "Wall time of this node's jobs, by kind (sent to the job process until "
                    "its answer).", hist, kind=kind)
    return m.families()


def _peer_metrics(m: _Families, snap: dict) -> None:
    states: dict[str, int] = {"alive": 0, "gone": 0, "known": 0}
    for peer in _list(snap.get("peers")):
        state = _dict(peer).get("state")
        if isinstance(state, str):
            states[state] = states.get(state, 0) + 1
    for state, count in sorted(states.items()):
        m.gauge("peers", "Known peers by membership state.", count, state=state)
    m.gauge("peers_connected", "Peers with an open connection.", len(_list(snap.get("connected"))))
    m.gauge("peers_banned", "Peers banned by this node's reputation ledger.", len(_list(snap.get("banned"))))
    for peer in _list(snap.get("peers")):
        peer = _dict(peer)
        latency = _number(peer.get("latency_ms"))
        if latency is not None and peer.get("peer_id"):
            m.gauge("peer_latency_seconds", "Heartbeat latency to a peer.", latency / 1000, peer=peer["peer_id"])
    for peer, rec in sorted(_dict(snap.get("reputation")).items()):
        m.gauge("peer_reputation_score", "Reputation score this node holds for a peer.", _dict(rec).get("score"),
                peer=peer)


def _message_metrics(m: _Families, snap: dict) -> None:
    messages = _dict(snap.get("messages"))
    m.counter("messages_accepted_total", "Gossip messages accepted.", messages.get("accepted"))
    for reason, count in sorted(_dict(messages.get("rejected")).items()):
        m.counter("messages_rejected_total", "Gossip messages rejected, by reason.", count, reason=reason)
    m.counter("messages_excused_total", "Rejections not charged to the sender: the backlog after a stall of "
              "this node's own.", messages.get("excused"))
    m.counter("messages_kept_total", "Gossip messages taken but not relayed: heartbeats nothing vouches for.",
              messages.get("kept"))
    membership = _dict(snap.get("membership"))
    m.gauge("heartbeat_interval_seconds", "This node's heartbeat interval (its pace).", membership.get("interval"))
    m.gauge("newcomers_alive", "Alive peers nothing vouches for (the newcomer budget's use).",
            membership.get("newcomers_alive"))
    m.counter("newcomers_refused_total", "Heartbeats of newcomers that found no room in the budget.",
              membership.get("refused_newcomers"))
    m.counter("links_cut_flooding_total", "Links this node cut for introducing strangers' heartbeats nobody "
              "vouches for, little else.", _dict(snap.get("flooding")).get("links_cut"))
    stalls = _dict(snap.get("stalls"))
    m.counter("stalls_total", "Times this node was not running for over 5 s (its timers fired that late).",
              stalls.get("stalls"))
    m.gauge("stall_longest_seconds", "This node's longest stall.", stalls.get("longest_s"))
    gossip = _dict(snap.get("gossip"))
    for topic, row in sorted(_dict(gossip.get("topics")).items()):
        row = _dict(row)
        for what in ("accepted", "rejected", "published"):
            m.counter("topic_messages_total", "Gossip messages per topic: accepted, rejected, published.",
                      row.get(what), topic=topic, kind=what)
        for direction in ("in", "out"):
            m.counter("topic_bytes_total", "Gossip payload bytes per topic.", row.get(f"bytes_{direction}"),
                      topic=topic, direction=direction)
    for kind, count in sorted(_dict(gossip.get("delivered")).items()):
        m.counter("delivered_total", "Messages delivered to this node, by message kind.", count, kind=kind)
    for kind, hist in sorted(_dict(gossip.get("latency_histogram")).items()):
        m.histogram("gossip_delivery_seconds", "Gossip delivery latency (sender's clock to ours), by message kind.",
                    hist, kind=kind)


def _task_metrics(m: _Families, snap: dict) -> None:
    tasks = [_dict(t) for t in _list(snap.get("tasks"))]
    m.gauge("tasks", "Tasks this node knows.", len(tasks))
    for task, version in sorted(_dict(snap.get("versions")).items()):
        m.gauge("policy_version", "Newest policy version this node holds, per task.", version, task=task)
    for t in tasks:
        active = _dict(_dict(t.get("trainer_chain")).get("active"))
        if active and t.get("task_id"):
            m.gauge("trainer_chain_term", "Term of the task's active trainer chain, as this node sees it.",
                    active.get("term"), task=t["task_id"])
            m.gauge("trainer_chain_version", "Newest version of the task's active trainer chain, as this node sees it.",
                    active.get("version"), task=t["task_id"])
        summary = _dict(t.get("summary"))
        if summary and t.get("task_id"):
            m.gauge("task_summary_workers", "Workers the task's trainer trained batches of lately, by its summary.",
                    summary.get("workers"), task=t["task_id"])
            m.gauge("task_summary_trainers_alive", "The task's trainers its active trainer hears alive, by its summary.",
                    summary.get("trainers_alive"), task=t["task_id"])


# Work fields that only grow (exported as counters); every other numeric field is a gauge.
_COUNTERS = {"commitments", "completions", "failures", "trained_commitments", "dropped", "rejected", "passed",
             "failed", "skipped", "takeovers"}


def _work_metrics(m: _Families, work: dict) -> None:
    """Every numeric field of every role's per-task state, so new roles and fields appear unasked."""
    for role, tasks in sorted(work.items()):
        for task, w in sorted(_dict(tasks).items()):
            w = _dict(w)
            for field, value in sorted(w.items()):
                name = _metric_name(f"{role}_{field}")
                if field in _COUNTERS:
                    m.counter(name + "_total", f"{role} {field} (cumulative).", value, task=task)
                elif not isinstance(value, (list, dict)):
                    m.gauge(name, f"{role} {field}.", value, task=task)
            held = [v for v in _list(w.get("held_versions")) if isinstance(v, int)]
            if held:
                m.gauge(_metric_name(f"{role}_newest_held_version"), "Newest policy version held.", max(held), task=task)
            history = [h for h in _list(w.get("history")) if isinstance(h, dict)]
            for key, value in sorted(history[-1].items() if history else ()):
                if key not in ("version", "task_id", "completions"):
                    m.gauge(_metric_name(f"{role}_last_{key}"), f"{key} of the newest published version.", value,
                            task=task)


def _host_metrics(m: _Families, host: dict) -> None:
    stats = _dict(host.get("stats"))
    for direction in ("in", "out"):
        total = sum(v for v in _dict(stats.get(f"bytes_{direction}")).values() if isinstance(v, int))
        m.counter("host_bytes_total", "Request and gossip payload bytes exchanged with peers.", total,
                  direction=direction)
    m.counter("host_published_total", "Messages this node handed to gossipsub.", stats.get("published"))
    for reason, count in sorted(_dict(stats.get("dropped")).items()):
        m.counter("host_dropped_total", "Messages the host dropped, by reason.", count, reason=reason)
    for protocol, hist in sorted(_dict(host.get("request_seconds")).items()):
        m.histogram("request_duration_seconds", "Requests this node sent, open to answer (failures too), by protocol.",
                    hist, protocol=protocol)


def _metric_name(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)


class SnapshotCollector(Collector):
    """Turns `get_snapshot()` into metric families on every scrape (a registry calls `collect`)."""

    def __init__(self, get_snapshot: Callable[[], dict], version: str = "", protocol: str | None = None) -> None:
        self._get_snapshot = get_snapshot
        self._version, self._protocol = version, protocol

    def collect(self) -> Iterable[Metric]:
        return families(self._get_snapshot(), self._version, self._protocol)


def node_registry(get_snapshot: Callable[[], dict]) -> CollectorRegistry:
    """A registry of this node's own (not the process-global one: tests run several nodes per process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(get_snapshot, *build_versions()))
    return registry


def build_versions() -> tuple[str, str]:
    """(package version, protocol version and capabilities the node speaks, e.g. "1.0"): what
    `swarm-node --version` prints too. The release is SWARM_RELEASE's (gossip/release.py)."""
    import os
    from importlib.metadata import PackageNotFoundError, version

    from gossip.release import by_name
    from node.config import RELEASE_ENV
    protocol = str(by_name(os.environ.get(RELEASE_ENV, "current")).announced)
    try:
        return version("swarm-rl"), protocol
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown", protocol


def render_metrics(snap: dict) -> str:
    """The text exposition of one snapshot (what a scrape returns for it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap))
    return generate_latest(registry).decode()
