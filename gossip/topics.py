"""Gossip topic names (DESIGN.md, wire protocol)."""

from __future__ import annotations

from functools import lru_cache

TASKS = "swarm/1/tasks"
STATUS = "swarm/1/status"
PROBE = "swarm/1/probe"
GLOBAL_TOPICS = (TASKS, STATUS, PROBE)
TASK_TOPIC_KINDS = ("rollouts", "verdicts", "weights")  # every peer that knows the task subscribes to these
# ...and to this one only while it downloads or seeds one of the task's versions (swarm/roles/shards.py):
# piece bitmaps concern the peers in the exchange, and a relay delivered every follower's bitmaps was
# delivered more of them the more followers the swarm had (issue 27).
PIECES = "pieces"
# A task announced with `member_topics` (swarm/taskparams.py) is carried by its members only: the peers with a
# role subscribe to its topics and link to each other (swarm/memberlinks.py), relays to none of them, and its
# workers gossip their heartbeats on this topic instead of the status topic (issue 27: at 10,000 peers the
# members' heartbeats and the task's messages were 70% of what every relay was delivered).
MEMBERS = "members"

# Which message kinds may appear on which topic; anything else is refused as wrong-topic. `have` and
# `want` stay allowed on `weights`, where peers of releases before the pieces topic publish them.
KINDS_ON_GLOBAL = {TASKS: ("task",), STATUS: ("status",), PROBE: ("probe",)}
KINDS_ON_TASK = {"rollouts": ("rollout",), "verdicts": ("verdict",), "weights": ("manifest", "checkpoint", "have", "want", "summary"),
                 PIECES: ("have", "want"), MEMBERS: ("status",)}


def task_topic(task_id: str, kind: str) -> str:
    if kind not in KINDS_ON_TASK:
        raise ValueError(f"unknown task topic kind {kind!r}")
    return f"swarm/1/{task_id}/{kind}"


def task_topics(task_id: str, pieces: bool = False, members: bool = False) -> tuple[str, ...]:
    """The topics every peer that knows the task subscribes to (with `pieces`: and the pieces topic; with
    `members`: and the members topic, which only a task announced with `member_topics` has)."""
    kinds = TASK_TOPIC_KINDS + ((MEMBERS,) if members else ()) + ((PIECES,) if pieces else ())
    return tuple(task_topic(task_id, kind) for kind in kinds)


@lru_cache(maxsize=4096)  # asked for every message received; a runtime hands only subscribed topics
def allowed_kinds(topic: str) -> tuple[str, ...]:
    """Message kinds permitted on `topic`; empty for a topic we do not know."""
    if topic in KINDS_ON_GLOBAL:
        return KINDS_ON_GLOBAL[topic]
    parts = topic.split("/")
    if len(parts) == 4 and parts[0] == "swarm" and parts[1] == "1" and parts[3] in KINDS_ON_TASK:
        return KINDS_ON_TASK[parts[3]]
    return ()


@lru_cache(maxsize=4096)
def task_of_topic(topic: str) -> str | None:
    parts = topic.split("/")
    if len(parts) == 4 and parts[0] == "swarm" and parts[3] in KINDS_ON_TASK:
        return parts[2]
    return None
