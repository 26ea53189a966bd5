"""A peer's status as plain JSON-able data: what `swarm-node status`, the TUI and the simulator's
reports read. Kept apart from the core so the shape operators depend on is in one place and reading
it never changes the peer."""

from __future__ import annotations

from swarm.trainerview import task_trainers


def status(core, now: float) -> dict:
    """Everything a status screen needs, from a `PeerCore`'s public parts."""
    ledger = core.ledger
    work = {role.name: role.snapshot() for role in core.roles}
    tasks = core.tasks.snapshot()
    for t in tasks:  # who trains it: active trainer and term, standbys, this peer's own trainer state
        own = work.get("trainer", {}).get(t["task_id"])
        t["trainer_chain"] = task_trainers(core, t["task_id"], core.tasks.tasks[t["task_id"]].task.trainer_keys, own)
        t["summary"] = core.summaries.snapshot(t["task_id"], now)  # its trainer's word on it (swarm/summaries.py)
    return {
        "peer_id": core.peer_id,
        "agent": core.config.agent,
        "protocol": str(core.release.announced),  # version and capabilities (gossip/release.py)
        "roles": list(core.config.roles),
        "listen_addrs": list(core.listen_addrs),
        "now": now,
        "uptime": None if core.started_at is None else round(now - core.started_at, 3),
        "peers": core.membership.snapshot(now, core.links.judged()),
        "connected": core.membership.connected_peers(),
        "alive": core.membership.alive_peers(),
        "membership": core.membership.budget_snapshot(),  # our pace, and what newcomers hold (issue 27)
        "flooding": {"links_cut": core.floods.links_cut, "refusing": len(core.floods.refused)},  # swarm/floodwatch.py
        "tasks": tasks,
        "versions": dict(sorted(core.versions.items())),
        "downloads": core.shards.snapshot(now),
        "weight_bytes": core.shards.byte_counts(),
        "work": work,
        "gossip": core.stats.snapshot(),
        # gossip messages by verdict, one count each (the host's validator counters match these)
        "messages": {"accepted": core.intake.accepted, "rejected": dict(sorted(core.intake.rejected.items())),
                     "excused": core.intake.excused, "kept": core.intake.kept},
        "stalls": core.stall.snapshot(),  # this node's own pauses (swarm/stall.py)
        "penalties": dict(sorted(ledger.totals_rejected.items())),  # every charge, requests and streams too
        "reputation": ledger.snapshot()["peers"],
        "banned": ledger.banned_peers(),
    }
