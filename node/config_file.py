"""The flags of `swarm-node start` and its TOML config file, both derived from `NodeConfig`.

Why a module of its own: `start` and `config show` must resolve settings the same way, and the
resolution must be light (no trio, libp2p or torch) so `--help` and `config show` answer at once.

Order, lowest first: the model's defaults < the file (`--config FILE`) < flags given on the command
line. Every field of node/config.py `NodeConfig` is a flag (`heartbeat_interval` -> `--heartbeat-interval`)
and a top-level file key of the same name, with the field's description as help. Flags are declared
with `argparse.SUPPRESS` as their default, so only flags actually typed show up in the parsed
namespace and cannot silently mask the file. Relative paths in the file (`data_dir`) are taken
relative to the file's own folder, so a config works from any working directory.
"""

from __future__ import annotations

import argparse
import difflib
import json
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from node.config import PARTIAL, NodeConfig
from swarm.settings import key_path, reason

FIELDS = NodeConfig.model_fields


class ConfigError(ValueError):
    """A config file or value that cannot be used; the message names the file (or flag) and the key."""


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _base_type(annotation) -> Any:
    """int | None -> int; anything else stays what it is."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _shown(field, default_data_dir) -> str:
    """A field's default as its flag's help says it."""
    if field.is_required():  # data_dir: the CLI's default
        return f"{default_data_dir}, or $SWARM_DATA_DIR"
    if field.default is None:
        return "off"
    if isinstance(field.default, tuple):
        return ",".join(field.default) or "none"
    if isinstance(field.default, bool):
        return str(field.default).lower()
    return str(field.default) or "none"


def add_start_flags(p: argparse.ArgumentParser, default_data_dir: Path | str = "~/.swarm-node") -> None:
    """The flags of `start` (and `config show`), one per NodeConfig field, all defaulting to 'not given'."""
    S = argparse.SUPPRESS
    p.add_argument("--config", type=Path, default=S, metavar="FILE",
                   help="TOML file with any of these settings (flags given here override it)")
    how = p.add_mutually_exclusive_group()
    for key, field in FIELDS.items():
        kind = _base_type(field.annotation)
        extra = field.json_schema_extra or {}
        kwargs: dict[str, Any] = {"default": S,
                                  "help": f"{field.description} (default {_shown(field, default_data_dir)})"}
        if kind is bool:
            kwargs.update(action="store_true", help=field.description)
        elif typing.get_origin(kind) is typing.Literal:
            kwargs.update(choices=typing.get_args(kind))
        elif key == "join":
            kwargs.update(action="append", metavar=extra.get("metavar"))
        else:
            kwargs.update(type=kind if kind in (int, float, Path) else str, metavar=extra.get("metavar"))
        (how if key in ("bootstrap", "join") else p).add_argument(flag(key), **kwargs)


def load_file(path: Path) -> dict[str, Any]:
    """Read and check a config file; returns only the keys it sets (normalised)."""
    path = Path(path)
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    out = _checked(table, str(path))
    if out.get("data_dir") is not None and not out["data_dir"].is_absolute():
        out["data_dir"] = (path.parent / out["data_dir"]).resolve()
    if out.get("bootstrap") and out.get("join"):
        raise ConfigError(f"{path}: 'bootstrap' and 'join' exclude each other (start a swarm, or join one)")
    return out


def check_value(key: str, value: Any, where: str = "config") -> Any:
    """Check one setting's type and range; return it normalised (Path, tuple of roles, float)."""
    return _checked({key: value}, where)[key]


def _checked(values: dict[str, Any], where: str, keyed: bool = True) -> dict[str, Any]:
    """`values` (some keys of NodeConfig) checked field by field, without the cross-key checks.
    Errors read "<where>: key 'port' must be ..." (a file), or "<where>: must be ..." (a flag)."""
    try:
        cfg = NodeConfig.model_validate({"data_dir": ".", **values}, context=PARTIAL)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = key_path(tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(key, FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}; known keys: {', '.join(FIELDS)}") from None
        raise ConfigError(f"{where}: key {key!r} {reason(error)}" if keyed else f"{where}: {reason(error)}") from None
    return {key: getattr(cfg, key) for key in values}


def resolve(flags: dict[str, Any], default_data_dir: Path) -> dict[str, Any]:
    """Defaults < file < flags. `flags` is `vars(args)` of a parser built with `add_start_flags`."""
    settings = {key: field.default for key, field in FIELDS.items() if not field.is_required()}
    settings = {"data_dir": Path(default_data_dir), **settings}
    if flags.get("config") is not None:
        settings.update(load_file(flags["config"]))
    given = {k: v for k, v in flags.items() if k in FIELDS}
    if "join" in given or "bootstrap" in given:  # how to enter the swarm is one choice: a flag replaces the file's
        settings["bootstrap"], settings["join"] = False, ()
    for key, value in given.items():
        settings.update(_checked({key: value}, flag(key), keyed=False))
    return settings


def node_config(settings: dict[str, Any]) -> NodeConfig:
    """The runtime's NodeConfig from resolved settings (raises ConfigError on bad combinations)."""
    try:
        return NodeConfig(**settings)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = ".".join(str(part) for part in error["loc"])
        raise ConfigError(f"{flag(key)}: {reason(error)}" if key else reason(error)) from None


def render(settings: dict[str, Any], fmt: str = "toml") -> str:
    """The resolved settings as TOML (loadable again with --config) or JSON."""
    plain = {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
             for k, v in settings.items()}
    if fmt == "json":
        return json.dumps(plain, indent=2)
    lines = []
    for key, value in plain.items():
        if value is None:
            lines.append(f"# {key} is not set")
        elif isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, (int, float)):
            lines.append(f"{key} = {value!r}")
        else:  # strings and lists of strings: JSON string escapes are valid TOML basic strings
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines)
