"""Checking one rollout commitment: fetch its blob, run a `verify` job, publish the verdict.

Shared by the trainer (which checks what it trains on, or a share of it with a check quorum),
validators (which check for everyone else) and, with the task's `peer_checks`, workers the trainer
asks (`CheckQueue`). A failed check bans the worker at once: the evidence hash in the verdict lets any
peer re-run the same check and see for itself.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gossip import topics
from gossip.hashing import blake2b256
from gossip.messages import RolloutCommitment, Verdict
from swarm import jobs, protocols
from swarm.io import Emit, JobFinished, Respond, ResponseReceived, StoreBlob
from swarm.roles import refusal

PASSED = "ok"
BLOB_TRIES = 3  # a blob fetch that fails (no link to the worker, a timeout, an error) is made this often in all
BLOB_RETRY = 3.0  # seconds before the next try: time for a dial to the worker to connect (sooner: `connected`)


@dataclass
class Check:
    commitment: RolloutCommitment
    commitment_id: bytes
    worker: str
    worker_key: bytes
    blob_ok: bool = False
    verifying: bool = False
    result: jobs.VerifyResult | None = None
    tries: int = 0  # blob fetches made
    retry_at: float | None = None  # when to fetch the blob again (a try failed, or a dial is under way)
    wire: bytes = b""  # the signed commitment as it came (what a trainer sends the checkers it asks)
    # ---- a trainer's quorum (swarm/roles/quorum.py)
    own: bool = True  # the trainer must check it itself (always without a quorum; else spot or disputed)
    spot: bool = False  # drawn for the trainer's own spot check
    asked: dict = field(default_factory=dict)  # checker peer -> quorum.ASKED / PASSED / FAILED / GONE
    asked_at: float | None = None  # when the newest checker was asked


def fetch_blob(ctx, owner, now: float, check: Check) -> list:
    """Ask the worker for the committed blob. The commitment came by gossip, often through other peers:
    with no link to the worker, dial it (its addresses came with its heartbeats) and ask once the
    retry is due; a 1,000-peer simulation lost a batch, and with it every later step, to a trainer
    that asked a worker it had no link to."""
    check.tries += 1
    check.retry_at = None
    info = ctx.peer_info(check.worker)
    if info is not None and not info.connected and check.tries < BLOB_TRIES:
        check.retry_at = now + BLOB_RETRY
        if ctx.dialable(info, now):
            return [ctx.dial(info, now)]
        return []
    c = check.commitment
    return [ctx.request(now, owner, ("rollouts", c.task_id, check.commitment_id), check.worker,
                        protocols.BLOB, c.blob_hash, timeout=30.0)]


def retry_blobs(ctx, owner, now: float, checks, timer: str) -> list:
    """Fetch again the blobs whose retry is due, and set `timer` for the next one (a role's timer)."""
    effects = []
    for check in list(checks):
        if check.retry_at is not None and check.retry_at <= now and not check.blob_ok:
            effects += fetch_blob(ctx, owner, now, check)
    arm_retry(ctx, checks, timer)
    return effects


def connected(ctx, owner, now: float, checks, peer: str, timer: str) -> list:
    """A link to `peer` opened: fetch the blobs of its batches that waited for it now, not at their retry.
    A checker with no link to a batch's worker dials it and asks when BLOB_RETRY is up, and the dial
    takes a few milliseconds: with 16 workers and 7 validators, 45 of 287 batches trained waited the
    whole 3 s for it, and were trained 4 versions after their policy instead of 2 (bench/scaling.py
    --real)."""
    waiting = [c for c in checks if c.worker == peer and c.retry_at is not None and not c.blob_ok]
    if not waiting:
        return []
    effects = [e for check in waiting for e in fetch_blob(ctx, owner, now, check)]
    arm_retry(ctx, checks, timer)
    return effects


def arm_retry(ctx, checks, timer: str) -> None:
    due = min((c.retry_at for c in checks if c.retry_at is not None), default=None)
    if due is not None:
        ctx.timer(timer, due)


def blob_arrived(check: Check, response: ResponseReceived, now: float) -> tuple[list, str | None]:
    """(effects, None) when the blob is the one committed to, or when a failed fetch will be tried again
    (`check.retry_at` set: the caller arms its retry timer); else ([], why not)."""
    c = check.commitment
    if response.error is not None:
        if check.tries < BLOB_TRIES and response.error != "banned":
            check.retry_at = now + BLOB_RETRY
            return [], None
        return [], f"blob not served: {response.error}"[:120]
    if len(response.data) != c.blob_size or blake2b256(response.data) != c.blob_hash:
        return [], "blob does not match its commitment"
    check.blob_ok = True
    return [StoreBlob(c.blob_hash, response.data)], None


def verify_job(ctx, owner, spec: jobs.TaskSpec, check: Check, weights: bytes):
    c = check.commitment
    check.verifying = True
    payload = jobs.VerifyJob(task=spec, worker_key=check.worker_key, version=c.policy_version, weights=weights,
                             blob=c.blob_hash, prompt_indices=c.prompt_indices, samples_per_prompt=c.samples_per_prompt,
                             mean_reward=c.mean_reward, num_tokens=c.num_tokens)
    return ctx.job(owner, (c.task_id, jobs.VERIFY, check.commitment_id), jobs.VERIFY, payload)


def publish_verdict(ctx, now: float, check: Check, result: jobs.VerifyResult) -> list:
    c = check.commitment
    verdict = Verdict(task_id=c.task_id, commitment_id=check.commitment_id, subject=check.worker_key,
                      passed=result.passed, reason=(result.reason or PASSED)[:64],
                      evidence_hash=result.evidence_hash[:32], created_at=now, detail=result.detail[:256])
    effects = ctx.publish(now, topics.task_topic(c.task_id, "verdicts"), verdict)
    effects.append(Emit("verdict", {"task_id": c.task_id, "worker": check.worker, "passed": result.passed,
                                    "reason": result.reason, "commitment_id": check.commitment_id.hex()[:16]}))
    if not result.passed:
        effects += ctx.ban(now, check.worker, f"failed {result.reason}")
    return effects


class CheckQueue:
    """One task's checks on a checking peer: a validator's own picks, or what a trainer asked of a
    validator or a worker (swarm/roles/quorum.py). Each blob is fetched from its worker and checked
    with our own copy of the claimed version once we hold it; the verdict is published either way.
    At most `capacity` at once: a validator drops its oldest pick, an asked peer answers `busy`."""

    def __init__(self, ctx, owner, spec: jobs.TaskSpec, policy, capacity: int) -> None:
        self.ctx, self.owner, self.spec, self.policy, self.capacity = ctx, owner, spec, policy, capacity
        self.checks: OrderedDict[bytes, Check] = OrderedDict()
        self.passed = self.failed = self.skipped = 0
        self.refused = ""  # why this peer cannot check the task's batches (swarm/roles/refusal.py)

    @property
    def timer(self) -> str:
        return f"{self.owner.name}:{self.spec.task_id}:blobs"

    def full(self) -> bool:
        return len(self.checks) >= self.capacity

    def add(self, now: float, check: Check) -> list:
        if self.refused:
            return []
        while self.full():
            self.checks.popitem(last=False)
            self.skipped += 1
        self.checks[check.commitment_id] = check
        effects = fetch_blob(self.ctx, self.owner, now, check)
        arm_retry(self.ctx, self.checks.values(), self.timer)
        return effects

    def asked(self, now: float, request_id: int, signed, worker: str) -> list:
        """A trainer's check request (the core checked who asks): accepted at once, checked as it can."""
        if signed.msg_id in self.checks:
            return [Respond(request_id, b"")]
        if self.refused:  # the trainer asks another checker
            return [Respond(request_id, error="refused")]
        if self.full():
            return [Respond(request_id, error="busy")]
        return [Respond(request_id, b"")] + self.add(now, Check(signed.message, signed.msg_id, worker, signed.signer))

    def on_blob(self, now: float, commitment_id: bytes, response: ResponseReceived) -> list:
        check = self.checks.get(commitment_id)
        if check is None:
            return []
        effects, failure = blob_arrived(check, response, now)
        if failure is not None:
            del self.checks[commitment_id]
            self.skipped += 1
            return [Emit("check-skipped", {"task_id": self.spec.task_id, "worker": check.worker, "reason": failure})]
        if check.retry_at is not None:
            arm_retry(self.ctx, self.checks.values(), self.timer)
            return effects
        return effects + self.start_ready(now)

    def start_ready(self, now: float) -> list:
        """A verify job for each fetched batch whose version we hold (of the chain we follow)."""
        effects = []
        held = self.policy.held
        for cid, check in list(self.checks.items()):
            if not check.blob_ok or check.verifying or check.result is not None:
                continue
            weights = held.get(check.commitment.policy_version)
            if check.commitment.policy_term != self.policy.term:  # another chain's version: not ours to judge
                del self.checks[cid]
                self.skipped += 1
            elif weights is not None:
                effects.append(verify_job(self.ctx, self.owner, self.spec, check, weights))
            elif check.commitment.policy_version < min(held, default=0):
                del self.checks[cid]  # older than any version we will ever hold
                self.skipped += 1
        return effects

    def finished(self, now: float, commitment_id: bytes, done: JobFinished) -> list:
        check = self.checks.pop(commitment_id, None)
        if check is None:
            return []
        if refusal.refuses(done):  # this peer cannot reproduce the task: it judges none of its batches
            self.checks.clear()
            return refusal.refuse(self, self.owner.name, done.error)
        if not done.ok:
            return [Emit("job-failed", {"task_id": self.spec.task_id, "kind": jobs.VERIFY, "error": done.error[:300]})]
        result: jobs.VerifyResult = done.result
        if result.passed:
            self.passed += 1
        else:
            self.failed += 1
        return publish_verdict(self.ctx, now, check, result)

    def retry(self, now: float) -> list:
        return retry_blobs(self.ctx, self.owner, now, self.checks.values(), self.timer)

    def connected(self, now: float, peer: str) -> list:
        return connected(self.ctx, self.owner, now, self.checks.values(), peer, self.timer)

    def snapshot(self) -> dict:
        return {"checking": len(self.checks), "passed": self.passed, "failed": self.failed, "skipped": self.skipped,
                "refused": self.refused or None}
