"""The mirror: download every new policy version's shards and serve them, with no model at all.

A mirror helps weights spread (a well-connected box near many workers) and is what the real-process
benchmark uses (bench/weights.py): it follows a task's manifests like a worker, fetches each new
version's shards through the exchange, says so in its heartbeat (`versions`), keeps the async window
plus a margin and releases older versions. It never unpacks (no torch in a mirror). The `leech` role
is a mirror that neither serves nor announces what it holds: the single-origin (star) baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gossip.messages import WeightManifest
from swarm.context import RoleContext
from swarm.forkchoice import chain_key
from swarm.io import Emit
from swarm.roles.base import Role


@dataclass
class MirrorTask:
    keep: int
    manifests: dict[int, WeightManifest] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    chain: tuple[int, int] = (0, 0)  # (term, rank) of the trainer chain mirrored (swarm/forkchoice.py)


class MirrorRole(Role):
    name = "mirror"
    serves = True

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.tasks: dict[str, MirrorTask] = {}

    def on_task(self, now, known) -> list:
        self.tasks[known.task_id] = MirrorTask(keep=known.task.async_level + 2)
        return []

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        state = self.tasks.get(getattr(msg, "task_id", ""))
        if state is None or not isinstance(msg, WeightManifest):
            return []
        effects = []
        if chain_key(msg.term, msg.rank) > chain_key(*state.chain):  # a better chain: the old one is dropped
            state.chain = (msg.term, msg.rank)
            for m in state.manifests.values():
                effects += self.ctx.release_shards(now, m.root, self)
            state.manifests, state.held = {}, set()
            if self.serves:
                self.ctx.switched_version(task_id=msg.task_id, version=-1)
        if msg.version in state.manifests or chain_key(msg.term, msg.rank) < chain_key(*state.chain):
            return effects
        newest = max(state.manifests, default=-1)
        if msg.version < newest - state.keep:
            return effects
        state.manifests[msg.version] = msg
        effects += self.ctx.want_shards(now, msg, self, signer)
        for v in [v for v in state.manifests if v < max(state.manifests) - state.keep]:
            state.held.discard(v)
            effects += self.ctx.release_shards(now, state.manifests.pop(v).root, self)
        return effects

    def on_shards_done(self, now: float, root: bytes) -> list:
        for task_id, state in sorted(self.tasks.items()):
            for version, m in state.manifests.items():
                if m.root == root and version not in state.held:
                    state.held.add(version)
                    if self.serves:  # the heartbeat tells peers whom to ask
                        self.ctx.hold_version(task_id, version)
                    return [Emit("version-mirrored", {"task_id": task_id, "version": version})]
        return []

    def snapshot(self) -> dict:
        return {task_id: {"held_versions": sorted(s.held), "known_versions": sorted(s.manifests)}
                for task_id, s in sorted(self.tasks.items())}


class LeechRole(MirrorRole):
    name = "leech"
    serves = False
