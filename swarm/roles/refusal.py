"""A peer that cannot work on a task as signed stops its role for that task, once, saying why.

The job process refuses a task whose pins this peer does not meet (trainer/pins.py: the environment's
package version, the model's content hash, a missing environment or model) with an error starting
`refused: ` (swarm/jobs.py `REFUSED`). Retrying would be refused again, and judging would fail honest
workers, so the role starts no job for the task after it: one `task-refused` event, `refused` in the
role's snapshot. The peer keeps the task and relays its gossip and weights; nobody is penalised.
"""

from __future__ import annotations

from swarm import jobs
from swarm.io import Emit


def refuses(done) -> bool:
    """A finished job that says this peer cannot work on its task."""
    return not done.ok and jobs.refused(done.error)


MAX_REASON = 1000  # characters of the job's error kept: it ends with what to install or fetch


def refuse(state, role: str, error: str) -> list:
    """Mark `state` (a role's per-task state with a `refused` field) refused; [] if it already was."""
    if state.refused:
        return []
    state.refused = error[:MAX_REASON]
    return [Emit("task-refused", {"task_id": state.spec.task_id, "role": role, "reason": state.refused})]


def too_old(ctx, state, role: str, params) -> list:
    """Refuse a task that needs capabilities this peer's release lacks (task param `requires`), before any
    job: an old peer says why in its status instead of failing checks it cannot do."""
    missing = ctx.release.missing(params.required_caps)
    if not missing:
        return []
    return refuse(state, role, f"{jobs.REFUSED}too old: the task requires {', '.join(missing)}; this peer "
                               f"speaks {ctx.release.announced}. Upgrade to a release that has them.")


def stop_trainer(state) -> None:
    """A refused trainer drops what waits for a step and starts nothing more (busy for good)."""
    state.busy = True
    state.dropped += len(state.pending) + len(state.in_step)
    state.pending.clear()
    state.in_step = []
