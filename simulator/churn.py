"""Who is up when: scheduled joins, churn rounds, crash-restarts, partitions, slow peers, clock skew.

Everything here is decided from the scenario and the seed before or during the run with the world's
seeded stream, iterating peers in index order, so the same seed always churns the same peers at the
same instants. Nothing new starts in the final `settle` seconds (the liveness phase, as in VOPR): the
checks that say "eventually" are judged after the swarm has had that long to heal.

With `[faults] random = true` the fault settings themselves (loss, partitions, slow peers) are drawn
from the seed and returned by `derive_faults`, so the CLI can print them and a failure replays exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.scenario import PartitionSpec, Scenario, SlowSpec
from swarm.rng import Rng, stable_seed


@dataclass(frozen=True)
class FaultPlan:
    loss: float
    partitions: tuple[PartitionSpec, ...]
    slow: tuple[SlowSpec, ...]
    skew_max: float

    def describe(self) -> dict:
        return {"loss": round(self.loss, 6), "skew_max": self.skew_max,
                "partitions": [{"at": round(p.at, 3), "duration": round(p.duration, 3), "fraction": round(p.fraction, 3),
                                **({"side": list(p.side)} if p.side else {})}
                               for p in self.partitions],
                "slow": [{"fraction": round(s.fraction, 3), "factor": round(s.factor, 3),
                          "extra_delay_ms": round(s.extra_delay_ms, 3)} for s in self.slow]}


def derive_faults(s: Scenario) -> FaultPlan:
    """The scenario's fixed faults, plus seed-drawn ones when `faults.random` is on."""
    f = s.faults
    loss, partitions, slow = s.network.loss, list(f.partitions), list(f.slow)
    if f.random:
        rng = Rng(stable_seed("swarm-sim", s.seed, "faults"))
        loss = max(loss, rng.uniform(0, f.loss_max))
        faulty = s.duration - s.settle
        for _ in range(rng.randrange(f.partitions_max + 1)):
            duration = min(rng.uniform(5.0, f.partition_max_duration), faulty * 0.5)
            if faulty - duration > 1.0:
                partitions.append(PartitionSpec(at=rng.uniform(1.0, faulty - duration), duration=duration,
                                                fraction=rng.uniform(0.1, 0.5)))
        if f.slow_max > 0:
            slow.append(SlowSpec(fraction=max(0.01, rng.uniform(0, f.slow_max)), factor=rng.uniform(0.05, 0.5),
                                 extra_delay_ms=rng.uniform(0, 200)))
    partitions.sort(key=lambda p: p.at)
    return FaultPlan(loss, tuple(partitions), tuple(slow), f.skew_max)


