"""What the active trainer's next step trains on, and whether it waits for more.

A step needs `prompts_per_step` checked prompts and takes every checked batch ready up to
`max_prompts_per_step` (`step_limit`), the least off-policy first. A step that grows first waits
(`_waits`) for fresh work. The trainer (swarm/roles/trainer.py) runs the train job on what `choose` returns.
"""

from __future__ import annotations

from swarm.roles import quorum
from swarm.roles.checking import Check

PACE_WAIT = 10.0  # the longest a growing step waits for fresh work (workers gone, or slow)


def choose(ctx, now: float, state) -> list[Check]:
    """The batches of the next step, or [] when there is no step to take now. The least off-policy first;
    steps that grow (max_prompts_per_step) first take the batches this is the last step to accept (the
    next would drop them as too old): past its limit, a step leaves only batches a later step can use."""
    params = state.params
    last_chance = state.version - state.async_level if params.max_prompts_per_step is not None else -1
    ready = sorted((p for p in state.pending.values() if quorum.trainable(ctx, state, p)),
                   key=lambda p: (p.commitment.policy_version > last_chance, -p.commitment.policy_version))
    total = sum(len(p.commitment.prompt_indices) for p in ready)
    if total < params.prompts_per_step or _waits(ctx, now, state, ready, total):
        return []
    step, prompts = [], 0
    for p in ready:  # every ready batch, up to the step's limit
        if prompts >= params.prompts_per_step and prompts + len(p.commitment.prompt_indices) > params.step_limit:
            break
        step.append(p)
        prompts += len(p.commitment.prompt_indices)
    return step


def _waits(ctx, now: float, state, ready: list[Check], total: int) -> bool:
    """Whether a growing step waits: until a checked batch sampled by the policy before ours (or ours)
    is ready, a full step is, or PACE_WAIT has passed since our version. Stepping on the first
    `prompts_per_step` checked prompts made a version every second, faster than one goes round
    (shards to the workers, a generate job, a check), so batches were 3-4 versions old when
    checked, a third aged out of the async window, and steps never grew: with 16 workers the trainer
    sat idle 61% of the time (bench/scaling.py, real-jobs durations). Waiting for fresh work lets
    what arrives meanwhile join the step, so steps grow to what the swarm generates."""
    if state.params.max_prompts_per_step is None or total >= state.params.step_limit:
        return False
    if any(p.commitment.policy_version >= state.version - 1 for p in ready):
        return False
    due = state.version_at + PACE_WAIT
    if now >= due:
        return False
    ctx.timer(f"trainer:{state.spec.task_id}:pace", due)
    return True
