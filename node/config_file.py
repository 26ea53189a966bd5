"""A TOML config file for everything `swarm-node start` flags set; flags override the file.

Why a module of its own: `start` and `config show` must resolve settings the same way, and the
resolution must be light (no trio, libp2p or torch) so `--help` and `config show` answer at once.

Order, lowest first: built-in defaults < the file (`--config FILE`) < flags given on the command line.
Flags are declared with `argparse.SUPPRESS` as their default, so only flags actually typed show up in
the parsed namespace and cannot silently mask the file. Relative paths in the file (`data_dir`) are
taken relative to the file's own folder, so a config works from any working directory.

File keys (flat, top level):

    data_dir = "runs/peer0"        # string
    host = "127.0.0.1"             # string
    port = 4001                    # integer 0..65535 (0: the OS picks)
    bootstrap = true               # boolean; exclusive with join
    join = ["/ip4/.../p2p/12D3..."] # list of strings (a single string is accepted too)
    roles = ["trainer"]            # list of strings, or "worker,relay"
    heartbeat = 2.0                # seconds, number
    gone_after = 10.0              # seconds, number
    log_format = "text"            # "text" or "json"
    metrics_port = 9464            # integer 1..65535; Prometheus text on 127.0.0.1 (off when absent)
    malicious = "other-model"      # demonstrations and tests only: this peer's jobs cheat (see --help)
    upload_mbps = 8.0              # Mbit/s: emulate a slow uplink for shard answers (benchmarks; off when absent)
    job_threads = 1                # integer 1..256: torch threads of the job process running train/generate jobs
    job_device = "cpu"             # "cpu", "cuda" or "cuda:N": where the job processes run models
"""

from __future__ import annotations

import argparse
import difflib
import json
import tomllib
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "data_dir": None,  # filled with the CLI's default data dir
    "host": "127.0.0.1",
    "port": 0,
    "bootstrap": False,
    "join": [],
    "roles": ["relay"],
    "heartbeat": 2.0,
    "gone_after": 10.0,
    "log_format": "text",
    "metrics_port": None,
    "malicious": "",
    "upload_mbps": None,
    "job_threads": 1,
    "job_device": "cpu",
}
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """A config file or value that cannot be used; the message names the file and the key."""


def add_start_flags(p: argparse.ArgumentParser, default_data_dir: Path | str = "~/.swarm-node") -> None:
    """The flags of `start` (and `config show`), all defaulting to 'not given'."""
    S = argparse.SUPPRESS
    p.add_argument("--config", type=Path, default=S, metavar="FILE",
                   help="TOML file with any of these settings (flags given here override it)")
    p.add_argument("--data-dir", type=Path, default=S,
                   help=f"where the key, blobs and control file live (default {default_data_dir}, or $SWARM_DATA_DIR)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--bootstrap", action="store_true", default=S, help="start a new swarm that others --join")
    how.add_argument("--join", action="append", default=S, metavar="MULTIADDR",
                     help="a peer to join through (repeatable), e.g. /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo...")
    p.add_argument("--host", default=S, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=S, help="TCP port (default: the OS picks)")
    p.add_argument("--roles", default=S, help="comma-separated: relay, worker, trainer, validator (default relay)")
    p.add_argument("--heartbeat", type=float, default=S, help="seconds between status heartbeats (default 2)")
    p.add_argument("--gone-after", type=float, default=S, help="seconds of silence before a peer is gone (default 10)")
    p.add_argument("--log-format", choices=LOG_FORMATS, default=S, help="text (default) or json lines")
    p.add_argument("--metrics-port", type=int, default=S, metavar="PORT",
                   help="serve Prometheus metrics on 127.0.0.1:PORT (default: off)")
    p.add_argument("--upload-mbps", type=float, default=S, metavar="MBPS",
                   help="emulate an uplink of MBPS Mbit/s for shard answers, as the simulator models links "
                        "(localhost benchmarks: peers sharing one CPU; default: off)")
    p.add_argument("--job-threads", type=int, default=S, metavar="N",
                   help="torch threads for the job process that trains and generates (default 1: a machine "
                        "shared by several peers; a trainer alone on its machine: its core count)")
    p.add_argument("--job-device", default=S, metavar="DEVICE",
                   help="where the job processes run models (generation, checks, GRPO): cpu (default), cuda "
                        "or cuda:N, with a CUDA build of torch")
    from swarm.jobs import MALICIOUS  # light: dataclasses only
    p.add_argument("--malicious", choices=MALICIOUS, default=S, metavar="KIND",
                   help="for demonstrations and tests: this peer cheats; KIND is one of " + ", ".join(MALICIOUS))


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
    out = {key: check_value(key, value, where=str(path)) for key, value in table.items()}
    if out.get("data_dir") is not None and not out["data_dir"].is_absolute():
        out["data_dir"] = (path.parent / out["data_dir"]).resolve()
    if out.get("bootstrap") and out.get("join"):
        raise ConfigError(f"{path}: 'bootstrap' and 'join' exclude each other (start a swarm, or join one)")
    return out


