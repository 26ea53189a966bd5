"""Whose word counts and who is banned: every verdict, quorum and ban rule of a peer, in one file.

As h11 keeps every state transition in `_state.py`, the rules that cost a peer its standing live
here so they can be read and changed together: a bad message costs reputation (a ban once too
many), a replayed commitment or a failed check is proof and bans at once, a trainer's verdict
settles a commitment, validators' failures ban only at a quorum, and a validator contradicted by a
trainer's own check is banned. The intake and the roles report what they saw; this decides what it
proves.
"""

from __future__ import annotations

from collections import OrderedDict

from gossip import errors
from gossip.envelope import SignedMessage
from gossip.errors import Rejected
from gossip.identity import peer_id_from_public_key
from gossip.messages import RolloutCommitment, TaskAnnouncement, TaskSummary, TrainerCheckpoint, Verdict, WeightManifest
from gossip.reputation import ReputationLedger
from swarm.commitments import CommitmentBook
from swarm.io import Ban, Emit

VALIDATOR_QUORUM = 2  # distinct trusted validators whose failed verdicts ban a worker without a trainer's
PROVEN_KEPT = 4096  # workers with proven work remembered, at most
OPINIONS_KEPT = 8192  # commitments whose trusted verdicts we remember, at most (per task)


class Trust:
    def __init__(self, peer_id: str, public_key: bytes, trains: bool, ledger: ReputationLedger) -> None:
        self.peer_id = peer_id
        self.public_key = public_key
        self.trains = trains  # the peer runs the trainer role
        self.ledger = ledger
        self.commitments: dict[str, CommitmentBook] = {}
        # task -> commitment -> trusted verdicts, least recently added to first. Kept only while the
        # commitment book knows the commitment (a verdict about one it forgot is refused before it gets
        # here), so this follows the book's window of versions rather than filling up to the cap.
        self._opinions: dict[str, OrderedDict[bytes, dict[bytes, tuple[bool, str]]]] = {}
        self._on_banned = None  # the shard exchange, told to stop using a banned peer
        # Workers a task's trainer or validator passed a check of, least recently proven first: work a
        # fresh key cannot fake, so membership vouches for them (swarm/membership.py, newcomers).
        self.proven: OrderedDict[str, None] = OrderedDict()

    def on_banned(self, hook) -> None:
        self._on_banned = hook

    # ---- bans

    def penalise(self, now: float, peer: str, rej: Rejected) -> list:
        """A bad message: reputation lost, and a ban once the ledger says too many."""
        effects: list = [Emit("message-rejected", {"peer": peer, "reason": rej.reason, "detail": rej.detail[:200]})]
        if self.ledger.reject(peer, rej.reason, now):
            self._on_banned(peer)
            effects += [Ban(peer, f"too many bad messages ({rej.reason})"),
                        Emit("peer-banned", {"peer": peer, "reason": rej.reason})]
        return effects

    def ban(self, now: float, peer: str, reason: str) -> list:
        """Proof of cheating (a failed check, a wrong verdict): banned at once, never ourselves."""
        if peer == self.peer_id or not self.ledger.ban(peer, reason, now):
            return []
        self._on_banned(peer)
        return [Ban(peer, reason), Emit("peer-banned", {"peer": peer, "reason": reason})]

    def ban_by_operator(self, now: float, peer: str) -> list:
        """The operator's word needs no proof (the ledger only; the shard exchange is not told)."""
        self.ledger.ban(peer, "banned by operator", now)
        return [Ban(peer, "banned by operator")]

    # ---- who may sign what

    @staticmethod
    def authorise(task: TaskAnnouncement, signed: SignedMessage) -> None:
        if isinstance(signed.message, (WeightManifest, TrainerCheckpoint, TaskSummary)) \
                and signed.signer not in task.trainer_keys:
            raise Rejected(errors.UNAUTHORIZED, f"{signed.kind} signed by a key the task does not name as a trainer")

    @staticmethod
    def trusts_verdicts_of(task: TaskAnnouncement, key: bytes) -> bool:
        return key in task.validator_keys or key in task.trainer_keys

    def is_trainer_of(self, task: TaskAnnouncement) -> bool:
        return self.trains and self.public_key in task.trainer_keys

    # ---- commitments

    def book(self, task_id: str) -> CommitmentBook:
        if task_id not in self.commitments:
            self.commitments[task_id] = CommitmentBook()
        return self.commitments[task_id]

    def record_own(self, task_id: str, msg_id: bytes, message: RolloutCommitment) -> None:
        self.book(task_id).add(msg_id, message, self.peer_id, self.public_key)

    def record_commitment(self, task_id: str, signed: SignedMessage, signer: str) -> None:
        book = self.book(task_id)
        earlier = book.replay_of(signed.msg_id, signed.message, signed.signer)
        if earlier is not None:
            # Two commitments signed by one worker for the same batch: proof anyone can check.
            raise Rejected(errors.CHEATED, f"replayed rollouts: repeats commitment {earlier.hex()[:16]}")
        book.add(signed.msg_id, signed.message, signer, signed.signer)

    # ---- verdicts

    def on_verdict(self, now: float, task: TaskAnnouncement, signed: SignedMessage) -> list:
        verdict: Verdict = signed.message
        seen = self.book(task.task_id).get(verdict.commitment_id)
        if seen is None:
            raise Rejected(errors.UNKNOWN_COMMITMENT, f"verdict about {verdict.commitment_id.hex()[:16]}")
        if seen.worker_key != verdict.subject:
            raise Rejected(errors.SCHEMA, "verdict subject is not the signer of the commitment")
        if verdict.passed and self.trusts_verdicts_of(task, signed.signer):
            self.prove(seen.worker)
        if not self.trusts_verdicts_of(task, signed.signer) or self.is_trainer_of(task):
            return []  # a trainer bans on its own re-check (swarm/roles/quorum.py), not on others' word
        return self._weigh_verdicts(now, task, seen, verdict, signed.signer)

    def prove(self, worker: str) -> None:
        """A task's trainer or validator (we, or one whose verdict we heard) passed a check of its work."""
        self.proven[worker] = None
        self.proven.move_to_end(worker)
        if len(self.proven) > PROVEN_KEPT:
            self.proven.popitem(last=False)

    def _weigh_verdicts(self, now: float, task: TaskAnnouncement, seen, verdict: Verdict, key: bytes) -> list:
        """What the trusted verdicts about one commitment prove, so far.

        A trainer re-checks everything it trains on and publishes its verdict either way, so its word
        settles a commitment: a failure bans the worker, and a validator that said otherwise is shown
        wrong and banned. Without a trainer's verdict, validators' failures ban the worker only once
        VALIDATOR_QUORUM distinct validators agree: one lying validator cannot get honest workers
        banned, and its lies cost it its trust as soon as a trainer's verdict contradicts them.
        """
        cid = verdict.commitment_id
        opinions = self._opinions.setdefault(task.task_id, OrderedDict())
        said = opinions.setdefault(cid, {})
        said[key] = (verdict.passed, verdict.reason)
        opinions.move_to_end(cid)
        book = self.book(task.task_id)
        while len(opinions) > OPINIONS_KEPT or book.get(next(iter(opinions))) is None:
            opinions.popitem(last=False)
        by_trainer = [v for k, v in said.items() if k in task.trainer_keys]
        effects: list = []
        if by_trainer:
            failed = next((reason for passed, reason in by_trainer if not passed), None)
            for other, (passed, reason) in said.items():
                if other in task.trainer_keys or passed == (failed is None) or errors.DUPLICATE in (reason, failed):
                    continue  # agrees (or only saw the content first: not a contradiction)
                effects += self.ban(now, peer_id_from_public_key(other), f"wrong verdict on {cid.hex()[:16]}: "
                                    f"{reason}, a trainer's check says {failed or 'ok'}")
            if failed is not None:
                effects += self.ban(now, seen.worker, f"failed {failed} (verdict by a trainer)")
            return effects
        failing = sorted({reason for passed, reason in said.values() if not passed})
        if sum(1 for passed, _ in said.values() if not passed) >= VALIDATOR_QUORUM:
            effects += self.ban(now, seen.worker, f"failed {'/'.join(failing)} "
                                f"(verdicts by {VALIDATOR_QUORUM}+ validators)")
        return effects
