"""What acts on the simulated swarm from outside its cores: the scenario's actions (announce a
task, send a probe) and the adversaries' (simulator/adversaries.py: push raw gossip, dial, stop
relaying). `Actions` is the `adversaries.World` a behaviour sees: these few operations, not the
simulation's router, loop or peer table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from gossip.messages import TaskAnnouncement
from swarm.rng import Rng

if TYPE_CHECKING:
    from simulator.sim import Node, Simulation


class Actions:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim

    # ---- the scenario's

    def announce_task(self, group: str, name: str, model: str, env: str, ttl: float, spec=None) -> None:
        """`spec` (a scenario TaskSpec) adds task params, the async level and the trusted validators:
        every peer created so far in the groups it names (an adversary group there is a compromised
        validator the task trusts)."""
        sim = self.sim
        validators = tuple(n.identity.public_key for n in sim.nodes
                           if spec is not None and n.group.name in spec.validators)
        trainers = [sim.nodes[i] for i in sim.live_honest() if sim.nodes[i].group.name == group]
        for i in sim.live_honest():
            node = sim.nodes[i]
            if node.group.name == group:
                now = sim.core_now(node)
                keys = tuple(n.identity.public_key for n in trainers[:spec.trainers if spec is not None else 1])
                task = TaskAnnouncement(name=name, model=model, env=env, created_at=now, expires_at=now + ttl,
                                        trainer_keys=keys, validator_keys=validators[:64],
                                        async_level=spec.async_level if spec is not None else 2,
                                        params=dict(spec.params) if spec is not None else {})
                sim.trace.record(sim.loop.now, i, "task", {"task_id": task.task_id, "name": name,
                                                           "expires": round(ttl + sim.loop.now, 6)})
                sim.command(i, "announce-task", {"task": task})
                return
        sim.trace.record(sim.loop.now, -1, "task-skipped", {"group": group, "why": "no live honest peer"})

    def probe(self, size: int) -> None:
        honest = self.sim.live_honest()
        if honest:
            self.sim.command(self.sim.rng.choice(honest), "probe", {"size": size})

    # ---- the adversaries' (adversaries.World)

    def now(self) -> float:
        return self.sim.loop.now

    def after(self, delay: float, fn: Callable, *args) -> None:
        self.sim.loop.after(delay, fn, *args)

    def attacks_allowed(self) -> bool:
        return self.sim.attacks_allowed()

    def rng_for(self, node: "Node") -> Rng:
        return node.rng

    def core_now(self, node: "Node") -> float:
        return self.sim.core_now(node)

    def neighbours(self, i: int) -> list[int]:
        return sorted(self.sim.router.conns[i])

    def public_key(self, i: int) -> bytes:
        return self.sim.nodes[i].identity.public_key

    def is_up(self, i: int) -> bool:
        return self.sim.nodes[i].up

    def live_honest(self) -> list[int]:
        return self.sim.live_honest()

    def attack(self, node: "Node", topic: str, data: bytes) -> None:
        """An adversary's raw push to all its neighbours."""
        sim = self.sim
        msg = sim.router.inject(node.index, topic, data)
        sim.trace.record(sim.loop.now, node.index, "attack", {"m": msg.hex, "topic": topic, "size": len(data),
                                                              "kind": node.adversary})

    def withhold(self, i: int) -> None:
        """Peer i's router stops relaying anything (it still receives)."""
        self.sim.router.withhold[i] = True

    def dial(self, i: int, j: int) -> None:
        self.sim.links.dial(i, j)