class Churn:
    def __init__(self, sim, plan: FaultPlan) -> None:
        self.sim = sim
        self.s: Scenario = sim.scenario
        self.plan = plan
        self.rng = Rng(stable_seed("swarm-sim", self.s.seed, "churn"))
        self.skew_rng = Rng(stable_seed("swarm-sim", self.s.seed, "skew"))
        self.faulty_until = self.s.duration - self.s.settle

    def _skew(self) -> float:
        m = self.plan.skew_max
        return self.skew_rng.uniform(-m, m) if m else 0.0

    def schedule(self) -> None:
        s, loop = self.s, self.sim.loop
        for group in s.peers:
            for k in range(group.count):
                at = group.join_at + (group.join_spread * k / group.count if group.join_spread else 0.0)
                index = self.sim.create_peer(group, self._skew())
                loop.at(at, self.sim.start_peer, index)
        for spec in self.plan.slow:
            loop.at(0.0, self._slow, spec)
        for crash in s.faults.crashes:
            loop.at(crash.at, self._crash, crash)
        for part in self.plan.partitions:
            loop.at(part.at, self._partition, part)
            loop.at(part.at + part.duration, self._heal)
        if s.churn.replace_fraction > 0:
            loop.at(s.churn.replace_every, self._replace_round)
        if s.churn.crash_rate > 0:
            loop.at(60.0, self._crash_round)
        for t in s.tasks:
            loop.at(t.at, self.sim.actions.announce_task, t.by, t.name, t.model, t.env, t.ttl, t)
        if s.workload.probe_rate > 0:
            loop.at(s.workload.probe_start, self._probe)

    def _churnable(self, restarts: bool = False) -> list[int]:
        """Live peers churn may replace (or, with `restarts`, crash and restart)."""
        ok = (True, "restart") if restarts else (True,)
        return [i for i in sorted(self.sim.live) if self.sim.nodes[i].group.churn in ok]

    def peers_named(self, ref: str) -> list[int]:
        """'group:k' or 'group:a-b' (creation order within the group), or 'group' (all of it)."""
        group, _, which = ref.partition(":")
        members = [n.index for n in self.sim.nodes if n.group.name == group]
        if not which:
            return members
        a, _, b = which.partition("-")
        return members[int(a):int(b)] if b else members[int(a):int(a) + 1]

    def _crash(self, crash) -> None:
        for i in self.peers_named(crash.peer):
            self.sim.stop_peer(i, "crash")
            if crash.downtime > 0:
                self.sim.loop.after(crash.downtime, self._restart, i)

    def _replace_round(self) -> None:
        sim, now = self.sim, self.sim.loop.now
        if now >= self.faulty_until:
            return
        live = self._churnable()
        victims = self.rng.sample(live, int(round(self.s.churn.replace_fraction * len(live))))
        for i in sorted(victims):
            how = "crash" if self.rng.random() < self.s.churn.crash_fraction else "leave"
            sim.stop_peer(i, how)
            newcomer = sim.create_peer(sim.nodes[i].group, self._skew())
            sim.loop.after(self.rng.uniform(0.0, 30.0), sim.start_peer, newcomer)
        sim.loop.after(self.s.churn.replace_every, self._replace_round)

    def _crash_round(self) -> None:
        sim = self.sim
        if sim.loop.now >= self.faulty_until:
            return
        p = 1.0 - math.exp(-self.s.churn.crash_rate / 60.0)
        for i in self._churnable(restarts=True):
            if self.rng.random() < p:
                sim.stop_peer(i, "crash")
                sim.loop.after(self.s.churn.downtime, self._restart, i)
        sim.loop.after(60.0, self._crash_round)

    def _restart(self, i: int) -> None:
        self.sim.trace.record(self.sim.loop.now, i, "restart", {})
        self.sim.start_peer(i)

    def _slow(self, spec: SlowSpec) -> None:
        sim = self.sim
        peers = list(range(len(sim.nodes)))
        chosen = self.rng.sample(peers, max(1, int(round(spec.fraction * len(peers)))))
        for i in sorted(chosen):
            sim.net.set_slow(i, spec.factor, spec.extra_delay_ms / 1000.0)
            sim.trace.record(sim.loop.now, i, "slow", {"factor": round(spec.factor, 6),
                                                       "extra_delay_ms": round(spec.extra_delay_ms, 3)})
        sim.flows.capacity_changed()

    def _partition(self, part: PartitionSpec) -> None:
        sim = self.sim
        everyone = list(range(len(sim.nodes)))
        if part.side:
            minority = sorted({i for ref in part.side for i in self.peers_named(ref)})
        else:
            minority = sorted(self.rng.sample(everyone, max(1, int(round(part.fraction * len(everyone))))))
        sim.net.set_partition({i: 1 for i in minority})
        sim.trace.record(sim.loop.now, -1, "partition", {"side": minority[:10000], "n": len(minority)})
        for i in minority:
            for j in sorted(sim.router.conns[i]):
                if not sim.net.reachable(i, j):
                    sim.links.close(i, j, "partition")

    def _heal(self) -> None:
        self.sim.net.set_partition(None)
        self.sim.trace.record(self.sim.loop.now, -1, "heal", {})
        for i in sorted(self.sim.live):
            if not self.sim.router.conns[i]:
                self.sim.links.bootstrap(i)

    def _probe(self) -> None:
        sim = self.sim
        sim.actions.probe(self.s.workload.probe_size)
        rate = self.s.workload.probe_rate
        sim.loop.after(self.rng.uniform(0.5, 1.5) / rate, self._probe)
