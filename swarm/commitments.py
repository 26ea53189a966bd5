"""Every rollout commitment a peer has seen, per task: the basis for replay bans and verdicts.

Two signed commitments for the same batch (the same blob, or the same worker, version and prompts)
prove a replay by their signer: anyone holding both can check, so no verdict is needed to ban it.
A verdict is only meaningful about a commitment we know; one about an unknown commitment is refused.
Bounded: the oldest entries are forgotten first, and so is every commitment for a version far behind
the task's newest (`forget_below`): a batch that old is refused as too old whatever it repeats, and
verdicts come within a few versions, so keeping it only costs memory (a few KB each, 8,192 per task).
The batch blobs of the commitments forgotten that way are deleted too (`DropBlobs`): a worker keeps
its own, a trainer and a checker the ones they fetched, and before they filled the blob store's byte
cap (4 GB) at about 100 MB an hour on a trainer, with an index entry each in the node's memory.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass

from gossip.messages import RolloutCommitment

KEPT_VERSIONS = 64  # commitments for versions further behind the task's newest are forgotten


@dataclass(frozen=True)
class Seen:
    commitment: RolloutCommitment
    worker: str
    worker_key: bytes


class CommitmentBook:
    def __init__(self, capacity: int = 8192) -> None:
        self.capacity = capacity
        self._by_id: OrderedDict[bytes, Seen] = OrderedDict()
        self._by_blob: dict[bytes, bytes] = {}
        self._by_claim: dict[tuple, bytes] = {}
        self._by_worker: Counter[str] = Counter()  # commitments held per worker: who works on the task
        self._first_version: dict[str, int] = {}  # per worker held, the oldest policy version it committed for

    @staticmethod
    def _claim(c: RolloutCommitment, worker_key: bytes) -> tuple:
        return (worker_key, c.policy_version, c.policy_term, c.prompt_indices)  # one slice per chain's version

    def replay_of(self, commitment_id: bytes, c: RolloutCommitment, worker_key: bytes) -> bytes | None:
        """The id of an earlier commitment this one repeats, if any."""
        for earlier in (self._by_blob.get(c.blob_hash), self._by_claim.get(self._claim(c, worker_key))):
            if earlier is not None and earlier != commitment_id:
                return earlier
        return None

    def add(self, commitment_id: bytes, c: RolloutCommitment, worker: str, worker_key: bytes) -> None:
        if commitment_id in self._by_id:
            return
        self._by_id[commitment_id] = Seen(c, worker, worker_key)
        self._by_worker[worker] += 1
        self._first_version[worker] = min(c.policy_version, self._first_version.get(worker, c.policy_version))
        self._by_blob.setdefault(c.blob_hash, commitment_id)
        self._by_claim.setdefault(self._claim(c, worker_key), commitment_id)
        while len(self._by_id) > self.capacity:
            self._forget(*next(iter(self._by_id.items())))

    def forget_below(self, version: int) -> list[bytes]:
        """Forget commitments for policy versions below `version`, oldest first (they come in about in
        version order, so this stops at the first newer one); the blobs of the batches forgotten, which
        nobody will train or check any more."""
        blobs = []
        while self._by_id:
            old_id, old = next(iter(self._by_id.items()))
            if old.commitment.policy_version >= version:
                break
            self._forget(old_id, old)
            blobs.append(bytes(old.commitment.blob_hash))
        return blobs

    def _forget(self, old_id: bytes, old: Seen) -> None:
        del self._by_id[old_id]
        self._by_worker[old.worker] -= 1
        if not self._by_worker[old.worker]:
            del self._by_worker[old.worker]
            del self._first_version[old.worker]
        if self._by_blob.get(old.commitment.blob_hash) == old_id:
            del self._by_blob[old.commitment.blob_hash]
        if self._by_claim.get(self._claim(old.commitment, old.worker_key)) == old_id:
            del self._by_claim[self._claim(old.commitment, old.worker_key)]

    def workers(self):
        """Who signed a commitment we still hold (for a version at most `KEPT_VERSIONS` behind the newest):
        evidence that they work on the task (swarm/context.py `workers_of`)."""
        return self._by_worker.keys()

    def works(self, peer: str) -> bool:
        """Whether `peer` signed a commitment we still hold: a relay carries its heartbeats (swarm/evidence.py)."""
        return peer in self._by_worker

    def worked_before(self, version: int, besides: str) -> bool:
        """Whether a worker other than `besides` committed for a version older than `version`."""
        return any(v < version for w, v in self._first_version.items() if w != besides)

    def get(self, commitment_id: bytes) -> Seen | None:
        return self._by_id.get(commitment_id)

    def __len__(self) -> int:
        return len(self._by_id)
