"""Fork choice: which trainer's chain of versions every peer follows, decided the same way everywhere.

A task names several trainers (`trainer_keys`, rank = index). One publishes at a time; a standby takes
over after silence (swarm/roles/standby.py) and opens a new **term**, one above any it heard. A
partition or a false suspicion can leave two trainers publishing, so each manifest carries
`(term, rank)` and every peer keeps, per task, the **head**: the best `(term, -rank)` seen (higher term
first, then the better, i.e. lower, rank), and within it the highest version. A manifest of a worse
chain is refused (`superseded`, no penalty: a healed partition is nobody's fault); one of the head's
chain or a better one is accepted, and a better one switches the head (roles then drop what they
held of the old chain, swarm/roles/follower.py). Checked before that, in this order (protocol.md §4.5):

1. the manifest's `rank` is its signer's index in `trainer_keys` (`unauthorized`);
2. two manifests by one signer for one `(term, version)` naming different weights (tensor hashes;
   the root when a manifest lists no tensors) are equivocation: that pair is the evidence, the signer is banned (`equivocated`);
3. a signer's term never goes down (`term-backwards`);
4. a delta's `parent_root` is a root its own `(term, rank)` chain has at `parent_version`, when known
   (`not-on-chain`);
5. a manifest of the head's term from a worse rank while the head's trainer was heard within
   `takeover_after` is a standby publishing while its better is alive (`standby-published`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gossip import errors
from gossip.errors import Rejected
from gossip.messages import TaskAnnouncement, TrainerCheckpoint, WeightManifest

MAX_RECORDS = 4096  # (signer, term, version) records kept for the equivocation and parent checks
# ... and only for versions this close to the newest: a parent is one version back and a checkpoint
# names a recent version, so older records only cost memory (bench/soak.py saw the 4,096 fill over
# hours, a fast task's node growing all the while)
KEPT_VERSIONS = 256


def chain_key(term: int, rank: int) -> tuple[int, int]:
    """The fork-choice order of chains: a higher term wins, then a lower rank."""
    return (term, -rank)


@dataclass
class ForkChoice:
    """One task's head and what was heard of every chain."""
    takeover_after: float
    head: tuple[int, int] | None = None  # (term, rank) of the chain followed
    head_version: int = -1
    max_version: int = -1  # the highest version heard on any chain (a new term numbers above it)
    max_term: int = -1
    heard: dict[tuple[int, int], float] = field(default_factory=dict)  # (term, rank) -> last manifest
    signed_term: dict[bytes, int] = field(default_factory=dict)  # signer key -> highest term it signed
    weights: dict[tuple[bytes, int, int], tuple] = field(default_factory=dict)  # (key, term, version) -> tensors
    roots: dict[tuple[int, int, int], set] = field(default_factory=dict)  # (term, rank, version) -> roots

    def judge(self, now: float, task: TaskAnnouncement, m: WeightManifest, key: bytes) -> bool:
        """Raises Rejected for bad input or a losing chain; True when the head changed chains (or was set)."""
        rank = task.trainer_keys.index(key)
        if m.rank != rank:
            raise Rejected(errors.UNAUTHORIZED, f"manifest claims rank {m.rank}, its signer is rank {rank}")
        tensors = tuple(t.hash for t in m.tensors) or (m.root,)  # the weights, whatever their encoding
        known = self.weights.get((key, m.term, m.version))
        if known is not None and known != tensors:
            raise Rejected(errors.EQUIVOCATED, f"two manifests for term {m.term} version {m.version} "
                                               f"with different weights (root {m.root.hex()[:16]})")
        if m.term < self.signed_term.get(key, -1):
            raise Rejected(errors.TERM_BACKWARDS, f"term {m.term} after term {self.signed_term[key]}")
        if m.encoding == "delta":
            parents = self.roots.get((m.term, rank, m.parent_version))
            if parents is not None and m.parent_root not in parents:
                raise Rejected(errors.NOT_ON_CHAIN, f"version {m.version}'s parent is not version "
                                                    f"{m.parent_version} of term {m.term}'s chain")
        self._record(key, rank, m, tensors)
        mine, head = chain_key(m.term, rank), self.head
        if head is not None and mine < chain_key(*head):
            if m.term == head[0] and now - self.heard.get(head, float("-inf")) < self.takeover_after:
                raise Rejected(errors.STANDBY_PUBLISHED, f"rank {rank} published in term {m.term} while "
                                                         f"rank {head[1]} is alive")
            raise Rejected(errors.SUPERSEDED, f"term {m.term} rank {rank}: this peer follows term {head[0]} "
                                              f"rank {head[1]}")
        self.heard[(m.term, rank)] = now
        if head is None or mine > chain_key(*head):
            self.head, self.head_version = (m.term, rank), m.version
            return True
        self.head_version = max(self.head_version, m.version)
        return False

    def judge_checkpoint(self, task: TaskAnnouncement, c: TrainerCheckpoint, key: bytes) -> None:
        """A trainer checkpoint is taken only from the head chain's trainer, for a version of that chain
        whose root it names correctly (raises Rejected otherwise: protocol.md §4.9)."""
        rank = task.trainer_keys.index(key)
        if c.rank != rank:
            raise Rejected(errors.UNAUTHORIZED, f"checkpoint claims rank {c.rank}, its signer is rank {rank}")
        if c.term < self.signed_term.get(key, -1):
            raise Rejected(errors.TERM_BACKWARDS, f"checkpoint of term {c.term} after term {self.signed_term[key]}")
        if self.head is None or (c.term, rank) != self.head:
            raise Rejected(errors.SUPERSEDED, f"checkpoint of term {c.term} rank {rank}, not the chain followed")
        roots = self.roots.get((c.term, rank, c.version))
        if roots is None:
            raise Rejected(errors.STALE, f"checkpoint of version {c.version}, whose manifest this peer has not seen")
        if c.weights_root not in roots:
            raise Rejected(errors.CHECKPOINT_MISMATCH, f"checkpoint names root {c.weights_root.hex()[:16]} for "
                                                       f"version {c.version}, its manifest says otherwise")

    def _record(self, key: bytes, rank: int, m: WeightManifest, tensors: tuple) -> None:
        self.weights[(key, m.term, m.version)] = tensors
        self.roots.setdefault((m.term, rank, m.version), set()).add(m.root)
        self.signed_term[key] = max(self.signed_term.get(key, -1), m.term)
        self.max_term = max(self.max_term, m.term)
        self.max_version = max(self.max_version, m.version)
        floor = self.max_version - KEPT_VERSIONS  # records go in about in version order: drop from the front
        while self.weights and (len(self.weights) > MAX_RECORDS or next(iter(self.weights))[2] < floor):
            del self.weights[next(iter(self.weights))]
        while self.roots and (len(self.roots) > MAX_RECORDS or next(iter(self.roots))[2] < floor):
            del self.roots[next(iter(self.roots))]

    def own(self, now: float, term: int, rank: int, version: int) -> None:
        """Our own publication (gossip does not echo it back): our chain is the head we follow."""
        self.heard[(term, rank)] = now
        self.max_term, self.max_version = max(self.max_term, term), max(self.max_version, version)
        if self.head is None or chain_key(term, rank) >= chain_key(*self.head):
            self.head, self.head_version = (term, rank), max(version, self.head_version
                                                             if self.head == (term, rank) else -1)

    def silent_for(self, now: float, awake_since: float = float("-inf")) -> float:
        """Seconds since the head's trainer was last heard (infinite before any manifest), counted from
        `awake_since` at the latest: a silence this peer slept through (swarm/stall.py) is not the trainer's."""
        return now - max(self.heard[self.head], awake_since) if self.head is not None else float("inf")

    def snapshot(self) -> dict:
        return {"term": self.head[0] if self.head else None, "rank": self.head[1] if self.head else None,
                "version": self.head_version, "max_term": self.max_term}


class Chains:
    """The fork choice of every task this peer follows."""

    def __init__(self) -> None:
        self.tasks: dict[str, ForkChoice] = {}

    def of(self, task_id: str, takeover_after: float) -> ForkChoice:
        fc = self.tasks.get(task_id)
        if fc is None:
            fc = self.tasks[task_id] = ForkChoice(takeover_after)
        return fc
