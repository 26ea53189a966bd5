"""A members-only task's newest version, for the members that link late (gossip/topics.py `MEMBERS`).

Gossip does not replay: a peer that joins a topic's mesh after a manifest went by hears of the version
at the trainer's next re-announcement (`republish_interval`). In a task every peer carries, only peers
that come late wait for it; in a members-only task every member joins the mesh late, since it first
has to hear a trainer's heartbeat to dial one (swarm/memberlinks.py), and in a 2,000-peer copy of
`scale-10k` (re-announcing every 300 s) four of the five workers started on version 0 at 486 s instead
of 230 s, and the run trained 12 batches instead of 16. So the active trainer re-announces
`WELCOME_DELAY` after a link opens (once the link's subscriptions are exchanged), but no sooner than
`WELCOME_GAP` after its last announcement (`announced_at`): a member that links late waits seconds, not
a republish interval.
"""

from __future__ import annotations

WELCOME_DELAY = 2.0
WELCOME_GAP = 30.0


def soon(ctx, now: float, tasks: dict) -> None:
    """A link opened: bring each members-only task's re-announcement forward (`tasks`: the trainer's)."""
    for task_id, state in tasks.items():
        if not (state.active and state.version >= 0 and state.params.member_topics):
            continue
        name = f"trainer:{task_id}:announce"
        due = ctx.timer_due(name)
        if due is None:
            continue
        at = max(now + WELCOME_DELAY, state.announced_at + WELCOME_GAP)
        if at < due:
            ctx.timer(name, at)
