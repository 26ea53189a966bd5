"""What the TUI shows, computed from status snapshots: pure functions, no Textual.

Why separate from the widgets: the snapshot comes from another process (and another version of the
code), so every field is optional and of unknown type. All defensive reading lives here, where it is
tested without a terminal; the panels only lay out rows of strings.
"""

from __future__ import annotations

from typing import Any


def d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def lst(value: Any) -> list:
    return value if isinstance(value, list) else []


def num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def short_id(peer_id: Any) -> str:
    text = str(peer_id or "?")
    return text[:6] + ".." + text[-6:] if len(text) > 16 else text


def fmt_num(value: Any, digits: int = 0, none: str = "-") -> str:
    x = num(value)
    if x is None:
        return none
    return f"{x:,.{digits}f}"


def fmt_bytes(value: Any) -> str:
    x = num(value)
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return "-"


def fmt_ago(value: Any) -> str:
    x = num(value)
    if x is None:
        return "never"
    return f"{x:.1f}s ago" if x < 120 else f"{x / 60:.0f}m ago"


def identity_lines(snap: dict) -> list[str]:
    snap = d(snap)
    roles = ",".join(str(r) for r in lst(snap.get("roles"))) or "?"
    up = num(snap.get("uptime"))
    lines = [f"peer      {snap.get('peer_id') or '?'}",
             f"roles     {roles}",
             f"agent     {snap.get('agent') or '?'}",
             f"uptime    {'?' if up is None else f'{up:,.0f} s'}    pid {snap.get('pid') or '?'}",
             f"data dir  {snap.get('data_dir') or '?'}"]
    addrs = [str(a) for a in lst(snap.get("listen_addrs"))]
    lines += ["listening " + (addrs[0] if addrs else "(none reported)")] + [f"          {a}" for a in addrs[1:]]
    lines.append(f"peers     {len(lst(snap.get('connected')))} connected, {len(lst(snap.get('alive')))} alive, "
                 f"{len(lst(snap.get('peers')))} known, {len(lst(snap.get('banned')))} banned")
    msgs = d(snap.get("messages"))
    rejected = sum(v for v in d(msgs.get("rejected")).values() if isinstance(v, int))
    lines.append(f"messages  {fmt_num(msgs.get('accepted'))} accepted, {rejected:,} rejected")
    return lines


PEER_COLUMNS = ("peer", "roles", "state", "link", "latency ms", "in", "out", "last seen", "score", "banned")


def peer_rows(snap: dict, text_filter: str = "") -> list[tuple[str, tuple[str, ...]]]:
    """(peer_id, cells) per known peer, plus banned ones the table has forgotten; filtered by substring."""
    snap = d(snap)
    stats = d(d(snap.get("host")).get("stats"))
    bytes_in, bytes_out = d(stats.get("bytes_in")), d(stats.get("bytes_out"))
    reputation = d(snap.get("reputation"))
    banned = {str(p) for p in lst(snap.get("banned"))}
    peers = [d(p) for p in lst(snap.get("peers")) if d(p).get("peer_id")]
    listed = {str(p["peer_id"]) for p in peers}
    peers += [{"peer_id": p, "state": "banned"} for p in sorted(banned - listed)]
    rows = []
    for p in peers:
        pid = str(p["peer_id"])
        rep = d(reputation.get(pid))
        is_banned = pid in banned or rep.get("banned") is True
        cells = (short_id(pid), ",".join(str(r) for r in lst(p.get("roles"))) or "?", str(p.get("state") or "?"),
                 "connected" if p.get("connected") else "-", fmt_num(p.get("latency_ms"), 1),
                 fmt_bytes(bytes_in.get(pid)), fmt_bytes(bytes_out.get(pid)), fmt_ago(p.get("last_seen_ago")),
                 fmt_num(rep.get("score"), 1),
                 ("BANNED " + str(rep.get("ban_reason") or "")).strip() if is_banned else "")
        needle = text_filter.strip().lower()
        if needle and needle not in (pid + " " + " ".join(cells)).lower():
            continue
        rows.append((pid, cells))
    return rows


