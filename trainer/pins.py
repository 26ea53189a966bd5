"""What a signed task pins, checked in the job process before any work; what an announcer fills in.

Two task params pin what the core cannot see (it imports no environment and reads no model file):

  - `env_version` = "<distribution>==<version>" of the package that makes the environment's prompts
    and rewards (reasoning-gym, or a plugin's package). Every environment not built into swarm must
    have one, and this peer's installed version must be that one.
  - `model_hash` = trainer/hfmodel.py `content_hash` of the base model's files. Required for `hf:`
    models (swarm/taskparams.py refuses the task otherwise), optional for `dir:` and SmolLM2; this
    peer's files must hash to it. The built-in model is made from a seed: it takes none.

A mismatch, a missing package, an unknown environment or model, files that are not there and cannot
be fetched: `TaskRefused`, whose message says what to install or fetch (files that are there but do
not load are refused the same way when the job loads them: trainer/jobs.py, `BaseModelError`). Every job that names a task
(init, generate, verify, train) passes `check_task` first, so a peer that cannot reproduce the task's
prompts, rewards or weights never generates, judges or trains anything for it (a refused verify job
is a JobError, never a verdict: an honest worker is not failed by a peer that differs from the task).
A task that passed is remembered (with its environment) for the life of the job process; a refusal
is not, so a peer that installs or fetches what was missing works on the task from its next job
(a newly installed package version is only seen by a new job process: restart the node).

`pins_for(model, env, params)` is the announcer's side: the values this node would check, computed
from its own installation, for `swarm-node task announce` to fill in where the task file leaves them out.
"""

from __future__ import annotations

import re

from swarm.taskparams import TaskParams, env_options
from trainer.envs import EnvError, Environment, get_env
from trainer.jobenv import TaskRefused

__all__ = ["TaskRefused", "build_env", "check_model", "check_task", "pins_for"]

_passed: dict[tuple, Environment] = {}


def check_task(task) -> Environment:
    """The task's environment, after checking every pin against this peer; TaskRefused otherwise.
    `task`: a swarm.jobs.TaskSpec. A pass is remembered per (task, model, env, params) per process."""
    key = (task.task_id, task.model, task.env, tuple(sorted((k, repr(v)) for k, v in task.params.items())))
    if key not in _passed:
        _passed[key] = _check(task)
    return _passed[key]


def _check(task) -> Environment:
    params = TaskParams.from_params(task.params)
    env = build_env(task.env, task.params)
    want, have = _canonical(params.env_version), _canonical(env.pin)
    if have is None and want is not None:
        raise TaskRefused(f"refused: environment {task.env!r} is built into swarm, but the task pins "
                          f"env_version {want!r}")
    if have is not None and want is None:
        raise TaskRefused(f"refused: environment {task.env!r} comes from {have} and the task does not pin "
                          "its version (task param env_version); peers with other versions would fail each "
                          f"other's checks: announce it with env_version = {have!r}")
    if have != want:
        raise TaskRefused(f"refused: the task's environment {task.env!r} needs {want}, this peer has {have}: "
                          f"run `pip install '{want}'` and restart the node")
    check_model(task.model, params.model_hash)
    return env


def _canonical(pin: str | None) -> str | None:
    """'Reasoning_Gym==0.1.25' -> 'reasoning-gym==0.1.25': distribution names compare as pip compares them."""
    if pin is None:
        return None
    name, _, version = pin.partition("==")
    return re.sub(r"[-_.]+", "-", name).lower() + "==" + version


def build_env(name: str, params) -> Environment:
    """get_env with the task's options; a missing or failing environment is TaskRefused naming the
    task's pinned package, when it has one."""
    try:
        return get_env(name, env_options(params))
    except EnvError as exc:
        want = TaskParams.from_params(params).env_version
        hint = f" (the task pins {want}: run `pip install '{want}'` and restart the node)" if want else ""
        raise TaskRefused(f"refused: {exc}{hint}") from None


def check_model(model: str, want: str | None) -> None:
    """The base model's files hash to `want` (when set); TaskRefused saying what to fetch otherwise."""
    from trainer import hfmodel
    from trainer.policy import BUILTIN_TINY, PolicyError, model_dir

    if model == BUILTIN_TINY:
        if want is not None:
            raise TaskRefused(f"refused: model {model!r} is made from a seed; the task's model_hash pins nothing")
        return
    try:
        directory = model_dir(model)
        if want is None:
            return
        have = hfmodel.content_hash(directory)
    except (PolicyError, hfmodel.ModelLoadError) as exc:
        raise TaskRefused(f"refused: {exc}") from None
    if have != want:
        fetch = (f"run `{hfmodel.parse(model).fetch_command}` to fetch them again"
                 if model.startswith(hfmodel.PREFIX) else "put the task's files there")
        raise TaskRefused(f"refused: model {model!r}: the files in {directory} hash to {have}, the task "
                          f"pins model_hash {want}; they are not the task's weights: {fetch}")


def pins_for(model: str, env: str, params) -> dict:
    """`env_version` and `model_hash` as this node would check them, for the ones `params` leaves
    out: {} for a built-in environment and model. Raises TaskRefused when this node cannot build
    the environment or find the model itself (an announcer must be able to run its own task)."""
    from trainer import hfmodel
    from trainer.policy import PolicyError, model_dir

    out = {}
    if "env_version" not in params:
        pin = build_env(env, params).pin
        if pin is not None:
            out["env_version"] = pin
    if "model_hash" not in params and model.startswith(hfmodel.PREFIX):
        try:
            out["model_hash"] = hfmodel.content_hash(model_dir(model))
        except (PolicyError, hfmodel.ModelLoadError) as exc:
            raise TaskRefused(f"cannot pin the model: {exc}") from None
    return out
