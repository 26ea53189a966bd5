"""What a `RunJob` effect costs and returns: executors registered per job kind.

    registry = JobRegistry()
    registry.register("generate", CostModelExecutor(seconds=20.0, jitter=0.2, result_bytes=200_000))
    registry.register("verify", RealExecutor(my_function, CostModelExecutor(seconds=2.0)))

The simulator asks the registry for the executor of a job's kind; the executor says how long the
job takes in *virtual* time and what it returns. Durations never come from the wall clock (that would
break replay): a real executor computes its result for real but takes its duration from a cost model.
Each peer runs `slots` jobs at once; more wait in a FIFO queue. Results say who made them: a job run
by a peer whose adversary behaviour forges results is marked `honest=False`, so checkers can tell
forged work from honest work whatever the role code does with it.

The roles' own job kinds (init, generate, verify, train, unpack: swarm/jobs.py) are answered by
simulator/rolejobs.py, which returns the real result types; the generic executors here serve any
other kind a scenario names (and tests that drive jobs with a fake emitter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from swarm.rng import Rng


@dataclass(frozen=True)
class JobContext:
    peer: int  # simulator peer index
    peer_id: str
    job_id: int
    kind: str
    payload: Any
    forger: bool  # the peer's behaviour forges job results
    rng: Rng  # deterministic stream for this job
    cheat: str = ""  # how a role-level adversary's job lies (simulator/rolejobs.py), "" for honest
    store: Any = None  # the peer's content.NodeStore: blobs and shards its jobs read and write
    incarnation: int = 0  # how many times the peer (re)started: a real job process lives one incarnation


@dataclass(frozen=True)
class JobOutcome:
    duration: float  # virtual seconds
    ok: bool
    result: Any = None
    error: str = ""
    honest: bool | None = None  # for the trace; None: read `result.honest` (CostResult) if it has one
    blobs: tuple = ()  # digests added to the peer's blob store when the job finishes
    shards: tuple = ()  # digests added to its shard store when the job finishes
    # A generate job's slice, recorded as generated when the job finishes: trainer/generated.py records it
    # just before answering, so a crash while generating leaves no record, and the restarted worker
    # generates the slice again (recorded at the start, a crash mid-job lost the slice for good: with one
    # batch per worker per version, a scale-10k run with its workers churning trained nothing).
    generated: tuple | None = None


@dataclass(frozen=True)
class CostResult:
    """What a cost-model job returns in place of real output."""

    kind: str
    honest: bool
    producer: str  # peer id
    output_bytes: int
    payload: Any = None
    extra: dict = field(default_factory=dict)


class Executor(Protocol):
    def run(self, ctx: JobContext) -> JobOutcome: ...


@dataclass(frozen=True)
class CostModelExecutor:
    """Duration `seconds` * uniform(1 - jitter, 1 + jitter); fails with probability `fail_rate`."""

    seconds: float
    jitter: float = 0.0
    result_bytes: int = 0
    fail_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.seconds < 0 or not 0 <= self.jitter < 1 or not 0 <= self.fail_rate <= 1 or self.result_bytes < 0:
            raise ValueError("cost model: seconds >= 0, 0 <= jitter < 1, 0 <= fail_rate <= 1, result_bytes >= 0")

    def duration(self, rng: Rng) -> float:
        return self.seconds * (rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0)

    def run(self, ctx: JobContext) -> JobOutcome:
        duration = self.duration(ctx.rng)
        if self.fail_rate and ctx.rng.random() < self.fail_rate:
            return JobOutcome(duration, False, error=f"{ctx.kind} failed (cost model)")
        return JobOutcome(duration, True, CostResult(ctx.kind, not ctx.forger, ctx.peer_id, self.result_bytes,
                                                    ctx.payload))


@dataclass(frozen=True)
class RealExecutor:
    """Runs `fn(payload)` for real (small scenarios: the tiny model); virtual duration from `cost`.

    `fn` must be deterministic in its payload. A forging peer's result goes through `forge` (if given),
    which is where role-level adversaries will plug in their lies.
    """

    fn: Callable[[Any], Any]
    cost: CostModelExecutor
    forge: Callable[[Any, Rng], Any] | None = None

    def run(self, ctx: JobContext) -> JobOutcome:
        duration = self.cost.duration(ctx.rng)
        try:
            result = self.fn(ctx.payload)
        except Exception as exc:  # the job failed; the peer hears about it as a failed JobFinished
            return JobOutcome(duration, False, error=f"{type(exc).__name__}: {exc}"[:200])
        if ctx.forger and self.forge is not None:
            result = self.forge(result, ctx.rng)
        return JobOutcome(duration, True, result)


class JobRegistry:
    def __init__(self) -> None:
        self._executors: dict[str, Executor] = {}

    def register(self, kind: str, executor: Executor) -> None:
        if not kind or not isinstance(kind, str):
            raise ValueError("job kind must be a non-empty string")
        self._executors[kind] = executor

    def get(self, kind: str) -> Executor | None:
        return self._executors.get(kind)

    def kinds(self) -> list[str]:
        return sorted(self._executors)


_REAL_FUNCTIONS: dict[str, Callable[[Any], Any]] = {}


def register_real_function(name: str, fn: Callable[[Any], Any]) -> None:
    """Make `fn` available to scenarios as `[jobs.<kind>] mode = "real", function = "<name>"`."""
    _REAL_FUNCTIONS[name] = fn


def real_function(name: str) -> Callable[[Any], Any] | None:
    return _REAL_FUNCTIONS.get(name)


def real_function_names() -> list[str]:
    return sorted(_REAL_FUNCTIONS)