TOPIC_COLUMNS = ("topic", "accepted/s", "rejected/s", "published/s", "accepted", "rejected", "published", "in", "out")


def topic_rows(prev: dict | None, snap: dict, dt: float | None) -> list[tuple[str, ...]]:
    """Per topic: rates from the difference of two snapshots (blank until there are two), and totals."""
    now_topics = d(d(d(snap).get("gossip")).get("topics"))
    old_topics = d(d(d(prev).get("gossip")).get("topics"))
    rows = []
    for topic in sorted(now_topics):
        row, old = d(now_topics[topic]), d(old_topics.get(topic))

        def rate(key: str) -> str:
            a, b = num(row.get(key)), num(old.get(key))
            if not dt or dt <= 0 or a is None or b is None or a < b:
                return "-"
            return f"{(a - b) / dt:.1f}"
        rows.append((str(topic), rate("accepted"), rate("rejected"), rate("published"), fmt_num(row.get("accepted")),
                     fmt_num(row.get("rejected")), fmt_num(row.get("published")), fmt_bytes(row.get("bytes_in")),
                     fmt_bytes(row.get("bytes_out"))))
    return rows


def verdict_rows(snap: dict) -> list[tuple[str, str, str]]:
    """(what, reason, count): accepted, rejected by reason, host drops by reason, latency by kind."""
    snap = d(snap)
    msgs = d(snap.get("messages"))
    rows = [("accepted", "", fmt_num(msgs.get("accepted")))]
    rows += [("rejected", str(k), fmt_num(v)) for k, v in sorted(d(msgs.get("rejected")).items())]
    stats = d(d(snap.get("host")).get("stats"))
    rows += [("host dropped", str(k), fmt_num(v)) for k, v in sorted(d(stats.get("dropped")).items())]
    rows += [("delivered", str(k), fmt_num(v)) for k, v in sorted(d(d(snap.get("gossip")).get("delivered")).items())]
    for kind, lat in sorted(d(d(snap.get("gossip")).get("latency")).items()):
        lat = d(lat)
        rows.append(("latency", str(kind), f"p50 {fmt_num(lat.get('p50_ms'), 1)} ms  p99 {fmt_num(lat.get('p99_ms'), 1)} ms"))
    return rows


TASK_COLUMNS = ("task", "name", "env", "current", "held", "lag", "async lvl", "trainers", "active trainer", "workers")


def task_view(snap: dict) -> dict[str, dict]:
    """Per task id: name, env, current version, held versions and async lag as this node sees them.

    current = the newest version this node knows (core versions, trainer or worker state);
    lag = current - the newest version this node holds (workers), or None if it holds none."""
    snap = d(snap)
    versions = d(snap.get("versions"))
    work = d(snap.get("work"))
    workers, trainers = d(work.get("worker")), d(work.get("trainer"))
    tasks = {str(t.get("task_id")): t for t in map(d, lst(snap.get("tasks"))) if t.get("task_id")}
    ids = sorted(set(tasks) | set(versions) | set(workers) | set(trainers))
    out = {}
    for tid in ids:
        t, w, tr = d(tasks.get(tid)), d(workers.get(tid)), d(trainers.get(tid))
        known = [v for v in (versions.get(tid), tr.get("version"), w.get("latest_version")) if num(v) is not None]
        current = int(max(known)) if known else None
        held = sorted(int(v) for v in lst(w.get("held_versions")) if num(v) is not None)
        lag = current - held[-1] if current is not None and held else None
        downloading = [f"v{x.get('version')} {x.get('held')}/{x.get('shards')}" for x in map(d, lst(snap.get("downloads")))
                       if x.get("task_id") == tid and not x.get("complete")]
        out[tid] = {"name": t.get("name"), "env": t.get("env"), "model": t.get("model"), "current": current,
                    "held": held, "lag": lag, "async_level": t.get("async_level"),
                    "trainers": len(lst(t.get("trainers"))), "downloading": downloading,
                    "active_trainer": active_trainer(t),
                    # the workers its trainer trained lately, by the task summary (swarm/roles/summary.py)
                    "workers": d(t.get("summary")).get("workers")}
    return out


