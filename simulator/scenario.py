"""Scenario files: strict TOML -> frozen dataclasses, with errors that name the offending key.

    scenario = load("smoke")            # a shipped scenario, or a path to a .toml file
    scenario.peers[0].count

Every table is checked for unknown keys, every value for its type and range, and cross references
(regions, groups, checks, adversary kinds) are resolved, so a bad file fails with one clear line such
as `scenario.peers[2].count: must be >= 1`, never a traceback. This module imports nothing heavy:
`swarm-sim --help` and `list` stay instant.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from swarm.jobs import KINDS as ROLE_KINDS

SCENARIO_DIR = "scenarios"
MAX_REAL_PEERS = 32  # with real role jobs every peer holds its own models in memory


class ScenarioError(ValueError):
    """A scenario file is wrong; the message names the key."""


def f(default: Any = dataclasses.MISSING, *, ge: float | None = None, gt: float | None = None,
      le: float | None = None, lt: float | None = None, choices: tuple | None = None, doc: str = "") -> Any:
    meta = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "doc": doc}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


# ---------------------------------------------------------------- the schema


@dataclass(frozen=True)
class PeerGroup:
    name: str = f()
    count: int = f(ge=1, le=100_000)
    roles: tuple[str, ...] = f(("relay",))
    region: str = f("any", doc="a region name, or 'any' to spread the group round-robin over regions")
    up_mbps: float = f(100.0, gt=0, le=1e6)
    down_mbps: float = f(100.0, gt=0, le=1e6)
    adversary: str = f("", doc="an adversary kind, '' for honest peers")
    adversary_params: dict = f({})
    churn: bool = f(True, doc="whether random churn may replace peers of this group")
    join_at: float = f(0.0, ge=0)
    join_spread: float = f(0.0, ge=0, doc="joins spread evenly over this many seconds after join_at")


@dataclass(frozen=True)
class NetworkSpec:
    regions: tuple[str, ...] = f(("eu", "na", "asia", "sa"))
    latency_ms: tuple[tuple[float, ...], ...] = f(((2.0, 45.0, 120.0, 110.0), (45.0, 2.0, 90.0, 70.0),
                                                   (120.0, 90.0, 2.0, 220.0), (110.0, 70.0, 220.0, 2.0)))
    loss: float = f(0.0, ge=0, lt=1)
    bootstrap: int = f(3, ge=1, le=64, doc="live peers each joining peer is given to dial (its --join list)")
    max_connections: int = f(64, ge=1, le=10_000)
    dial_timeout: float = f(5.0, gt=0)


@dataclass(frozen=True)
class TaskSpec:
    at: float = f(ge=0)
    by: str = f(doc="peer group whose first live honest peer announces it")
    name: str = f("digit-sort")
    model: str = f("builtin:digit-sort-tiny")
    env: str = f("digit-sort")
    ttl: float = f(86400.0, gt=0)
    async_level: int = f(2, ge=0, le=16)
    params: dict = f({}, doc="task params (group_size, prompts_per_step, shard_size, validate_fraction, ...)")
    validators: tuple[str, ...] = f((), doc="peer groups whose keys the task names as trusted validators")


@dataclass(frozen=True)
class ChurnSpec:
    replace_fraction: float = f(0.0, ge=0, le=1, doc="share of churnable live peers replaced each round")
    replace_every: float = f(600.0, gt=0)
    crash_fraction: float = f(0.5, ge=0, le=1, doc="share of replaced peers that crash instead of leaving")
    crash_rate: float = f(0.0, ge=0, doc="crash-and-restart events per peer per hour (same identity)")
    downtime: float = f(30.0, ge=0)


@dataclass(frozen=True)
class PartitionSpec:
    at: float = f(ge=0)
    duration: float = f(gt=0)
    fraction: float = f(0.5, gt=0, lt=1, doc="share of peers cut off on the minority side")


@dataclass(frozen=True)
class SlowSpec:
    fraction: float = f(gt=0, le=1)
    factor: float = f(0.1, gt=0, le=1, doc="bandwidth multiplier")
    extra_delay_ms: float = f(0.0, ge=0)


@dataclass(frozen=True)
class FaultsSpec:
    random: bool = f(False, doc="derive loss, partitions, slow peers and skew from the seed (VOPR style)")
    loss_max: float = f(0.02, ge=0, lt=1)
    partitions_max: int = f(2, ge=0, le=100)
    partition_max_duration: float = f(60.0, gt=0)
    slow_max: float = f(0.2, ge=0, le=1)
    skew_max: float = f(0.0, ge=0, le=3600, doc="each peer's clock is off by uniform(-skew_max, skew_max) s")
    partitions: tuple[PartitionSpec, ...] = f(())
    slow: tuple[SlowSpec, ...] = f(())


@dataclass(frozen=True)
class WorkloadSpec:
    probe_rate: float = f(0.0, ge=0, le=1000, doc="probe messages per second, from random live honest peers")
    probe_size: int = f(1024, ge=0, le=65536)
    probe_start: float = f(10.0, ge=0)


@dataclass(frozen=True)
class JobSpec:
    mode: str = f("cost", choices=("cost", "real"))
    seconds: float = f(1.0, ge=0)
    jitter: float = f(0.0, ge=0, lt=1)
    result_bytes: int = f(0, ge=0)
    fail_rate: float = f(0.0, ge=0, le=1)
    function: str = f("", doc="for mode = 'real': a name registered with workload.register_real_function")


@dataclass(frozen=True)
class Scenario:
    name: str = f()
    duration: float = f(gt=0, le=30 * 86400)
    peers: tuple[PeerGroup, ...] = f()
    description: str = f("")
    seed: int = f(1, ge=0, lt=2**63)
    settle: float = f(60.0, ge=0, doc="final liveness phase: no faults, churn or attacks start in it")
    delivery_grace: float = f(30.0, gt=0, doc="a message counts as delivered if it arrives within this")
    checks: tuple[str, ...] = f(())
    network: NetworkSpec = f(NetworkSpec())
    tasks: tuple[TaskSpec, ...] = f(())
    churn: ChurnSpec = f(ChurnSpec())
    faults: FaultsSpec = f(FaultsSpec())
    workload: WorkloadSpec = f(WorkloadSpec())
    jobs: dict = f({}, doc="job kind -> JobSpec table")
    job_slots: int = f(1, ge=1, le=64)
    core: dict = f({}, doc="CoreConfig overrides; a [core.membership] table overrides MembershipConfig")
    gossip: dict = f({}, doc="GossipConfig overrides (D, Dlo, Dhi, heartbeat, ...)")

    @property
    def total_peers(self) -> int:
        return sum(g.count for g in self.peers)


# ---------------------------------------------------------------- strict conversion


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is tuple:
        return "array"
    if dataclasses.is_dataclass(tp):
        return "table"
    return {int: "integer", float: "number", str: "string", bool: "boolean", dict: "table"}.get(tp, str(tp))


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ScenarioError(f"{path}: must be a table")
        return _build(tp, value, path)
    if origin is tuple:
        if not isinstance(value, list):
            raise ScenarioError(f"{path}: must be an array")
        (item,) = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ScenarioError(f"{path}: must be a boolean, not {type(value).__name__}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{path}: must be an integer, not {type(value).__name__}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"{path}: must be a number, not {type(value).__name__}")
        if not math.isfinite(value):
            raise ScenarioError(f"{path}: must be a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ScenarioError(f"{path}: must be a string, not {type(value).__name__}")
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise ScenarioError(f"{path}: must be a table")
        return value
    raise ScenarioError(f"{path}: unsupported type {tp}")  # a schema bug, still not a traceback


def _check_range(meta: dict, value: Any, path: str) -> None:
    if meta.get("choices") is not None and value not in meta["choices"]:
        raise ScenarioError(f"{path}: must be one of {', '.join(map(repr, meta['choices']))}, not {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, ok, word in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                              ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
            bound = meta.get(key)
            if bound is not None and not ok(value, bound):
                raise ScenarioError(f"{path}: must be {word} {bound:g}, got {value:g}")


def _build(cls: type, data: dict, path: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {fl.name: fl for fl in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ScenarioError(f"{path}.{key}: unknown key (known: {known})")
    kwargs = {}
    for name, fl in fields.items():
        sub = f"{path}.{name}"
        if name not in data:
            if fl.default is dataclasses.MISSING and fl.default_factory is dataclasses.MISSING:
                raise ScenarioError(f"{sub}: required ({_type_name(hints[name])})")
            continue
        value = _convert(hints[name], data[name], sub)
        _check_range(dict(fl.metadata), value, sub)
        kwargs[name] = value
    return cls(**kwargs)


# ---------------------------------------------------------------- cross checks


def _validate(s: Scenario) -> Scenario:
    from simulator import adversaries, checkers  # light modules, no heavy imports
    from simulator.workload import real_function_names

    net = s.network
    if not net.regions:
        raise ScenarioError("scenario.network.regions: at least one region")
    if len(set(net.regions)) != len(net.regions):
        raise ScenarioError("scenario.network.regions: names must be unique")
    if len(net.latency_ms) != len(net.regions):
        raise ScenarioError(f"scenario.network.latency_ms: must have {len(net.regions)} rows, one per region")
    for i, row in enumerate(net.latency_ms):
        if len(row) != len(net.regions):
            raise ScenarioError(f"scenario.network.latency_ms[{i}]: must have {len(net.regions)} entries")
        for j, ms in enumerate(row):
            if not 0 <= ms <= 10_000:
                raise ScenarioError(f"scenario.network.latency_ms[{i}][{j}]: must be 0 to 10000 ms, got {ms:g}")
    if not s.peers:
        raise ScenarioError("scenario.peers: at least one peer group")
    names = set()
    for i, g in enumerate(s.peers):
        p = f"scenario.peers[{i}]"
        if not g.name or g.name in names:
            raise ScenarioError(f"{p}.name: group names must be non-empty and unique")
        names.add(g.name)
        if g.region != "any" and g.region not in net.regions:
            raise ScenarioError(f"{p}.region: {g.region!r} is not in scenario.network.regions")
        if g.join_at + g.join_spread >= s.duration:
            raise ScenarioError(f"{p}.join_at: peers must join before the end (duration {s.duration:g})")
        if g.adversary:
            try:
                adversaries.check_params(g.adversary, g.adversary_params)
            except ValueError as exc:
                raise ScenarioError(f"{p}.adversary: {exc}") from None
            needs = adversaries.KINDS[g.adversary].needs_role
            if needs and needs not in g.roles:
                raise ScenarioError(f"{p}.roles: adversary {g.adversary!r} needs the {needs!r} role")
        elif g.adversary_params:
            raise ScenarioError(f"{p}.adversary_params: only for adversary groups")
    if s.settle >= s.duration:
        raise ScenarioError(f"scenario.settle: must be < duration ({s.duration:g})")
    honest_groups = {g.name for g in s.peers if not g.adversary}
    for i, t in enumerate(s.tasks):
        if t.by not in honest_groups:
            raise ScenarioError(f"scenario.tasks[{i}].by: {t.by!r} is not an honest peer group")
        if t.at >= s.duration:
            raise ScenarioError(f"scenario.tasks[{i}].at: must be < duration")
        for name in t.validators:
            if name not in names:
                raise ScenarioError(f"scenario.tasks[{i}].validators: {name!r} is not a peer group")
        if len(t.params) > 64:
            raise ScenarioError(f"scenario.tasks[{i}].params: at most 64 entries")
        for key, value in t.params.items():
            if not isinstance(value, (int, float, str, bool)):
                raise ScenarioError(f"scenario.tasks[{i}].params.{key}: must be a number, string or boolean")
    for i, c in enumerate(s.checks):
        if c not in checkers.CHECKS:
            raise ScenarioError(f"scenario.checks[{i}]: unknown check {c!r} (known: {', '.join(sorted(checkers.CHECKS))})")
    for i, part in enumerate(s.faults.partitions):
        if part.at + part.duration > s.duration - s.settle:
            raise ScenarioError(f"scenario.faults.partitions[{i}]: must heal before the settle phase "
                                f"(at + duration <= {s.duration - s.settle:g})")
    jobs = {}
    for kind, spec in s.jobs.items():
        job = _convert(JobSpec, spec, f"scenario.jobs.{kind}")
        if kind in ROLE_KINDS and job.function:
            raise ScenarioError(f"scenario.jobs.{kind}.function: the roles' jobs run trainer/jobs.py when "
                                "mode = \"real\"; leave function out")
        if job.mode == "real" and kind not in ROLE_KINDS and job.function not in real_function_names():
            raise ScenarioError(f"scenario.jobs.{kind}.function: {job.function!r} is not a registered real "
                                f"function (registered: {', '.join(real_function_names()) or 'none'})")
        jobs[kind] = job
    object.__setattr__(s, "jobs", jobs)
    real = [k for k in ROLE_KINDS if k in jobs and jobs[k].mode == "real"]
    if real and len(real) < len(ROLE_KINDS):
        missing = [k for k in ROLE_KINDS if k not in real]
        raise ScenarioError(f"scenario.jobs.{missing[0]}.mode: the roles' jobs run for real all together (a real "
                            f"generate job needs real weights): set mode = \"real\" in [jobs.{'], [jobs.'.join(missing)}] "
                            f"too, or \"cost\" everywhere")
    if real and s.total_peers > MAX_REAL_PEERS:
        raise ScenarioError(f"scenario.peers: real role jobs are for small scenarios (every peer runs its own models): "
                            f"at most {MAX_REAL_PEERS} peers, this one has {s.total_peers}; use mode = \"cost\" for more")
    core_config(s)  # raises ScenarioError on bad overrides
    gossip_config(s)
    return s


def real_role_jobs(s: Scenario) -> bool:
    """Do the roles' jobs run trainer/jobs.py for real (simulator/realjobs.py), not a cost model?"""
    return any(k in s.jobs and s.jobs[k].mode == "real" for k in ROLE_KINDS)


