"""Following a task's policy versions: learn them from signed manifests, swarm their shards, unpack.

Workers need the newest policy to generate with; validators need the exact version a commitment
claims. A version is a signed `WeightManifest` (full, or a delta on its parent) whose shards are
downloaded through the peer's shard exchange (`swarm/roles/shards.py`: from every peer that holds
them, each shard checked against the manifest's hash). When all shards of a version are held and
its parent is installed (or it is a full version), an `unpack` job rebuilds it (trainer/weights:
every shard, the root and every tensor hash are checked again) and stores the weights as a blob,
whose hash is what generate and verify jobs use. A newcomer installs the chain from the last full
version forward (the trainer re-announces that chain). A follower follows one trainer's chain, one
`(term, rank)` (swarm/forkchoice.py: a term's first version is full, so its chain back to the last
full version is its own); a manifest of a better chain (the core's fork choice refuses worse ones)
drops everything held of the old one and starts over on the new. Versions older than the window (`keep`)
plus a margin are released, but not the deltas leading on from the newest installed: their shards are
garbage-collected and their weights blobs deleted once no other role of this peer holds them
(`RoleContext.release_blobs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gossip.messages import WeightManifest
from swarm import jobs
from swarm.forkchoice import chain_key
from swarm.io import Emit, JobFinished

RETRY_AFTER = 5.0
MARGIN = 1  # versions kept beyond the window, so a slightly late commitment can still be checked
MAX_MANIFESTS = 64


@dataclass
class PolicyFollower:
    task_id: str
    keep: int  # how many versions back to keep (the async window plus one)
    latest: int = -1
    latest_source: str = ""
    held: dict[int, bytes] = field(default_factory=dict)  # version -> weights blob hash (unpacked)
    manifests: dict[int, WeightManifest] = field(default_factory=dict)  # version -> its signed manifest
    signers: dict[int, str] = field(default_factory=dict)  # version -> the trainer that announced it
    wanted: set[int] = field(default_factory=set)  # versions whose shards are being fetched
    ready: set[int] = field(default_factory=set)  # versions whose shards are all held
    unpacking: int | None = None
    failures: int = 0
    chain: tuple[int, int] | None = None  # (term, rank) of the trainer chain followed
    ctx: object = None  # the owner's RoleContext, kept from the first input
    owner: object = None

    # ---- inputs

    def on_manifest(self, ctx, owner, now: float, msg: WeightManifest, signer: str) -> list:
        self.ctx, self.owner = ctx, owner
        effects = []
        if self.chain is None or chain_key(msg.term, msg.rank) > chain_key(*self.chain):
            effects = self._switch(now, (msg.term, msg.rank))
        elif chain_key(msg.term, msg.rank) < chain_key(*self.chain):
            return []  # a losing chain (our own trainer's, just before it stepped down)
        return effects + self._learn(now, msg, signer)

    def _learn(self, now: float, msg: WeightManifest, signer: str) -> list:
        known = self.manifests.get(msg.version)
        if known is not None and known.root != msg.root:
            return [Emit("weights-conflict", {"task_id": self.task_id, "version": msg.version})]
        if msg.version in self.held or (msg.version < self.latest - self.keep - MARGIN and not self._ahead(msg.version)):
            return []
        self.manifests[msg.version] = msg
        self.signers[msg.version] = signer
        while len(self.manifests) > MAX_MANIFESTS:
            self.signers.pop(min(self.manifests), None)
            del self.manifests[min(self.manifests)]
        if msg.version > self.latest:
            self.latest, self.latest_source = msg.version, signer
        return self._advance(now)

    def _switch(self, now: float, chain: tuple[int, int]) -> list:
        """Follow another chain: nothing of the old one is used again (an unpack in flight is dropped
        when it ends)."""
        old, self.chain = self.chain, chain
        if old is None:
            return []
        effects = self.ctx.release_blobs(self, list(self.held.values()))
        for m in self.manifests.values():
            effects += self.ctx.release_shards(now, m.root, self)
        self.held, self.manifests, self.signers = {}, {}, {}
        self.wanted, self.ready, self.latest = set(), set(), -1
        self.ctx.switched_version(self.task_id, -1)
        return effects + [Emit("chain-followed", {"task_id": self.task_id, "term": chain[0], "rank": chain[1],
                                                  "from_term": old[0], "from_rank": old[1]})]

    def forget(self) -> list:
        """The task is gone: let go of every unpacked version (its shards go with the exchange's downloads)."""
        if self.ctx is None:
            return []
        effects = self.ctx.release_blobs(self, list(self.held.values()))
        self.held, self.manifests, self.signers, self.wanted, self.ready = {}, {}, {}, set(), set()
        return effects

    @property
    def term(self) -> int:
        return self.chain[0] if self.chain is not None else 0

    def fetch_latest(self, ctx, owner, now: float) -> list:
        """Retry after a failure (the owner's refetch timer)."""
        self.ctx, self.owner = ctx, owner
        return self._advance(now)

    def on_shards_done(self, now: float, root: bytes) -> list:
        for version, m in self.manifests.items():
            if m.root == root:
                self.ready.add(version)
        return self._advance(now)

    def on_job_finished(self, now: float, tag, done: JobFinished) -> list:
        _, version = tag
        self.unpacking = None
        ctx, owner = self.ctx, self.owner
        if not done.ok:
            self.failures += 1
            m = self.manifests.pop(version, None)
            self.ready.discard(version)
            self.wanted.discard(version)
            effects = [Emit("weights-fetch-failed", {"task_id": self.task_id, "version": version,
                                                     "reason": done.error[:200]})]
            if m is not None:
                effects += ctx.release_shards(now, m.root, self)
            ctx.timer(f"{owner.name}:{self.task_id}:refetch", now + RETRY_AFTER)
            return effects
        result: jobs.VersionResult = done.result
        if version not in self.manifests:  # of a chain left meanwhile
            ctx.hold_blob(self, result.weights)
            return ctx.release_blobs(self, [result.weights]) + self._advance(now)
        self.held[version] = result.weights
        ctx.hold_blob(self, result.weights)
        ctx.hold_version(self.task_id, max(self.held))
        effects = [Emit("version-installed", {"task_id": self.task_id, "version": version, "term": self.term})]
        effects += self._forget_old(now)
        effects += owner.on_timer(now, f"{owner.name}:{self.task_id}:installed")
        return effects + self._advance(now)

    # ---- the chain

    def _chain(self) -> list[int]:
        """Versions to install, oldest first, ending at the newest one we can reach; [] if none."""
        for target in sorted(self.manifests, reverse=True):
            chain, v = [], target
            while v not in self.held:
                m = self.manifests.get(v)
                if m is None:
                    chain = []
                    break
                chain.append(v)
                if m.encoding == "full":
                    break
                v = m.parent_version
            if chain and (not self.held or target > max(self.held)):
                return chain[::-1]
        return []

    def _advance(self, now: float) -> list:
        ctx = self.ctx
        if ctx is None:
            return []
        chain = self._chain()
        effects: list = []
        for v in chain:
            if v not in self.wanted:
                self.wanted.add(v)
                effects += ctx.want_shards(now, self.manifests[v], self, self.signers.get(v, ""))
        if chain and self.unpacking is None and chain[0] in self.ready:
            v = chain[0]
            m = self.manifests[v]
            parent = self.held.get(m.parent_version, b"") if m.encoding == "delta" else b""
            self.unpacking = v
            payload = jobs.UnpackJob(task_id=self.task_id, version=v, manifest=m, parent_weights=parent)
            effects.append(ctx.job(self, ("unpack", v), jobs.UNPACK, payload))
        return effects

    def _forget_old(self, now: float) -> list:
        floor = self.latest - self.keep - MARGIN
        newest = max(self.held)
        effects: list = []
        released = []
        for v in sorted(self.held):
            if v < floor and v != newest:
                released.append(self.held.pop(v))
        effects += self.ctx.release_blobs(self, [d for d in released if d not in self.held.values()])
        for v in sorted(self.manifests):
            if v < min(floor, newest):  # not the newest held, nor any delta leading on from it (`_ahead`)
                m = self.manifests.pop(v)
                self.signers.pop(v, None)
                self.ready.discard(v)
                self.wanted.discard(v)
                effects += self.ctx.release_shards(now, m.root, self)
        return effects

    def _ahead(self, version: int) -> bool:
        """Whether `version` is past the newest we hold: a delta on the way from it to the latest, needed
        however old. A worker back from a crash installed version 16 while the trainer was at 22, dropped
        17 as below the window, and with 17 gone no delta chain reached 22, nor any re-announced 17 was
        taken: it never generated again."""
        return not self.held or version > max(self.held)

    def newest_held(self) -> int | None:
        return max(self.held) if self.held else None

    def progress(self) -> dict:
        return {"wanted": sorted(self.wanted - set(self.held)), "unpacking": self.unpacking}
