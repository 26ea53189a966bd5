"""Trainer checkpoints: the active trainer's state, carried to its standbys over the weights exchange.

A version is what workers need; a takeover needs more: the full-precision master weights, the
optimizer moments, the step (the schedule position) and the RNG (trainer/checkpoint.py packs them).
In a task with several trainers the active one asks its job to pack that state every `state_every`
versions (the job does it after answering, off the critical path, and hands the fields back with the
next result), seeds the shards and publishes a signed `TrainerCheckpoint` naming the version's
manifest root; it re-announces the newest one with its manifests. Standbys alone fetch it (workers
and validators never ask for it), keep the newest complete one, and a standby that takes over hands
it to its first train job: the moments always, the master weights when the checkpoint is of the very
version it continues from (else it starts from that version's published weights: docs/weights.md).

Every peer checks a checkpoint before a role sees it (swarm/forkchoice.py `judge_checkpoint`): signed
by a listed trainer (`unauthorized`), of the chain it follows (`superseded`), naming the root its
version's manifest has (`checkpoint-mismatch`).
"""

from __future__ import annotations

from dataclasses import replace

from gossip import topics
from gossip.messages import TensorEntry, TrainerCheckpoint
from swarm.io import Emit

STUCK_AFTER = 600.0  # seconds after which a standby gives up a checkpoint fetch for a newer checkpoint
# (sooner when it cannot finish: `_may_finish`)


class Checkpoints:
    """One task's checkpoints as a trainer sees them; also the shard owner of the ones it holds."""

    def __init__(self, ctx, task_id: str, every: int) -> None:
        self.ctx, self.task_id, self.every = ctx, task_id, every
        self.newest: TrainerCheckpoint | None = None  # complete: published by us, or fetched in full
        self.previous: TrainerCheckpoint | None = None  # the active trainer's one before, still served
        self.fetching: TrainerCheckpoint | None = None  # a standby's download in progress
        self.queued: TrainerCheckpoint | None = None  # the newest heard meanwhile: fetched next
        self.packed_at = -1  # the version whose train job last packed the state (active trainer)
        self.published = self.fetched = self.bytes_published = 0
        self.unannounced = False  # the newest is seeded but its message waits for the version's manifest
        self.source = ""  # the trainer that signed what we fetch (it holds every piece)
        self.fetch_started = 0.0

    def due(self, version: int, trainers: int) -> bool:
        """Pack the state after training from `version`? Only where a standby could use it."""
        return trainers > 1 and (self.packed_at < 0 or version + 1 - self.packed_at >= self.every)

    def on_shards_done(self, now: float, root: bytes) -> list:
        c = self.fetching
        if c is None or c.root != root:
            return []
        old, self.fetching, self.newest = self.newest, None, c
        self.fetched += 1
        effects = self.ctx.release_shards(now, old.root, self) if old is not None and old.root != root else []
        effects.append(Emit("checkpoint-fetched", {"task_id": self.task_id, "version": c.version, "term": c.term,
                                                   "bytes": c.compressed_size}))
        queued, self.queued = self.queued, None
        if queued is not None and queued.version > c.version:
            self.fetching, self.fetch_started = queued, now
            effects += self.ctx.want_shards(now, queued, self, source=self.source)
        return effects

    def snapshot(self) -> dict:
        c = self.newest
        return {"version": c.version if c else None, "term": c.term if c else None,
                "bytes": c.compressed_size if c else 0, "fetching": self.fetching.version if self.fetching else None,
                "published": self.published, "fetched": self.fetched}


def checkpoint_of(now: float, task_id: str, term: int, rank: int, fields) -> TrainerCheckpoint:
    """The signed-to-be message of the state a train job packed."""
    f = dict(fields)
    tensors = tuple(t if isinstance(t, TensorEntry) else TensorEntry(*t) for t in f.pop("tensors"))
    return TrainerCheckpoint(task_id=task_id, term=term, rank=rank, created_at=now, tensors=tensors,
                             shard_hashes=tuple(f.pop("shard_hashes")), piece_hashes=tuple(f.pop("piece_hashes")),
                             **f)