def active_trainer(task: dict) -> str:
    """'12D3Ko..abcdef r1 t2' (rank, term) of the task's active trainer; '-' before any version is heard."""
    active = d(d(task.get("trainer_chain")).get("active"))
    if not active.get("peer_id"):
        return "-"
    return f"{short_id(active.get('peer_id'))} r{fmt_num(active.get('rank'))} t{fmt_num(active.get('term'))}"


def task_rows(snap: dict) -> list[tuple[str, ...]]:
    rows = []
    for tid, v in task_view(snap).items():
        held = v["held"]
        held_text = "-" if not held else ",".join(map(str, held[-4:])) + (" .." if len(held) > 4 else "")
        if v["downloading"]:  # shards of a version being fetched: "v5 12/48"
            held_text += " (fetching " + ", ".join(v["downloading"][-2:]) + ")"
        rows.append((tid[:12], str(v["name"] or "?"), str(v["env"] or "?"), fmt_num(v["current"]), held_text,
                     fmt_num(v["lag"]), fmt_num(v["async_level"]), str(v["trainers"]),
                     v["active_trainer"], fmt_num(v["workers"])))
    return rows


def peer_version_rows(snap: dict) -> list[tuple[str, str, str, str, str]]:
    """(peer, roles, task, version it reports, lag behind our current): how far behind each peer runs."""
    view = task_view(snap)
    rows = []
    for p in map(d, lst(d(snap).get("peers"))):
        for tid, version in sorted(d(p.get("versions")).items()):
            current = d(view.get(tid)).get("current")
            lag = current - version if num(current) is not None and num(version) is not None else None
            rows.append((short_id(p.get("peer_id")), ",".join(map(str, lst(p.get("roles")))) or "?", str(tid)[:12],
                         fmt_num(version), fmt_num(lag)))
    return rows


WORK_COLUMNS = ("role", "task", "version", "rollouts", "completions", "trainer steps", "pending", "dropped", "detail")
# Which snapshot field fills a column, per role; the first key present wins. Fields not used here
# go to "detail", so a role or field added later still shows up without a TUI change.
_WORK_FIELDS = {
    "rollouts": ("commitments", "trained_commitments", "checked"),
    "completions": ("completions",),
    "pending": ("pending", "ready", "checking"),
    "dropped": ("dropped",),
}
_NOT_DETAIL = {"history", "held_versions", "latest_version", "version", "task_id"}


def work_rows(snap: dict) -> list[tuple[str, ...]]:
    """One row per role and task. A trainer publishes one version per GRPO step, so steps = version."""
    rows = []
    for role, tasks in sorted(d(d(d(snap).get("work"))).items()):
        for tid, w in sorted(d(tasks).items()):
            w = d(w)
            used = set(_NOT_DETAIL)
            cells = {}
            for column, keys in _WORK_FIELDS.items():
                key = next((k for k in keys if k in w), None)
                cells[column] = fmt_num(w.get(key)) if key else "-"
                used.add(key)
            held = [v for v in lst(w.get("held_versions")) if num(v) is not None]
            version = w.get("version") if "version" in w else max(held) if held else w.get("latest_version")
            steps = fmt_num(w.get("version")) if role == "trainer" else "-"
            detail = "  ".join(f"{k} {fmt_num(v, 3) if isinstance(v, float) else v}" for k, v in sorted(w.items())
                               if k not in used and isinstance(v, (int, float, str, bool)))
            rows.append((str(role), str(tid)[:12], fmt_num(version), cells["rollouts"], cells["completions"], steps,
                         cells["pending"], cells["dropped"], detail))
    return rows


