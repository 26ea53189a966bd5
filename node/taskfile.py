"""Task files (TOML) to signed-ready `TaskAnnouncement`s, with errors that name the key.

Schema (also in the README):

    [task]
    name = "digit-sort"            # letters, digits, - _ .
    model = "builtin:digit-sort-tiny"
    env = "digit-sort"
    async_level = 2                # 0..16
    lifetime_hours = 168           # > 0
    trainers = ["self"]            # peer ids (12D3Koo...) or "self"
    validators = []                # peer ids or "self"
    [task.params]                  # numbers, strings, booleans; at most 64
    lr = 3e-5
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from gossip.identity import Identity, public_key_from_peer_id
from gossip.messages import TaskAnnouncement

EXAMPLE = Path(__file__).parent / "examples" / "digit-sort.toml"
_REQUIRED = {"name": str, "model": str, "env": str}
_OPTIONAL = {"async_level": int, "lifetime_hours": (int, float), "trainers": list, "validators": list,
             "params": dict}


class TaskFileError(Exception):
    pass


def load_task_file(path: Path, announcer: Identity, now: float) -> TaskAnnouncement:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise TaskFileError(f"{path}: no such file (the built-in example is {EXAMPLE})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{path}: not valid TOML: {exc}") from None
    return task_from_dict(data, announcer, now, where=str(path))


def task_from_dict(data: dict[str, Any], announcer: Identity, now: float, where: str = "task") -> TaskAnnouncement:
    if set(data) != {"task"} or not isinstance(data["task"], dict):
        raise TaskFileError(f"{where}: expected exactly one [task] table, found {sorted(data)}")
    table = data["task"]
    unknown = sorted(set(table) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise TaskFileError(f"{where}: unknown key task.{unknown[0]} (known: {sorted({**_REQUIRED, **_OPTIONAL})})")
    for key, kind in {**_REQUIRED, **_OPTIONAL}.items():
        if key in _REQUIRED and key not in table:
            raise TaskFileError(f"{where}: task.{key} is required")
        if key in table and (not isinstance(table[key], kind) or isinstance(table[key], bool)):
            raise TaskFileError(f"{where}: task.{key} has the wrong type ({type(table[key]).__name__})")
    lifetime = float(table.get("lifetime_hours", 168))
    if lifetime <= 0:
        raise TaskFileError(f"{where}: task.lifetime_hours must be positive")

    def keys(name: str, default: list) -> tuple[bytes, ...]:
        out = []
        for i, peer in enumerate(table.get(name, default)):
            if peer == "self":
                out.append(announcer.public_key)
                continue
            try:
                out.append(public_key_from_peer_id(str(peer)))
            except ValueError:
                raise TaskFileError(f"{where}: task.{name}[{i}] = {peer!r} is not an Ed25519 peer id "
                                    f"(see `swarm-node id`)") from None
        return tuple(out)

    try:
        return TaskAnnouncement(
            name=table["name"], model=table["model"], env=table["env"], created_at=now,
            expires_at=now + lifetime * 3600, trainer_keys=keys("trainers", ["self"]),
            validator_keys=keys("validators", []), async_level=table.get("async_level", 2),
            params=table.get("params", {}))
    except ValueError as exc:
        raise TaskFileError(f"{where}: {exc}") from None