def check_value(key: str, value: Any, where: str = "config") -> Any:
    """Check one setting's type and range; return it normalised (Path, list of roles, float)."""
    if key not in DEFAULTS:
        close = difflib.get_close_matches(key, DEFAULTS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{where}: unknown key {key!r}{hint}; known keys: {', '.join(DEFAULTS)}")

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: key {key!r} must be {expected}, got {type(value).__name__} {value!r}")

    if key in ("data_dir", "host"):
        if not isinstance(value, (str, Path)) or not str(value):
            raise bad("a non-empty string")
        return Path(value) if key == "data_dir" else str(value)
    if key == "bootstrap":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key == "job_device":
        from node.config import valid_device
        if not valid_device(value):
            raise ConfigError(f"{where}: key {key!r} must be \"cpu\", \"cuda\" or \"cuda:N\", got {value!r}")
        return value
    if key == "job_threads":
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        if not 1 <= value <= 256:
            raise ConfigError(f"{where}: key {key!r} must be in 1..256, got {value}")
        return value
    if key in ("port", "metrics_port"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        low = 0 if key == "port" else 1
        if not low <= value <= 65535:
            raise ConfigError(f"{where}: key {key!r} must be in {low}..65535, got {value}")
        return value
    if key in ("heartbeat", "gone_after"):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise bad("a positive number of seconds")
        return float(value)
    if key == "upload_mbps":
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise bad("a positive number of Mbit/s")
        return float(value)
    if key == "malicious":
        from swarm.jobs import MALICIOUS
        if value != "" and value not in MALICIOUS:
            raise bad("one of " + ", ".join(repr(k) for k in MALICIOUS))
        return value
    if key == "log_format":
        if value not in LOG_FORMATS:
            raise bad(" or ".join(repr(f) for f in LOG_FORMATS))
        return value
    if key in ("join", "roles"):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",")] if key == "roles" else [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        return [v for v in value if v]
    raise AssertionError(key)  # every key in DEFAULTS is handled above


def resolve(flags: dict[str, Any], default_data_dir: Path) -> dict[str, Any]:
    """Defaults < file < flags. `flags` is `vars(args)` of a parser built with `add_start_flags`."""
    settings = dict(DEFAULTS, data_dir=Path(default_data_dir))
    if flags.get("config") is not None:
        settings.update(load_file(flags["config"]))
    given = {k: v for k, v in flags.items() if k in DEFAULTS}
    if "join" in given or "bootstrap" in given:  # how to enter the swarm is one choice: a flag replaces the file's
        settings["bootstrap"], settings["join"] = False, []
    for key, value in given.items():
        settings[key] = check_value(key, value, where=f"--{key.replace('_', '-')}")
    return settings


def node_config(settings: dict[str, Any]):
    """The runtime's NodeConfig from resolved settings (raises ValueError on bad combinations)."""
    from node.config import NodeConfig
    return NodeConfig(data_dir=settings["data_dir"], host=settings["host"], port=settings["port"],
                      bootstrap=settings["bootstrap"], join=tuple(settings["join"]), roles=tuple(settings["roles"]),
                      heartbeat_interval=settings["heartbeat"], gone_after=settings["gone_after"],
                      log_format=settings["log_format"], metrics_port=settings["metrics_port"],
                      malicious=settings["malicious"], upload_mbps=settings["upload_mbps"],
                      job_threads=settings["job_threads"], job_device=settings["job_device"])


def render(settings: dict[str, Any], fmt: str = "toml") -> str:
    """The resolved settings as TOML (loadable again with --config) or JSON."""
    plain = {k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items()}
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
