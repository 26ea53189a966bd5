"""Why a piece of network input was refused.

Every rejection carries a short, stable reason code (counted per peer by the reputation ledger and
shown in `swarm-node status`) and a human detail. Nothing from the network is allowed to raise
anything else: callers catch `Rejected` and count it.
"""

from __future__ import annotations

# Reason codes. Stable strings: scripts and the TUI group by them.
OVERSIZED = "oversized"
MALFORMED = "malformed"
UNKNOWN_KIND = "unknown-kind"  # a kind this release lacks, from a peer that announced nothing newer
OTHER_MAJOR = "other-major"  # another protocol major (envelope `v`, heartbeat): refused, not penalised
NEWER_KIND = "newer-kind"  # a kind this release lacks, from a peer that announced a newer minor: ignored
SCHEMA = "schema"
BAD_SIGNATURE = "bad-signature"
REPLAYED = "replayed"  # an old message sent again (caught by the seen-cache or the time window)
STALE = "stale"  # older than what the signer already sent us (gossip reorders): ignored, no penalty
DUPLICATE = "duplicate"  # a message id seen before: gossip races make a few, a replayer makes many
OUT_OF_WINDOW = "out-of-window"
BANNED = "banned"
UNAUTHORIZED = "unauthorized"
WRONG_TOPIC = "wrong-topic"
UNKNOWN_TASK = "unknown-task"
RATE_LIMITED = "rate-limited"
UNKNOWN_COMMITMENT = "unknown-commitment"  # a verdict about a commitment this peer never saw
CHEATED = "cheated"  # proven: a failed check with evidence, or two signed claims that contradict
TOO_OLD = "too-old"  # a rollout from a policy older than the task's async window allows
CAPACITY = "capacity"  # we are full (too many tasks, say): not the sender's fault
KEPT = "kept"  # taken, but not relayed: a heartbeat nothing vouches for (swarm/membership.py), no penalty
BAD_SHARD = "bad-shard"  # a served weight shard whose bytes do not hash to the signed manifest's hash
TRUNCATED = "truncated"  # a served weight shard of the wrong length (cut short or padded)
FLOODING = "flooding"  # a link handing us strangers' heartbeats nobody vouches for, little else (swarm/floodwatch.py)
STREAM_ABUSE = "stream-abuse"  # the transport refused a peer's stream (idle, oversized, garbage frame)
WITHHELD = "withheld"  # a peer announced a shard, then did not serve it (not-found, error or timeout)
# Trainer chains (swarm/forkchoice.py)
EQUIVOCATED = "equivocated"  # two different manifests signed for one (term, version): banned at once
TERM_BACKWARDS = "term-backwards"  # a trainer signed a lower term than it signed before
NOT_ON_CHAIN = "not-on-chain"  # a delta whose parent is not the version its own chain has there
STANDBY_PUBLISHED = "standby-published"  # published in a term whose better-ranked trainer is visibly alive
SUPERSEDED = "superseded"  # a manifest of a chain the fork choice has left (a healed partition): no penalty
CHECKPOINT_MISMATCH = "checkpoint-mismatch"  # a trainer checkpoint that names weights its version does not have
OTHER_CHAIN = "other-chain"  # rollouts from a version that is not on this trainer's chain: no penalty


class Rejected(Exception):
    """Input refused for `reason` (one of the codes above); `detail` says what exactly."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail

    def again(self) -> "Rejected":
        """The same refusal as a fresh exception (a memo raises one per caller)."""
        return Rejected(self.reason, self.detail)


class UnknownKind(Rejected):
    """A well-formed envelope with a good signature whose kind this release does not know. Whether it
    costs the signer anything depends on what the signer announced (gossip/release.py), which the
    envelope decoder does not know: it hands the signer's key on."""

    def __init__(self, kind: str, signer: bytes) -> None:
        super().__init__(UNKNOWN_KIND, f"unknown message kind {kind!r}")
        self.kind = kind
        self.signer = signer

    def again(self) -> "UnknownKind":
        return UnknownKind(self.kind, self.signer)
