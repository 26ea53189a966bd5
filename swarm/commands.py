"""Operator commands (`LocalCommand` from the control API or the simulator): each answered with one
`CommandResult`, a bad argument included, so a caller never waits on a command that failed.

announce-task signs and gossips a task; probe gossips a payload to measure the network;
publish-version signs and gossips a version whose shards are already stored; ban bans a peer.
"""

from __future__ import annotations

from typing import Callable

from gossip import topics
from gossip.envelope import seal
from gossip.errors import Rejected
from gossip.identity import Identity
from gossip.messages import Probe, TaskAnnouncement, TensorEntry, WeightManifest
from gossip.seen import SeenCache
from swarm.context import RoleContext
from swarm.io import CommandResult, LocalCommand, Publish
from swarm.rng import Rng
from swarm.stats import GossipStats
from swarm.tasks import TaskBook
from swarm.trust import Trust


class Commands:
    def __init__(self, identity: Identity, ctx: RoleContext, tasks: TaskBook, seen: SeenCache, stats: GossipStats,
                 rng: Rng, trust: Trust, learn: Callable) -> None:
        self.identity = identity
        self.ctx = ctx
        self.tasks = tasks
        self.seen = seen
        self.stats = stats
        self.rng = rng  # the core's own: a probe's payload draws from it
        self.trust = trust
        self.learn = learn  # learn(now, signed announcement, own) -> effects; raises Rejected
        self.probe_seq = -1

    def handle(self, now: float, cmd: LocalCommand) -> list:
        try:
            if cmd.name == "announce-task":
                return self._announce_task(now, cmd)
            if cmd.name == "probe":
                return self._probe(now, cmd)
            if cmd.name == "publish-version":
                return self._publish_version(now, cmd)
            if cmd.name == "ban":
                peer = str(cmd.args["peer"])
                return self.trust.ban_by_operator(now, peer) + [CommandResult(cmd.command_id, True, {"peer": peer})]
        except (KeyError, TypeError, ValueError) as exc:
            return [CommandResult(cmd.command_id, False, error=f"{cmd.name}: {exc}")]
        return [CommandResult(cmd.command_id, False, error=f"unknown command {cmd.name!r}")]

    def _announce_task(self, now: float, cmd: LocalCommand) -> list:
        task = cmd.args["task"]
        if not isinstance(task, TaskAnnouncement):
            raise TypeError("announce-task needs a TaskAnnouncement")
        signed = seal(self.identity, task)
        try:
            effects = self.learn(now, signed, own=True)  # the operator's own task: always admitted
        except Rejected as rej:
            return [CommandResult(cmd.command_id, False, error=f"task refused: {rej}")]
        self.seen.add(signed.msg_id, now)
        self.stats.on_published(topics.TASKS, len(signed.wire))
        return effects + [Publish(topics.TASKS, signed.wire),
                          CommandResult(cmd.command_id, True, {"task_id": task.task_id})]

    def _publish_version(self, now: float, cmd: LocalCommand) -> list:
        """Sign and gossip a version whose shards are already in our store (a trainer key of the task
        only): what the trainer role does after each step, for versions packed elsewhere (benchmarks)."""
        fields = dict(cmd.args["manifest"])
        task_id = str(fields["task_id"])
        known = self.tasks.tasks.get(task_id)
        if known is None or self.identity.public_key not in known.task.trainer_keys:
            return [CommandResult(cmd.command_id, False, error="not a trainer of that task")]
        fields["tensors"] = tuple(t if isinstance(t, TensorEntry) else TensorEntry(*t) for t in fields.get("tensors", ()))
        fields["shard_hashes"] = tuple(bytes(h) for h in fields["shard_hashes"])
        fields["piece_hashes"] = tuple(bytes(h) for h in fields.get("piece_hashes", ()))
        manifest = WeightManifest(**{**fields, "created_at": now})
        effects = self.ctx.seed_shards(now, manifest, self)
        effects += self.ctx.publish(now, topics.task_topic(task_id, "weights"), manifest)
        self.ctx.hold_version(task_id, manifest.version)
        return effects + [CommandResult(cmd.command_id, True, {"root": manifest.root.hex()})]

    def _probe(self, now: float, cmd: LocalCommand) -> list:
        size = int(cmd.args.get("size", 1024))
        if not 0 <= size <= 64 * 1024:
            raise ValueError("probe size is 0 to 65536 bytes")
        self.probe_seq += 1
        payload = bytes(self.rng.randrange(256) for _ in range(min(size, 64))) * (size // 64 + 1)
        probe = Probe(seq=self.probe_seq, sent_at=now, payload=payload[:size])
        done = CommandResult(cmd.command_id, True, {"seq": self.probe_seq})
        return self.ctx.publish(now, topics.PROBE, probe) + [done]
