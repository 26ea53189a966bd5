"""Task files (TOML) to signed-ready `TaskAnnouncement`s, with errors that name the key.

Schema (the fields of `TaskTable` below; `[task.params]` is swarm/taskparams.py `TaskParams`):

    [task]
    name = "digit-sort"            # letters, digits, - _ .
    model = "builtin:digit-sort-tiny"
    env = "digit-sort"
    async_level = 2                # 0..16
    lifetime_hours = 168           # > 0, at most 720 (30 days)
    trainers = ["self"]            # peer ids (12D3Koo...) or "self"
    validators = []                # peer ids or "self"
    [task.params]                  # the keys TaskParams declares, at most 64
    lr = 3e-5
    [task.params.env.basic_arithmetic]   # the environment's options: flattened to "env.basic_arithmetic.max_terms"
    max_terms = 2

Sub-tables of `[task.params]` are flattened into dotted keys (the announcement's params are scalars).
`fill_pins` adds what the node's own installation says a task must pin (`env_version`,
`model_hash`: trainer/pins.py) where the table leaves them out.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from gossip.identity import Identity, public_key_from_peer_id
from gossip.messages import TaskAnnouncement
from swarm.settings import Settings, Strs, explain
from swarm.taskparams import ParamError, TaskParams, check_model

EXAMPLE = Path(__file__).parent / "examples" / "digit-sort.toml"


class TaskFileError(Exception):
    pass


class TaskTable(Settings):
    name: str = Field(description="the task's name: letters, digits, - _ .")
    model: str = Field(description='"builtin:<name>" or a model name the nodes resolve offline')
    env: str = Field(description="the environment that makes prompts and scores completions")
    async_level: int = Field(2, ge=0, le=16, description="how many versions old a worker's policy may be")
    lifetime_hours: float = Field(168.0, gt=0, le=720, description="the task expires this long after it is announced")
    trainers: Strs = Field(("self",), description='peer ids that may publish versions; "self": the announcer')
    validators: Strs = Field((), description='peer ids whose verdicts trainers trust; "self": the announcer')
    params: dict = Field({}, description="task params: the keys swarm/taskparams.py TaskParams declares")


class TaskFile(Settings):
    task: TaskTable


def load_task_file(path: Path, announcer: Identity, now: float) -> TaskAnnouncement:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise TaskFileError(f"{path}: no such file (the built-in example is {EXAMPLE})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{path}: not valid TOML: {exc}") from None
    return task_from_dict(data, announcer, now, where=str(path))


def flat_params(params: dict, where: str = "task", prefix: str = "") -> dict:
    """`[task.params]` with sub-tables flattened into dotted keys; a value that is no scalar is refused."""
    out = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, where, f"{name}."))
        elif isinstance(value, (str, int, float, bool)):
            out[name] = value
        else:
            raise TaskFileError(f"{where}: task.params.{name} must be a number, string or boolean, got "
                                f"{type(value).__name__} (a list of options: one comma-separated string)")
    return out


def fill_pins(data: dict[str, Any], where: str = "task") -> dict[str, Any]:
    """The task table with `env_version` and `model_hash` added where it leaves them out and this
    node's installation says the task needs them (trainer/pins.py); TaskFileError when this node
    cannot build the environment or find the model (an announcer must be able to run its task).
    Imports the trainer: call it in the CLI, not in the node's event loop."""
    from trainer.envs import ENVIRONMENTS

    task = data.get("task") if isinstance(data, dict) else None
    if (not isinstance(task, dict) or not isinstance(task.get("model"), str) or not isinstance(task.get("env"), str)
            or not isinstance(task.get("params", {}), dict)):
        return data  # task_from_dict says what is wrong with it
    params = flat_params(task.get("params") or {}, where)
    if task["env"] in ENVIRONMENTS and not task["model"].startswith("hf:"):
        return {**data, "task": {**task, "params": params}}  # nothing to pin: no need to load the trainer
    from trainer.jobenv import TaskRefused
    from trainer.pins import pins_for

    try:
        pins = pins_for(task["model"], task["env"], params)
    except TaskRefused as exc:
        raise TaskFileError(f"{where}: {exc}") from None
    return {**data, "task": {**task, "params": {**params, **pins}}}


def task_from_dict(data: dict[str, Any], announcer: Identity, now: float, where: str = "task") -> TaskAnnouncement:
    if set(data) != {"task"} or not isinstance(data["task"], dict):
        raise TaskFileError(f"{where}: expected exactly one [task] table, found {sorted(data)}")
    if isinstance(data["task"].get("params"), dict):
        data = {"task": {**data["task"], "params": flat_params(data["task"]["params"], where)}}
    try:
        table = TaskFile.model_validate(data).task
        check_model(table.model, TaskParams.from_params(table.params))  # the table itself is announced
    except ValidationError as exc:
        raise TaskFileError(f"{where}: {explain(exc)}") from None
    except ParamError as exc:
        raise TaskFileError(f"{where}: {exc}") from None

    def keys(name: str) -> tuple[bytes, ...]:
        out = []
        for i, peer in enumerate(getattr(table, name)):
            if peer == "self":
                out.append(announcer.public_key)
                continue
            try:
                out.append(public_key_from_peer_id(peer))
            except ValueError:
                raise TaskFileError(f"{where}: task.{name}[{i}] = {peer!r} is not an Ed25519 peer id "
                                    f"(see `swarm-node id`)") from None
        return tuple(out)

    try:
        return TaskAnnouncement(
            name=table.name, model=table.model, env=table.env, created_at=now,
            expires_at=now + table.lifetime_hours * 3600, trainer_keys=keys("trainers"),
            validator_keys=keys("validators"), async_level=table.async_level, params=dict(table.params))
    except ValueError as exc:
        raise TaskFileError(f"{where}: {exc}") from None
