"""Following a task's policy versions: learn the newest from manifests, fetch and hash-check it.

Workers need the newest policy to generate with; validators need the exact version a commitment
claims. Both keep the last few versions' weights (as blob hashes the runtime stores) and fetch a
new one from the trainer that announced it, or from any connected peer whose heartbeat says it
holds that version, trying the next holder when a transfer fails or does not match its hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from gossip.messages import WeightManifest
from swarm import protocols
from swarm.io import Emit, ResponseReceived, StoreBlob

RETRY_AFTER = 5.0


@dataclass
class PolicyFollower:
    task_id: str
    keep: int  # how many versions back to keep (the async window plus one)
    latest: int = -1
    latest_weights: bytes = b""
    latest_source: str = ""
    held: dict[int, bytes] = field(default_factory=dict)  # version -> weights blob hash
    announced: dict[int, bytes] = field(default_factory=dict)  # version -> weights hash from manifests
    fetching: tuple[int, bytes, list[str]] | None = None

    def on_manifest(self, core, owner, now: float, msg: WeightManifest, signer: str) -> list:
        self.announced[msg.version] = msg.root
        for version in sorted(self.announced):
            if version < msg.version - self.keep:
                del self.announced[version]
        if msg.version <= self.latest:
            return []
        self.latest, self.latest_weights, self.latest_source = msg.version, msg.root, signer
        for version in sorted(self.held):
            if version < self.latest - self.keep:
                del self.held[version]
        return self.fetch_latest(core, owner, now)

    def fetch_latest(self, core, owner, now: float) -> list:
        if self.latest < 0 or self.latest in self.held or (self.fetching and self.fetching[0] >= self.latest):
            return []
        peers = core.membership.peers
        holders = [p for p in core.membership.alive_peers()
                   if peers[p].versions.get(self.task_id, -1) >= self.latest and peers[p].connected
                   and p != self.latest_source]
        self.fetching = (self.latest, self.latest_weights, [self.latest_source] + core.rng.sample(holders, len(holders)))
        return self._try_next(core, owner, now)

    def _try_next(self, core, owner, now: float) -> list:
        version, weights, candidates = self.fetching
        if not candidates:
            self.fetching = None
            core.set_timer(f"{owner.name}:{self.task_id}:refetch", now + RETRY_AFTER)
            return [Emit("weights-fetch-failed", {"task_id": self.task_id, "version": version})]
        peer = candidates.pop(0)
        return [core.new_request(now, owner, ("weights", self.task_id, version), peer, protocols.BLOB, weights,
                                 timeout=60.0)]

    def on_response(self, core, owner, now: float, version: int, response: ResponseReceived) -> tuple[list, bool]:
        """Effects, and whether `version` is now installed."""
        if self.fetching is None or self.fetching[0] != version:
            return [], False
        weights = self.fetching[1]
        if response.error is not None or hashlib.blake2b(response.data, digest_size=32).digest() != weights:
            reason = response.error or "hash mismatch"
            return [Emit("weights-fetch-retry", {"task_id": self.task_id, "peer": response.peer,
                                                 "reason": reason[:80]})] + self._try_next(core, owner, now), False
        self.fetching = None
        self.held[version] = weights
        core.versions[self.task_id] = max(core.versions.get(self.task_id, -1), max(self.held))
        effects = [StoreBlob(weights, response.data),
                   Emit("version-installed", {"task_id": self.task_id, "version": version})]
        return effects + self.fetch_latest(core, owner, now), True

    def newest_held(self) -> int | None:
        return max(self.held) if self.held else None
