"""Every key a task's `params` table may hold, declared once: the protocol's, the trainer's, the weights'.

A task file is checked against this model before it is signed (node/taskfile.py), a scenario's tasks
when the scenario loads, and a task announcement from the network when it arrives (swarm/tasks.py):
an unknown key or a bad value refuses the task with a reason naming the key, never a silent default,
because every peer must read a signed task the same way. A trainer setting left out (None) means the
trainer's own default (trainer/grpo.py `GRPOConfig`, trainer/warmup.py, trainer/versions.py).

Keys `env.<...>` are the environment's own options (`env_options`): their meaning belongs to the
environment, which the job process builds (trainer/envs.py), so here they are only checked to be
scalars under a non-empty name. What the core cannot check (is this generator or model installed,
at the pinned version, with the pinned content) the job process checks before any work, and refuses
the task with what to install or fetch (trainer/pins.py).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from pydantic import Field, StrictBool, ValidationError, model_validator

from gossip.messages import TaskAnnouncement
from swarm.jobs import TaskSpec
from swarm.settings import Settings, explain

MAX_SHARD_SIZE = 64 << 20
MIN_PIECE_SIZE = 256  # trainer/weights/manifest.py refuses smaller pieces
ENV_PREFIX = "env."  # task params under it are the environment's options
HF_MODEL = re.compile(r"hf:[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*@[0-9a-f]{40}")


class ParamError(ValueError):
    """A task parameter is unknown, or has the wrong type or range; the message names it."""


class TaskParams(Settings):
    # ---- read by the protocol (workers, trainers, validators)
    group_size: int = Field(16, gt=0, description="samples per prompt: one GRPO group")
    prompts_per_commit: int = Field(4, gt=0, description="prompts in one worker batch (one rollout commitment)")
    prompts_per_step: int = Field(16, gt=0, description="prompts per trainer step")
    n_prompts: int = Field(1 << 30, gt=0, description="the index space prompt assignment draws from")
    republish_interval: float = Field(10.0, gt=0, description="seconds between a trainer's re-announcements "
                                                              "of its latest version")
    takeover_after: float | None = Field(None, gt=0, description="seconds of silence from the active trainer "
                                         "before a standby takes over; None: 3 x republish_interval")
    state_every: int = Field(20, gt=0, description="versions between the active trainer's checkpoints "
                                                   "(tasks with several trainers)")
    standby_checks: StrictBool = Field(False, description="standby trainers check rollout batches as they come "
                                                          "(verdicts published), so a takeover starts warm")
    member_topics: StrictBool = Field(False, description="the task's gossip (rollouts, verdicts, weights, and its "
                                      "workers' heartbeats on its members topic) is carried by the peers with a "
                                      "role, linked to each other, not by every peer (swarm/memberlinks.py)")
    max_batches_per_version: int = Field(256, gt=0, description="a worker's batches for one version, at most")
    validate_fraction: float = Field(1.0, ge=0, le=1, description="share of commitments a validator checks "
                                                                  "(check_quorum 0 only)")
    # ---- who checks (swarm/roles/quorum.py; docs/security.md derives the trade)
    check_quorum: int = Field(0, ge=0, le=8, description="passes from checkers the trainer asked that a batch "
                                                         "needs before it is trained on; 0: the trainer checks "
                                                         "every batch itself")
    spot_check: float = Field(0.1, ge=0, le=1, description="with check_quorum: share of batches the trainer also "
                                                           "checks itself (drawn from its own signature)")
    peer_checks: StrictBool = Field(False, description="with check_quorum: workers that have had work trained on "
                                                       "check each other's batches, besides the validators")
    quorum_wait: float = Field(60.0, gt=0, description="seconds the trainer waits for a batch's quorum before "
                                                       "checking it itself")
    max_prompts_per_step: int | None = Field(None, gt=0, description="a step trains on every checked prompt "
                                             "ready, up to this many (optimizer steps grow with it); None: "
                                             "prompts_per_step")
    # ---- read by the trainer's jobs (None: the trainer's default)
    lr: float | None = Field(None, gt=0, description="AdamW learning rate")
    lr_warmup: int | None = Field(None, ge=0, description="batches over which lr ramps up; 0: constant")
    lr_decay_start: int | None = Field(None, ge=0, description="the batch where the cosine decay begins")
    lr_decay_steps: int | None = Field(None, ge=0, description="batches over which lr falls to lr_min; 0: none")
    lr_min: float | None = Field(None, ge=0, description="the rate after the decay")
    clip_low: float | None = Field(None, gt=0, description="ratio clipped below at 1 - clip_low")
    clip_high: float | None = Field(None, gt=0, description="ratio clipped above at 1 + clip_high")
    delta: float | None = Field(None, gt=0, description="upper bound on the ratio for negative advantages")
    minibatches: int | None = Field(None, gt=0, description="optimizer steps per batch")
    temperature: float | None = Field(None, ge=0, description="sampling temperature for rollouts")
    max_new_tokens: int | None = Field(None, gt=0, description="tokens a completion may add")
    weight_decay: float | None = Field(None, ge=0, description="AdamW weight decay")
    max_grad_norm: float | None = Field(None, gt=0, description="gradient clipping threshold")
    std_normalize: StrictBool | None = Field(None, description="divide advantages by the group std")
    format_weight: float | None = Field(None, ge=0, description="weight of the env's format reward")
    decoupled: StrictBool | None = Field(None, description="clip around the step's start weights (stale batches); "
                                                           "None: on when steps grow (max_prompts_per_step)")
    beta1: float | None = Field(None, gt=0, lt=1, description="AdamW beta1")
    beta2: float | None = Field(None, gt=0, lt=1, description="AdamW beta2")
    warmup_steps: int | None = Field(None, ge=0, description="supervised warm-up steps of a built-in model")
    eval_prompts: int | None = Field(None, ge=0, description="held-out prompts of the trainer's evaluation")
    # ---- how versions are carried
    shard_size: int | None = Field(None, ge=256, le=MAX_SHARD_SIZE, description="bytes per weight shard")
    piece_size: int | None = Field(None, ge=MIN_PIECE_SIZE, description="bytes per requested piece of a shard")
    full_every: int | None = Field(None, ge=1, description="a full version after this many deltas")
    weights_dtype: Literal["bf16", "fp16", "fp32"] | None = Field(None, description="dtype weights travel in")
    # ---- what the peer's release must speak (gossip/release.py)
    requires: str = Field("", pattern=r"^([a-z0-9][a-z0-9-]{0,31}(,[a-z0-9][a-z0-9-]{0,31}){0,15})?$",
                          description="capabilities a peer's release must have to work on the task, comma-"
                                      "separated; a peer without them relays the task and says it is too old")
    # ---- what the job process must have installed (trainer/pins.py)
    env_version: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$",
                                    description="<distribution>==<version> of the package that makes the "
                                                "environment's prompts and rewards (required for any env not built in)")
    model_hash: str | None = Field(None, pattern=r"^[0-9a-f]{48}$",
                                   description="content hash of the base model's files (trainer/hfmodel.py "
                                               "content_hash; required for hf: models)")

    @model_validator(mode="after")
    def _decay_only_lowers(self) -> "TaskParams":
        """Refused when the task is announced, not first when a trainer's job reads it (trainer/taskconfig.py
        also checks lr_min against its default lr)."""
        if self.lr is not None and self.lr_min is not None and self.lr_min > self.lr:
            raise ValueError(f"lr_min ({self.lr_min}) must not be above lr ({self.lr}): the decay only lowers it")
        return self

    @property
    def takeover_s(self) -> float:
        """The active trainer's liveness signal is its re-announcement (every `republish_interval`, training
        or not), so silence is judged against that period, not the version period: three missed
        re-announcements make a takeover."""
        return self.takeover_after if self.takeover_after is not None else 3.0 * self.republish_interval

    @property
    def required_caps(self) -> tuple[str, ...]:
        return tuple(self.requires.split(",")) if self.requires else ()

    @property
    def step_limit(self) -> int:
        """The most prompts one step trains on (never fewer than a step needs)."""
        return max(self.prompts_per_step, self.max_prompts_per_step or 0)

    @property
    def decoupled_objective(self) -> bool:
        """Whether steps use the decoupled objective (trainer/grpo.py). By default, when steps grow: a
        grown step is many optimizer steps, and its batches were sampled a version or two earlier, so
        dozens of updates before the step's later minibatches; clipped around the sampling policy,
        their ratios left the clip range and gave no gradient (16 workers needed 3.3x the rollouts of
        one to reach the same reward, 1.9x with it), so the trust region is centred on the step's start
        weights and the staleness corrected by a weight instead (docs/benchmarks.md, issue 25)."""
        return self.max_prompts_per_step is not None if self.decoupled is None else self.decoupled

    @classmethod
    def of(cls, task: TaskAnnouncement) -> "TaskParams":
        """task.params checked, with what they require of the task's model (raises ParamError naming the key)."""
        params = cls.from_params(task.params)
        check_model(task.model, params)
        return params

    @classmethod
    def from_params(cls, params) -> "TaskParams":
        """`of` for a bare params mapping (what a job's TaskSpec carries). Parsed once per distinct table."""
        # the key holds each value's type: True == 1 and 16.0 == 16, but only one of each is valid
        return _parse(tuple((key, type(value), value) for key, value in params.items()
                            if not key.startswith(ENV_PREFIX)), tuple(k for k in params if k.startswith(ENV_PREFIX)))


