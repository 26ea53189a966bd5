"""The task parameters the protocol itself reads (the rest of `task.params` is for the trainer)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from gossip.messages import TaskAnnouncement
from swarm.jobs import TaskSpec


@dataclass(frozen=True)
class TaskParams:
    group_size: int = 16  # samples per prompt: one GRPO group
    prompts_per_commit: int = 4  # prompts in one worker batch (one rollout commitment)
    prompts_per_step: int = 16  # prompts per trainer step
    n_prompts: int = 1 << 30  # the index space prompt assignment draws from
    republish_interval: float = 10.0  # how often a trainer re-announces its latest version
    max_batches_per_version: int = 256  # a worker's batches for one version, at most

    @classmethod
    def of(cls, task: TaskAnnouncement) -> "TaskParams":
        """Known keys of task.params with their types checked; a bad value falls back to the default."""
        return cls.from_params(task.params)

    @classmethod
    def from_params(cls, params) -> "TaskParams":
        """`of` for a bare params mapping (what a job's TaskSpec carries)."""
        values = {}
        for fl in fields(cls):
            raw = params.get(fl.name)
            if isinstance(raw, bool) or raw is None:
                continue
            if fl.type in ("int", int) and isinstance(raw, int) and raw > 0:
                values[fl.name] = raw
            elif fl.type in ("float", float) and isinstance(raw, (int, float)) and raw > 0:
                values[fl.name] = float(raw)
        return cls(**values)


def task_spec(task: TaskAnnouncement) -> TaskSpec:
    return TaskSpec(task_id=task.task_id, model=task.model, env=task.env, params=dict(task.params))
