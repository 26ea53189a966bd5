"""Gossip topic names (DESIGN.md, wire protocol)."""

from __future__ import annotations

TASKS = "swarm/1/tasks"
STATUS = "swarm/1/status"
PROBE = "swarm/1/probe"
GLOBAL_TOPICS = (TASKS, STATUS, PROBE)
TASK_TOPIC_KINDS = ("rollouts", "verdicts", "weights")

# Which message kinds may appear on which topic; anything else is refused as wrong-topic.
KINDS_ON_GLOBAL = {TASKS: ("task",), STATUS: ("status",), PROBE: ("probe",)}
KINDS_ON_TASK = {"rollouts": ("rollout",), "verdicts": ("verdict",), "weights": ("manifest", "checkpoint", "have", "want")}


def task_topic(task_id: str, kind: str) -> str:
    if kind not in TASK_TOPIC_KINDS:
        raise ValueError(f"unknown task topic kind {kind!r}")
    return f"swarm/1/{task_id}/{kind}"


def task_topics(task_id: str) -> tuple[str, ...]:
    return tuple(task_topic(task_id, kind) for kind in TASK_TOPIC_KINDS)


def allowed_kinds(topic: str) -> tuple[str, ...]:
    """Message kinds permitted on `topic`; empty for a topic we do not know."""
    if topic in KINDS_ON_GLOBAL:
        return KINDS_ON_GLOBAL[topic]
    parts = topic.split("/")
    if len(parts) == 4 and parts[0] == "swarm" and parts[1] == "1" and parts[3] in KINDS_ON_TASK:
        return KINDS_ON_TASK[parts[3]]
    return ()


def task_of_topic(topic: str) -> str | None:
    parts = topic.split("/")
    if len(parts) == 4 and parts[0] == "swarm" and parts[3] in KINDS_ON_TASK:
        return parts[2]
    return None