def env_options(params) -> dict:
    """The environment's options: the `env.*` params, prefix removed."""
    return {key[len(ENV_PREFIX):]: value for key, value in params.items() if key.startswith(ENV_PREFIX)}


def check_model(model: str, params: TaskParams) -> None:
    """What the params must say about the model: an `hf:` name is ORG/NAME@<40-hex commit> and comes
    with its `model_hash`, so every peer loads the same bytes (ParamError otherwise)."""
    if model.startswith("hf:"):
        if not HF_MODEL.fullmatch(model):
            raise ParamError(f"model {model!r}: write hf:ORG/NAME@REVISION with REVISION a full 40-hex commit id")
        if params.model_hash is None:
            raise ParamError(f"model {model!r}: task param model_hash (the files' content hash) is required "
                             "for hf: models; `swarm-node task announce` fills it in from this node's copy")


@lru_cache(maxsize=64)
def _parse(items: tuple, env_keys: tuple = ()) -> TaskParams:
    for key in env_keys:
        if key == ENV_PREFIX or key.endswith(".") or ".." in key:
            raise ParamError(f"task param {key!r}: environment options are env.<name> (env.<task>.<option> "
                             "for reasoning-gym)")
    try:
        return TaskParams.model_validate({key: value for key, _, value in items})
    except ValidationError as exc:
        raise ParamError("task param " + explain(exc)) from None


def task_spec(task: TaskAnnouncement) -> TaskSpec:
    return TaskSpec(task_id=task.task_id, model=task.model, env=task.env, params=dict(task.params))