def reward_series(snap: dict) -> dict[str, list[dict]]:
    """Per task: the trainer's history records (version, completions, reward, loss, ...), oldest first."""
    out = {}
    for tid, t in sorted(d(d(d(snap).get("work")).get("trainer")).items()):
        records = [h for h in map(d, lst(d(t).get("history"))) if num(h.get("version")) is not None]
        if records:
            out[str(tid)] = sorted(records, key=lambda h: h["version"])
    return out


def metric_names(series: dict[str, list[dict]]) -> list[str]:
    """Numeric keys found in the history records, reward first."""
    keys = {k for records in series.values() for h in records for k, v in h.items()
            if num(v) is not None and k not in ("version", "completions")}
    preferred = [k for k in ("reward", "heldout_greedy", "loss") if k in keys]
    return preferred + sorted(keys - set(preferred))


# Work counters whose growth is worth a line in the event log: (role, field, event kind).
_COUNTED = (("worker", "failures", "error"), ("trainer", "dropped", "error"), ("trainer", "rejected", "verdict"),
            ("validator", "failed", "verdict"), ("validator", "passed", "verdict"))


def diff_events(prev: dict | None, snap: dict) -> list[tuple[str, str]]:
    """(kind, text) for what changed between two snapshots: peers, bans, versions, rejections, failures."""
    if not prev:
        return []
    prev, snap = d(prev), d(snap)
    events: list[tuple[str, str]] = []
    if prev.get("peer_id") != snap.get("peer_id"):
        return [("node", f"now watching {short_id(snap.get('peer_id'))} (was {short_id(prev.get('peer_id'))})")]
    old_peers = {str(p.get("peer_id")): p for p in map(d, lst(prev.get("peers")))}
    for p in map(d, lst(snap.get("peers"))):
        pid, old = str(p.get("peer_id")), old_peers.get(str(p.get("peer_id")))
        if old is None:
            events.append(("peer", f"new peer {short_id(pid)} ({p.get('state')})"))
        elif old.get("state") != p.get("state"):
            events.append(("peer", f"peer {short_id(pid)} {old.get('state')} -> {p.get('state')}"))
    for pid in sorted(set(map(str, lst(snap.get("banned")))) - set(map(str, lst(prev.get("banned"))))):
        reason = d(d(snap.get("reputation")).get(pid)).get("ban_reason")
        events.append(("ban", f"banned {short_id(pid)}" + (f": {reason}" if reason else "")))
    old_versions = d(prev.get("versions"))
    for tid, version in sorted(d(snap.get("versions")).items()):
        if old_versions.get(tid) != version:
            events.append(("version", f"task {str(tid)[:12]} version {old_versions.get(tid, '-')} -> {version}"))
    old_rej = d(d(prev.get("messages")).get("rejected"))
    for reason, count in sorted(d(d(snap.get("messages")).get("rejected")).items()):
        before = num(old_rej.get(reason)) or 0
        if num(count) is not None and count > before:
            events.append(("rejected", f"{count - before:.0f} message(s) rejected: {reason}"))
    for role, key, kind in _COUNTED:
        old_work = d(d(prev.get("work")).get(role))
        for tid, w in sorted(d(d(snap.get("work")).get(role)).items()):
            a, b = num(d(w).get(key)), num(d(old_work.get(tid)).get(key)) or 0
            if a is not None and a > b:
                events.append((kind, f"{role} {str(tid)[:12]}: {a - b:.0f} more {key} (total {a:.0f})"))
    old_stats, stats = d(d(prev.get("host")).get("stats")), d(d(snap.get("host")).get("stats"))
    for key in ("guarded_errors", "dropped"):
        for reason, count in sorted(d(stats.get(key)).items()):
            before = num(d(old_stats.get(key)).get(reason)) or 0
            if num(count) is not None and count > before:
                events.append(("error", f"host {key.replace('_', ' ')}: {reason} +{count - before:.0f}"))
    return events
