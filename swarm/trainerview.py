"""Who trains each task, as an operator reads it: the active trainer, its term, the standbys.

Read from the fork choice (swarm/forkchoice.py: the head chain's (term, rank)), the task's ranked
`trainer_keys`, the peers' heartbeats (alive, newest version held) and this peer's own trainer role.
This peer's own entry adds the newest trainer checkpoint it holds (swarm/roles/trainerstate.py): a
standby's state lag is only known to itself (heartbeats do not carry it). Reading never creates a fork choice: a task with no manifest heard yet has no active trainer here."""

from __future__ import annotations

from gossip.identity import peer_id_from_public_key


def task_trainers(core, task_id: str, trainer_keys: tuple[bytes, ...], own: dict | None) -> dict:
    """{"active", "standbys", "self"} for one task; `own` is this peer's trainer role snapshot of it."""
    fork = core.chains.tasks.get(task_id)
    head = fork.head if fork is not None else None
    ids = [peer_id_from_public_key(k) for k in trainer_keys]
    active_rank = head[1] if head is not None and head[1] < len(ids) else None
    active = None
    if active_rank is not None:
        active = {"peer_id": ids[active_rank], "rank": active_rank, "term": head[0], "version": fork.head_version}
    alive = set(core.membership.alive_peers()) | {core.peer_id}
    standbys = []
    for rank, peer in enumerate(ids):
        if rank == active_rank:
            continue
        version = _version_of(core, peer, task_id)
        behind = None if active is None or version is None else max(0, active["version"] - version)
        standbys.append({"peer_id": peer, "rank": rank, "alive": peer in alive, "version": version,
                         "behind": behind})
    mine = None
    if own is not None and core.peer_id in ids:
        state_version = (own.get("checkpoint") or {}).get("version")
        mine = {"state": "active" if own.get("active") else "standby", "rank": own.get("rank"),
                "term": own.get("term"),
                # the newest trainer checkpoint held (published, or fetched by a standby): what a takeover
                # continues from, and how many versions of optimizer state it would miss
                "state_version": state_version,
                "state_behind": None if state_version is None or active is None
                else max(0, active["version"] - state_version)}
    return {"active": active, "standbys": standbys, "self": mine}


def _version_of(core, peer: str, task_id: str) -> int | None:
    """The newest version `peer` holds: ours from the core, another's from its heartbeat."""
    if peer == core.peer_id:
        return core.versions.get(task_id)
    info = core.membership.peers.get(peer)
    return None if info is None else info.versions.get(task_id)
