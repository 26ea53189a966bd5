"""`swarm-node status` for people: the snapshot as a few readable lines."""

from __future__ import annotations


def render_status(snap: dict) -> str:
    ours = snap.get("protocol")
    lines = [f"peer {snap['peer_id']}  roles {','.join(snap['roles'])}  uptime {snap.get('uptime') or 0:.0f} s"
             + (f"  protocol {ours}" if ours else "")]
    lines += [f"listening {addr}" for addr in snap.get("listen_addrs", [])]
    peers = snap.get("peers", [])
    lines.append(f"peers: {len(snap.get('connected', []))} connected, {len(snap.get('alive', []))} alive, "
                 f"{len(peers)} known")
    for p in peers:
        seen = "never" if p.get("last_seen_ago") is None else f"{p['last_seen_ago']:.1f} s ago"
        lat = "" if p.get("latency_ms") is None else f"  latency {p['latency_ms']:.1f} ms"
        link = "connected" if p.get("connected") else "-"
        other = f"  protocol {p['proto']}" if p.get("proto") and p["proto"] != ours else ""  # mid-upgrade
        lines.append(f"  {p['peer_id']}  {p['state']:<5}  {link:<9}  {','.join(p.get('roles', [])) or '?':<16}"
                     f"  seen {seen}{lat}{other}")
    tasks = snap.get("tasks", [])
    lines.append(f"tasks: {len(tasks)}")
    for t in tasks:
        lines.append(f"  {t['task_id']}  {t['name']}  model={t['model']}  env={t['env']}  async_level={t['async_level']}")
        s = t.get("summary")
        if s:  # the task's trainer's own word on it (swarm/roles/summary.py)
            lines.append(f"    summary: version {s['version']} term {s['term']}, {s['workers']} workers and "
                         f"{s['completions']} completions over {s['versions']} versions, "
                         f"{s['trainers_alive']} trainers alive ({s['age']:.0f} s ago)")
        for role, work in sorted(snap.get("work", {}).items()):
            reason = (work.get(t["task_id"]) or {}).get("refused") if isinstance(work, dict) else None
            if reason:  # this node cannot work on the task as signed: what to install or fetch
                lines.append(f"    {role} REFUSED: {reason}")
    disk = snap.get("disk")
    if disk:
        free = "?" if disk.get("free_bytes") is None else f"{disk['free_bytes'] >> 20} MiB free"
        lines.append(f"disk: {free}" if disk.get("state") == "ok" else
                     f"disk {str(disk.get('state')).upper()}: {disk.get('reason')} ({free}); taking no work that "
                     "writes until it takes writes again")
    msgs = snap.get("messages", {})
    rejected = ", ".join(f"{k} {v}" for k, v in msgs.get("rejected", {}).items()) or "none"
    lines.append(f"messages: accepted {msgs.get('accepted', 0)}; rejected: {rejected}")
    if snap.get("banned"):
        lines.append(f"banned: {', '.join(snap['banned'])}")
    reputation = snap.get("reputation", {})
    if reputation:
        lines.append("reputation (this node's own ledger, lowest score first):")
        for peer, r in sorted(reputation.items(), key=lambda kv: (kv[1].get("score", 0.0), kv[0])):
            rejected = ", ".join(f"{k} {v}" for k, v in r.get("rejected", {}).items())
            lines.append(f"  {peer}  score {r.get('score', 0.0):+.1f}  accepted {r.get('accepted', 0)}"
                         + (f"  rejected: {rejected}" if rejected else "")
                         + (f"  BANNED: {r.get('ban_reason', '')}" if r.get("banned") else ""))
    return "\n".join(lines)
