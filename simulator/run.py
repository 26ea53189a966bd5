"""One simulation run, start to finish: scenario + seed in, trace hash, checks and metrics out."""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Callable

from simulator.checkers import CheckResult, Evaluator
from simulator.churn import Churn, derive_faults
from simulator.scenario import Scenario
from simulator.sim import Simulation
from simulator.trace import Trace


@dataclass
class RunResult:
    scenario: str
    seed: int
    duration: float
    trace_hash: str
    checks: dict[str, CheckResult]
    required: tuple[str, ...]
    metrics: dict
    faults: dict
    stats: dict = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [name for name in self.required if not self.checks[name].ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "seed": self.seed, "duration": self.duration, "trace_hash": self.trace_hash,
                "ok": self.ok, "passed": [n for n in self.required if self.checks[n].ok], "failed": self.failed,
                "checks": {n: c.as_dict() for n, c in self.checks.items()}, "required": list(self.required),
                "metrics": self.metrics, "faults": self.faults, "stats": self.stats}


def prepare(scenario: Scenario, trace: Trace, **sim_kwargs) -> tuple[Simulation, dict]:
    plan = derive_faults(scenario)
    sim = Simulation(scenario, trace, **sim_kwargs)
    sim.net.loss = plan.loss
    trace.record(0.0, -1, "scenario", {"name": scenario.name, "seed": scenario.seed, "duration": scenario.duration,
                                       "faults": plan.describe()})
    Churn(sim, plan).schedule()
    return sim, plan.describe()


def run_scenario(scenario: Scenario, trace_path: str | None = None,
                 on_progress: Callable[[float, float], None] | None = None,
                 on_start: Callable[[dict], None] | None = None,
                 observers: Mapping[str, Callable[[float, int, str, dict], None]] | None = None,
                 on_end: Callable[[Simulation], None] | None = None, **sim_kwargs) -> RunResult:
    """Run `scenario` to its end and check it. `observers`: trace kind -> fn(t, peer, kind, fields), fed
    every record of that kind (tests); `on_end(sim)`: called once the run is over, before it is closed."""
    trace = Trace(trace_path)
    evaluator = Evaluator(scenario.delivery_grace, status_sample=max(1, math.ceil(scenario.total_peers / 100)))
    evaluator.attach(trace)
    for kind, fn in (observers or {}).items():
        trace.observe(kind, fn)
    sim, faults = prepare(scenario, trace, **sim_kwargs)
    if on_start is not None:
        on_start(faults)
    wall, cpu = time.perf_counter(), time.process_time()
    end = scenario.duration
    # A big run keeps millions of small objects alive, and the cycle collector finds nothing among them:
    # at scale every young-generation pass during the run collected 0 objects yet cost about 75 ms (a
    # few seconds an hour), and the first pass after it rescanned everything the run had allocated (2 s).
    # So no collection while the loop runs, and what the run built is frozen (parked outside the
    # collector's generations, no scan) while the checks are computed, then handed back.
    # (Not with real jobs: few peers, and torch's tensors and models need the collector.)
    was_enabled = gc.isenabled()
    if not sim.real_jobs:
        gc.disable()
    try:
        sim.loop.run(end, None if on_progress is None else (lambda t: on_progress(t, end)),
                     progress_every=max(end / 200, 1.0))
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
    try:
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        for i in range(len(sim.nodes)):
            trace.record(end, i, "bytes", {"in": sim.net.bytes_in[i], "out": sim.net.bytes_out[i]})
        # What the swarm did, not how the simulator scheduled it: the event count is in `stats`, so a change
        # that only spares the loop events (a ping's unneeded timeout) leaves the trace as it was.
        trace.record(end, -1, "end", {"peers": len(sim.nodes), "live": len(sim.live),
                                      "frames_lost": sim.net.frames_lost, "control_frames": sim.router.control_frames})
        trace_hash = trace.hexdigest()
        trace.close()
        checks = evaluator.results(end, scenario.settle)
        metrics = evaluator.metrics(end, end)
        stats = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "events": sim.loop.events_run,
                 "trace_lines": trace.lines,
                 "sim_s_per_wall_s": round(end / wall, 3) if wall > 0 else None,
                 "events_per_s": round(sim.loop.events_run / wall) if wall > 0 else None,
                 "peers_created": len(sim.nodes), "peers_live_at_end": len(sim.live),
                 "core_calls": sim.counts["core_calls"], "gossip_deliveries": sim.counts["deliveries"],
                 "gossip_rejected": sim.counts["rejected"], "envelope_memo_hits": sum(m.hits for m in sim.memos.values())}
        if on_end is not None:
            on_end(sim)
        return RunResult(scenario.name, scenario.seed, end, trace_hash, checks, scenario.checks, metrics, faults, stats)
    finally:
        gc.unfreeze()  # collectable again: a caller running many scenarios gets the memory back
        sim.close()