def core_config(s: Scenario):
    """The CoreConfig every peer gets (roles are set per group)."""
    from swarm.core import CoreConfig
    from swarm.membership import MembershipConfig
    return _override(CoreConfig, s.core, "scenario.core", {"membership": MembershipConfig}, {"roles", "agent"})


def gossip_config(s: Scenario):
    from simulator.gossip_model import GossipConfig
    cfg = _override(GossipConfig, s.gossip, "scenario.gossip", {}, set())
    if not cfg.Dlo <= cfg.D <= cfg.Dhi:
        raise ScenarioError("scenario.gossip: need Dlo <= D <= Dhi")
    if cfg.D < 1 or cfg.heartbeat <= 0:
        raise ScenarioError("scenario.gossip: need D >= 1 and heartbeat > 0")
    return cfg


def _override(cls: type, data: dict, path: str, nested: dict, forbidden: set) -> Any:
    defaults = cls()
    kwargs = {}
    for key, value in data.items():
        sub = f"{path}.{key}"
        if key in forbidden or not hasattr(defaults, key):
            raise ScenarioError(f"{sub}: unknown key")
        if key in nested:
            if not isinstance(value, dict):
                raise ScenarioError(f"{sub}: must be a table")
            kwargs[key] = _override(nested[key], value, sub, {}, set())
            continue
        current = getattr(defaults, key)
        kwargs[key] = _convert(type(current), value, sub)
        if isinstance(kwargs[key], (int, float)) and not isinstance(kwargs[key], bool) and kwargs[key] < 0:
            raise ScenarioError(f"{sub}: must be >= 0")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"{path}: {exc}") from None


# ---------------------------------------------------------------- loading


def shipped() -> list[str]:
    folder = resources.files("simulator").joinpath(SCENARIO_DIR)
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def _read_text(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ScenarioError(f"{name_or_path}: cannot read ({exc.strerror or exc})") from None
    res = resources.files("simulator").joinpath(SCENARIO_DIR, f"{name_or_path}.toml")
    if not res.is_file():
        raise ScenarioError(f"no scenario {name_or_path!r}: not a file, and not one of {', '.join(shipped())}")
    return res.read_text(encoding="utf-8"), f"{name_or_path} (shipped)"


def loads(text: str, source: str = "<string>") -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from None
    return _validate(_build(Scenario, data, "scenario"))


def load(name_or_path: str) -> Scenario:
    text, source = _read_text(name_or_path)
    return loads(text, source)


def with_seed(s: Scenario, seed: int | None) -> Scenario:
    return s if seed is None else dataclasses.replace(s, seed=seed)
