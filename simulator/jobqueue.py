"""Each peer's job slots: `RunJob` effects queue FIFO, `scenario.job_slots` run at once, and each
finishes after the virtual time its executor says (simulator/workload.py), fed back as `JobFinished`.
A trainer's verify jobs have a lane of their own (one at a time), as a node gives them a second job
process (node/runtime.py): its checks run beside its train job instead of queueing behind it.

The executors: the roles' kinds by simulator/rolejobs.py's cost model (or for real by
simulator/realjobs.py, on files under the simulation's workdir), any other kind a scenario names
by a generic cost model or a real function.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from simulator.rolejobs import ROLE_KINDS, RoleJobs
from simulator.workload import CostModelExecutor, JobContext, JobOutcome, JobRegistry, RealExecutor, real_function
from swarm.io import JobFinished, RunJob
from swarm.rng import Rng, stable_seed

if TYPE_CHECKING:
    from simulator.sim import Node, Simulation


def job_registry(sim: "Simulation") -> JobRegistry:
    registry = JobRegistry()
    if sim.real_jobs:  # trainer/jobs.py on real files (simulator/realjobs.py)
        from simulator.realjobs import RealRoleJobs
        roles = RealRoleJobs(sim.content, sim.scenario.jobs, Path(sim.workdir))
    else:
        roles = RoleJobs(sim.content, sim.scenario.jobs)
    for kind in ROLE_KINDS:
        registry.register(kind, roles.executor(kind))
    for kind, spec in sorted(sim.scenario.jobs.items()):
        if kind in ROLE_KINDS:
            continue
        cost = CostModelExecutor(spec.seconds, spec.jitter, spec.result_bytes, spec.fail_rate)
        if spec.mode == "real":
            registry.register(kind, RealExecutor(real_function(spec.function), cost))
        else:
            registry.register(kind, cost)
    return registry


class JobQueue:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.registry = job_registry(sim)

    def run_job(self, i: int, e: RunJob) -> None:
        sim = self.sim
        node = sim.nodes[i]
        sim.trace.record(sim.loop.now, i, "job-queued", {"job": e.job_id, "kind": e.kind})
        node.lane(e.kind).queue.append(e)
        self._start_jobs(node)

    def _start_jobs(self, node: "Node") -> None:
        for lane in node.lanes:
            self._start_lane(node, lane, self.sim.scenario.job_slots if lane is node.lanes[0] else 1)

    def _start_lane(self, node: "Node", lane, slots: int) -> None:
        sim = self.sim
        while lane.queue and lane.running < slots:
            job = lane.queue.pop(0)
            lane.running += 1
            executor = self.registry.get(job.kind)
            if executor is None:
                outcome = JobOutcome(0.0, False, error=f"no executor for job kind {job.kind!r}")
            else:
                ctx = JobContext(node.index, node.peer_id, job.job_id, job.kind, job.payload,
                                 bool(node.behaviour and node.behaviour.forges_jobs),
                                 Rng(stable_seed("swarm-sim", sim.seed, "job", node.index, node.incarnation, job.job_id)),
                                 cheat=getattr(node.behaviour, "cheat", ""), store=node.store,
                                 incarnation=node.incarnation)
                outcome = executor.run(ctx)
            sim.loop.after(outcome.duration, self._job_done, node, node.incarnation, job, outcome)

    def _job_done(self, node: "Node", incarnation: int, job: RunJob, outcome: JobOutcome) -> None:
        if not node.up or node.incarnation != incarnation:
            return
        sim = self.sim
        node.lane(job.kind).running -= 1
        honest = outcome.honest if outcome.honest is not None else getattr(outcome.result, "honest", None)
        for digest in outcome.blobs:
            node.store.add_blob(digest)
        if outcome.generated is not None:
            node.store.record_generated(outcome.generated)
        for digest in outcome.shards:
            node.store.add_shard(digest, sim.loop.now)
        if outcome.ok and job.kind in ("init", "train") and hasattr(outcome.result, "weights"):
            task_id = job.payload.task.task_id
            last = node.store.published.get(task_id)
            term = (job.payload.term if job.kind == "train"  # init republishes the last version in its term
                    else last[2] if last is not None and last[0] == outcome.result.version else 0)
            node.store.published[task_id] = (outcome.result.version, bytes(outcome.result.weights), term)
        sim.trace.record(sim.loop.now, node.index, "job-done", {"job": job.job_id, "kind": job.kind, "ok": outcome.ok,
                                                                "honest": honest, "error": outcome.error})
        sim.feed(node.index, JobFinished(job.job_id, outcome.ok, outcome.result, outcome.error))
        if node.up:
            self._start_jobs(node)
