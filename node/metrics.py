"""Prometheus text exposition of a node's status snapshot, served on an opt-in loopback port.

Why from the snapshot: the TUI, `status --json` and these metrics then show the same numbers, and
nothing in the core has to know about Prometheus. Why loopback only: peer ids, topics and counts are
an operator's business; a scraper on another host goes through SSH or a local agent.

`render_metrics(snap)` is pure and tolerates any missing field (a field the node does not report is
simply left out). `serve_metrics(port, get_snapshot)` is a tiny HTTP/1.0 responder for `GET /metrics`.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST = 8192


class _Families:
    """Collects samples per metric family so HELP/TYPE are written once, before its samples."""

    def __init__(self) -> None:
        self._order: list[str] = []
        self._meta: dict[str, tuple[str, str]] = {}
        self._samples: dict[str, list[str]] = {}

    def add(self, name: str, kind: str, help_text: str, value: Any, /, **labels: Any) -> None:
        number = _number(value)
        if number is None:
            return
        name = "swarm_" + name
        if name not in self._meta:
            self._order.append(name)
            self._meta[name] = (kind, help_text)
            self._samples[name] = []
        label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        self._samples[name].append(f"{name}{{{label_text}}} {number}" if labels else f"{name} {number}")

    def text(self) -> str:
        out = []
        for name in self._order:
            kind, help_text = self._meta[name]
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *self._samples[name]]
        return "\n".join(out) + "\n"


def _number(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else None
    return None


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def render_metrics(snap: dict) -> str:
    snap = _dict(snap)
    m = _Families()
    m.add("uptime_seconds", "gauge", "Seconds since the node started.", snap.get("uptime"))
    states: dict[str, int] = {"alive": 0, "gone": 0, "known": 0}
    for peer in _list(snap.get("peers")):
        state = _dict(peer).get("state")
        if isinstance(state, str):
            states[state] = states.get(state, 0) + 1
    for state, count in sorted(states.items()):
        m.add("peers", "gauge", "Known peers by membership state.", count, state=state)
    m.add("peers_connected", "gauge", "Peers with an open connection.", len(_list(snap.get("connected"))))
    m.add("peers_banned", "gauge", "Peers banned by this node's reputation ledger.", len(_list(snap.get("banned"))))
    for peer in _list(snap.get("peers")):
        peer = _dict(peer)
        if peer.get("latency_ms") is not None and peer.get("peer_id"):
            m.add("peer_latency_ms", "gauge", "Heartbeat latency to a peer.", peer["latency_ms"], peer=peer["peer_id"])
    for peer, rec in sorted(_dict(snap.get("reputation")).items()):
        m.add("peer_reputation_score", "gauge", "Reputation score this node holds for a peer.",
              _dict(rec).get("score"), peer=peer)

    messages = _dict(snap.get("messages"))
    m.add("messages_accepted_total", "counter", "Gossip messages accepted.", messages.get("accepted"))
    for reason, count in sorted(_dict(messages.get("rejected")).items()):
        m.add("messages_rejected_total", "counter", "Gossip messages rejected, by reason.", count, reason=reason)

    gossip = _dict(snap.get("gossip"))
    for topic, row in sorted(_dict(gossip.get("topics")).items()):
        row = _dict(row)
        for what in ("accepted", "rejected", "published"):
            m.add("topic_messages_total", "counter", "Gossip messages per topic: accepted, rejected, published.",
                  row.get(what), topic=topic, kind=what)
        m.add("topic_bytes_total", "counter", "Gossip payload bytes per topic.", row.get("bytes_in"),
              topic=topic, direction="in")
        m.add("topic_bytes_total", "counter", "Gossip payload bytes per topic.", row.get("bytes_out"),
              topic=topic, direction="out")
    for kind, count in sorted(_dict(gossip.get("delivered")).items()):
        m.add("delivered_total", "counter", "Messages delivered to this node, by message kind.", count, kind=kind)
    for kind, lat in sorted(_dict(gossip.get("latency")).items()):
        for q, key in (("0.5", "p50_ms"), ("0.99", "p99_ms")):
            m.add("delivery_latency_ms", "gauge", "Gossip delivery latency quantiles (recent window).",
                  _dict(lat).get(key), kind=kind, quantile=q)

    m.add("tasks", "gauge", "Tasks this node knows.", len(_list(snap.get("tasks"))))
    for task, version in sorted(_dict(snap.get("versions")).items()):
        m.add("policy_version", "gauge", "Newest policy version this node knows, per task.", version, task=task)
    _work_metrics(m, _dict(snap.get("work")))

    host = _dict(snap.get("host"))
    stats = _dict(host.get("stats"))
    for direction in ("in", "out"):
        total = sum(v for v in _dict(stats.get(f"bytes_{direction}")).values() if isinstance(v, int))
        m.add("host_bytes_total", "counter", "Request and gossip payload bytes exchanged with peers.", total,
              direction=direction)
    m.add("host_published_total", "counter", "Messages this node handed to gossipsub.", stats.get("published"))
    for reason, count in sorted(_dict(stats.get("dropped")).items()):
        m.add("host_dropped_total", "counter", "Messages the host dropped, by reason.", count, reason=reason)
    return m.text()


# Work fields that only grow (exported as counters); every other numeric field is a gauge.
_COUNTERS = {"commitments", "completions", "failures", "trained_commitments", "dropped", "rejected", "passed",
             "failed", "skipped"}


def _work_metrics(m: _Families, work: dict) -> None:
    """Every numeric field of every role's per-task state, so new roles and fields appear unasked."""
    for role, tasks in sorted(work.items()):
        for task, w in sorted(_dict(tasks).items()):
            w = _dict(w)
            for field, value in sorted(w.items()):
                name = _metric_name(f"{role}_{field}")
                if field in _COUNTERS:
                    m.add(name + "_total", "counter", f"{role} {field} (cumulative).", value, task=task)
                elif not isinstance(value, (list, dict)):
                    m.add(name, "gauge", f"{role} {field}.", value, task=task)
            held = [v for v in _list(w.get("held_versions")) if isinstance(v, int)]
            if held:
                m.add(_metric_name(f"{role}_newest_held_version"), "gauge", "Newest policy version held.", max(held),
                      task=task)
            history = [h for h in _list(w.get("history")) if isinstance(h, dict)]
            for key, value in sorted(history[-1].items() if history else ()):
                if key not in ("version", "task_id", "completions"):
                    m.add(_metric_name(f"{role}_last_{key}"), "gauge", f"{key} of the newest published version.",
                          value, task=task)


def _metric_name(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)


async def serve_metrics(port: int, get_snapshot: Callable[[], Awaitable[dict]], *, task_status) -> None:
    """Serve `GET /metrics` on 127.0.0.1:port until cancelled; one short request per connection."""
    import trio

    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")

    async def serve_one(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                with trio.fail_after(5):
                    request = b""
                    while b"\r\n\r\n" not in request and b"\n\n" not in request and len(request) < MAX_REQUEST:
                        chunk = await stream.receive_some(4096)
                        if not chunk:
                            break
                        request += chunk
                    parts = request.split(b"\r\n", 1)[0].split()
                    if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] in (b"/metrics", b"/"):
                        status, body = "200 OK", render_metrics(await get_snapshot()).encode()
                    else:
                        status, body = "404 Not Found", b"GET /metrics\n"
                    head = (f"HTTP/1.0 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
                    await stream.send_all(head + body)
            except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(serve_one, listeners)