def publish(ctx, now: float, cps: Checkpoints, c: TrainerCheckpoint) -> list:
    """Active trainer: serve the new checkpoint (before anything else is released: a gc must spare its
    shards) and keep serving the one before it (a standby finishes the fetch it started, so a slow link
    gets two checkpoint periods); drop the older one. `announce` sends it once its version's manifest
    is out."""
    dropped, cps.previous, cps.newest, cps.unannounced = cps.previous, cps.newest, c, True
    cps.published += 1
    cps.bytes_published += c.compressed_size
    effects = ctx.seed_shards(now, c, cps)
    if dropped is not None and dropped.root not in (c.root, cps.previous.root if cps.previous else b""):
        effects += ctx.release_shards(now, dropped.root, cps)
    return effects + [Emit("checkpoint-published", {"task_id": cps.task_id, "version": c.version, "term": c.term,
                                                    "bytes": c.compressed_size, "raw_bytes": c.raw_size})]


def announce(ctx, now: float, cps: Checkpoints, again: bool = False) -> list:
    """Sign the newest checkpoint: once, after its version's manifest (peers check it against that
    root), and `again` with every re-announcement of the chain (a standby that joins late needs it)."""
    if cps.newest is None or not (again or cps.unannounced):
        return []
    cps.unannounced = False
    return ctx.publish(now, topics.task_topic(cps.task_id, "weights"), replace(cps.newest, created_at=now))


def heard(ctx, now: float, cps: Checkpoints, c: TrainerCheckpoint, signer: str) -> list:
    """Standby: fetch a checkpoint newer than what it has (the fork choice judged it already)."""
    have = max((x.version for x in (cps.newest, cps.fetching, cps.queued) if x is not None), default=-1)
    if c.version <= have and not _other_chain(cps, c):
        return []
    if cps.fetching is not None and not _other_chain(cps, c) and _may_finish(ctx, now, cps, c):
        cps.queued = c  # a fetch replaced by every newer checkpoint might never finish: finish it, then this
        return []
    effects = []
    if cps.fetching is not None and cps.fetching.root != c.root:
        effects += ctx.release_shards(now, cps.fetching.root, cps)
    cps.fetching, cps.queued, cps.source, cps.fetch_started = c, None, signer, now
    return effects + ctx.want_shards(now, c, cps, source=signer)


def _may_finish(ctx, now: float, cps: Checkpoints, c: TrainerCheckpoint) -> bool:
    """Is the fetch in progress still worth finishing, `c` heard meanwhile? Not after STUCK_AFTER, not
    when begun before our own stall (its checkpoint has likely stopped being served), and not once a
    second checkpoint newer than it is heard (one queued, now `c`): the active trainer serves only its
    two newest (`publish`), so the fetch's pieces are gone."""
    unserved = cps.queued is not None and c.version > cps.queued.version
    return now - cps.fetch_started < STUCK_AFTER and cps.fetch_started >= ctx.awake_since and not unserved


def _other_chain(cps: Checkpoints, c: TrainerCheckpoint) -> bool:
    """A checkpoint of another (better) chain than the one ours came from replaces it whatever its version."""
    have = cps.fetching or cps.newest
    return have is not None and (have.term, have.rank) != (c.term, c.rank)


def drop_all(ctx, now: float, cps: Checkpoints) -> list:
    """Stepping down or taking over with it: nothing of this chain's state is served or fetched any more."""
    effects = []
    for c in {x.root: x for x in (cps.newest, cps.fetching, cps.previous) if x is not None}.values():
        effects += ctx.release_shards(now, c.root, cps)
    cps.newest = cps.fetching = cps.queued = cps.previous = None
    cps.packed_at = -1
    return effects
