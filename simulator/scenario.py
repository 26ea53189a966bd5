"""Scenario files: strict TOML -> frozen pydantic models, with errors that name the offending key.

    scenario = load("smoke")            # a shipped scenario, or a path to a .toml file
    scenario.peers[0].count

Each table is declared once below (type, default, range, help); the models refuse unknown keys and
wrong types (swarm/settings.py), then cross references (regions, groups, checks, adversary kinds,
task params) are resolved, so a bad file fails with one clear line such as
`scenario.peers[2].count: must be >= 1, got 0`, never a traceback. This module imports nothing heavy:
`swarm-sim --help` and `list` stay instant.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict, TypeAdapter, ValidationError

from swarm.jobs import KINDS as ROLE_KINDS
from swarm.settings import Floats, Settings, Strs, explain, reason
from swarm.taskparams import TaskParams

SCENARIO_DIR = "scenarios"
MAX_REAL_PEERS = 32  # with real role jobs every peer holds its own models in memory


class ScenarioError(ValueError):
    """A scenario file is wrong; the message names the key."""


def _many(model: type) -> Any:
    """A TOML array of tables -> a tuple of `model`."""
    return Annotated[tuple[model, ...], Strict(False)]


# ---------------------------------------------------------------- the schema


class PeerGroup(Settings):
    name: str
    count: int = Field(ge=1, le=100_000)
    roles: Strs = ("relay",)
    region: str = Field("any", description="a region name, or 'any' to spread the group round-robin over regions")
    up_mbps: float = Field(100.0, gt=0, le=1e6)
    down_mbps: float = Field(100.0, gt=0, le=1e6)
    adversary: str = Field("", description="an adversary kind, '' for honest peers")
    adversary_params: dict = {}
    churn: bool | Literal["restart"] = Field(True, description="whether random churn may replace peers of this group; "
                                             "'restart': crash-restarts only (a task's trainers: it names their keys)")
    join_at: float = Field(0.0, ge=0)
    join_spread: float = Field(0.0, ge=0, description="joins spread evenly over this many seconds after join_at")
    release: Literal["current", "next"] = Field("current", description="the protocol release the group's peers "
                                                "speak (gossip/release.py): 'next' is the simulated 1.1")


class NetworkSpec(Settings):
    regions: Strs = ("eu", "na", "asia", "sa")
    latency_ms: Annotated[tuple[Floats, ...], Strict(False)] = (
        (2.0, 45.0, 120.0, 110.0), (45.0, 2.0, 90.0, 70.0), (120.0, 90.0, 2.0, 220.0), (110.0, 70.0, 220.0, 2.0))
    loss: float = Field(0.0, ge=0, lt=1)
    bootstrap: int = Field(3, ge=1, le=64, description="live peers each joining peer is given to dial (its --join list)")
    max_connections: int = Field(64, ge=1, le=10_000)
    dial_timeout: float = Field(5.0, gt=0)


class TaskSpec(Settings):
    at: float = Field(ge=0)
    by: str = Field(description="peer group whose first live honest peer announces it")
    name: str = "digit-sort"
    model: str = "builtin:digit-sort-tiny"
    env: str = "digit-sort"
    ttl: float = Field(86400.0, gt=0)
    async_level: int = Field(2, ge=0, le=16)
    params: dict = Field({}, description="task params, announced as written: swarm/taskparams.py TaskParams")
    validators: Strs = Field((), description="peer groups whose keys the task names as trusted validators")
    trainers: int = Field(1, ge=1, le=16, description="the task's trainers: the first this many live honest peers "
                                                      "of `by`, in order (rank 0, the announcer, first)")


class ChurnSpec(Settings):
    replace_fraction: float = Field(0.0, ge=0, le=1, description="share of churnable live peers replaced each round")
    replace_every: float = Field(600.0, gt=0)
    crash_fraction: float = Field(0.5, ge=0, le=1, description="share of replaced peers that crash instead of leaving")
    crash_rate: float = Field(0.0, ge=0, description="crash-and-restart events per peer per hour (same identity)")
    downtime: float = Field(30.0, ge=0)


class PartitionSpec(Settings):
    at: float = Field(ge=0)
    duration: float = Field(gt=0)
    fraction: float = Field(0.5, gt=0, lt=1, description="share of peers cut off on the minority side")
    side: Strs = Field((), description="the minority exactly, instead of a random `fraction`: 'group:k' (the "
                                       "group's k-th peer) or 'group:a-b' (peers a..b-1)")


class CrashSpec(Settings):
    at: float = Field(ge=0)
    peer: str = Field(description="'group:k': the group's k-th peer")
    downtime: float = Field(0.0, ge=0, description="seconds until it restarts with the same identity; 0: never")


class SlowSpec(Settings):
    fraction: float = Field(gt=0, le=1)
    factor: float = Field(0.1, gt=0, le=1, description="bandwidth multiplier")
    extra_delay_ms: float = Field(0.0, ge=0)


class FaultsSpec(Settings):
    random: bool = Field(False, description="derive loss, partitions, slow peers and skew from the seed (VOPR style)")
    loss_max: float = Field(0.02, ge=0, lt=1)
    partitions_max: int = Field(2, ge=0, le=100)
    partition_max_duration: float = Field(60.0, gt=0)
    slow_max: float = Field(0.2, ge=0, le=1)
    skew_max: float = Field(0.0, ge=0, le=3600, description="each peer's clock is off by uniform(-skew_max, skew_max) s")
    partitions: _many(PartitionSpec) = ()
    crashes: _many(CrashSpec) = ()
    slow: _many(SlowSpec) = ()


class WorkloadSpec(Settings):
    probe_rate: float = Field(0.0, ge=0, le=1000, description="probe messages per second, from random live honest peers")
    probe_size: int = Field(1024, ge=0, le=65536)
    probe_start: float = Field(10.0, ge=0)


class JobSpec(Settings):
    mode: Literal["cost", "real"] = "cost"
    seconds: float = Field(1.0, ge=0)
    jitter: float = Field(0.0, ge=0, lt=1)
    result_bytes: int = Field(0, ge=0)
    fail_rate: float = Field(0.0, ge=0, le=1)
    function: str = Field("", description="for mode = 'real': a name registered with workload.register_real_function")


class Scenario(Settings):
    name: str
    duration: float = Field(gt=0, le=30 * 86400)
    peers: _many(PeerGroup)
    description: str = ""
    seed: int = Field(1, ge=0, lt=2**63)
    settle: float = Field(60.0, ge=0, description="final liveness phase: no faults, churn or attacks start in it")
    delivery_grace: float = Field(30.0, gt=0, description="a message counts as delivered if it arrives within this")
    checks: Strs = ()
    network: NetworkSpec = NetworkSpec()
    tasks: _many(TaskSpec) = ()
    churn: ChurnSpec = ChurnSpec()
    faults: FaultsSpec = FaultsSpec()
    workload: WorkloadSpec = WorkloadSpec()
    jobs: dict[str, JobSpec] = Field({}, description="job kind -> JobSpec table")
    job_slots: int = Field(1, ge=1, le=64)
    core: dict = Field({}, description="CoreConfig overrides; a [core.membership] table overrides MembershipConfig, "
                          "[core.links] LinkConfig")
    gossip: dict = Field({}, description="GossipConfig overrides (D, Dlo, Dhi, heartbeat, ...)")

    @property
    def total_peers(self) -> int:
        return sum(g.count for g in self.peers)


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
        try:
            TaskParams.model_validate(t.params)  # as every peer will check the announcement
        except ValidationError as exc:
            raise ScenarioError(explain(exc, f"scenario.tasks[{i}].params")) from None
    for i, c in enumerate(s.checks):
        if c not in checkers.CHECKS:
            raise ScenarioError(f"scenario.checks[{i}]: unknown check {c!r} (known: {', '.join(sorted(checkers.CHECKS))})")
    refs = [(f"partitions[{i}].side", r) for i, p in enumerate(s.faults.partitions) for r in p.side]
    for where, ref in refs + [(f"crashes[{i}].peer", c.peer) for i, c in enumerate(s.faults.crashes)]:
        if ref.partition(":")[0] not in names:
            raise ScenarioError(f"scenario.faults.{where}: {ref!r} names no peer group")
    for i, part in enumerate(s.faults.partitions):
        if part.at + part.duration > s.duration - s.settle:
            raise ScenarioError(f"scenario.faults.partitions[{i}]: must heal before the settle phase "
                                f"(at + duration <= {s.duration - s.settle:g})")
    jobs = s.jobs
    for kind, job in jobs.items():
        if kind in ROLE_KINDS and job.function:
            raise ScenarioError(f"scenario.jobs.{kind}.function: the roles' jobs run trainer/jobs.py when "
                                "mode = \"real\"; leave function out")
        if job.mode == "real" and kind not in ROLE_KINDS and job.function not in real_function_names():
            raise ScenarioError(f"scenario.jobs.{kind}.function: {job.function!r} is not a registered real "
                                f"function (registered: {', '.join(real_function_names()) or 'none'})")
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
    from swarm.links import LinkConfig
    from swarm.membership import MembershipConfig
    return _override(CoreConfig, s.core, "scenario.core", {"membership": MembershipConfig, "links": LinkConfig},
                     {"roles", "agent", "release"})


def gossip_config(s: Scenario):
    from simulator.gossip_model import GossipConfig
    cfg = _override(GossipConfig, s.gossip, "scenario.gossip", {}, set())
    if not cfg.Dlo <= cfg.D <= cfg.Dhi:
        raise ScenarioError("scenario.gossip: need Dlo <= D <= Dhi")
    if cfg.D < 1 or cfg.heartbeat <= 0:
        raise ScenarioError("scenario.gossip: need D >= 1 and heartbeat > 0")
    return cfg


_SCALARS = {t: TypeAdapter(t, config=ConfigDict(strict=True, allow_inf_nan=False)) for t in (int, float, bool, str)}


def _override(cls: type, data: dict, path: str, nested: dict, forbidden: set) -> Any:
    """`cls` (a runtime config dataclass) with the scenario's overrides of its scalar fields."""
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
        try:
            kwargs[key] = _SCALARS[type(getattr(defaults, key))].validate_python(value)
        except ValidationError as exc:
            raise ScenarioError(f"{sub}: {reason(exc.errors(include_url=False)[0])}") from None
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
    return from_data(data)


def from_data(data: dict) -> Scenario:
    """A scenario from the dict a TOML file parses to (tests and benches build one in code:
    simulator/compose.py), checked as a file is."""
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(explain(exc, "scenario")) from None
    return _validate(scenario)


def load(name_or_path: str) -> Scenario:
    text, source = _read_text(name_or_path)
    return loads(text, source)


def with_seed(s: Scenario, seed: int | None) -> Scenario:
    return s if seed is None else s.model_copy(update={"seed": seed})
