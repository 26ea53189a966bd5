"""The validator: check other workers' rollouts and gossip signed verdicts with evidence.

It follows the policy like a worker does (it needs the exact version a commitment claims) and
chooses which commitments to check: all of them, or a fraction (`validate_fraction`) picked by the
hash of its own signature over the commitment id. A worker cannot predict that choice (it would
need the validator's secret key), yet anyone can confirm it afterwards from the signature.
Verdicts from a key the task names as a validator are what other peers act on.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

from gossip.messages import RolloutCommitment, WeightManifest
from swarm import jobs
from swarm.context import RoleContext
from swarm.io import Emit, JobFinished, ResponseReceived
from swarm.roles import checking
from swarm.roles.base import Role
from swarm.roles.checking import Check
from swarm.roles.follower import PolicyFollower
from swarm.taskparams import TaskParams, task_spec

MAX_CHECKS = 256


@dataclass
class ValidatorTask:
    spec: jobs.TaskSpec
    policy: PolicyFollower
    fraction: float
    checks: OrderedDict = field(default_factory=OrderedDict)  # commitment id -> Check
    passed: int = 0
    failed: int = 0
    skipped: int = 0


class ValidatorRole(Role):
    name = "validator"

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.tasks: dict[str, ValidatorTask] = {}

    def on_task(self, now, known) -> list:
        task = known.task
        fraction = TaskParams.of(task).validate_fraction  # checked when the task was admitted
        self.tasks[task.task_id] = ValidatorTask(task_spec(task), PolicyFollower(task.task_id, task.async_level + 1),
                                                 float(fraction))
        return []

    def chooses(self, state: ValidatorTask, commitment_id: bytes) -> bool:
        signature = self.ctx.sign(b"swarm/validate-choice/1\x00" + commitment_id)
        draw = int.from_bytes(hashlib.blake2b(signature, digest_size=8).digest(), "big") / 2**64
        return draw < state.fraction

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        state = self.tasks.get(getattr(msg, "task_id", ""))
        if state is None:
            return []
        if isinstance(msg, WeightManifest):
            return state.policy.on_manifest(self.ctx, self, now, msg, signer)
        if not isinstance(msg, RolloutCommitment) or signer == self.ctx.peer_id:
            return []
        if not self.chooses(state, signed.msg_id):
            state.skipped += 1
            return []
        while len(state.checks) >= MAX_CHECKS:
            state.checks.popitem(last=False)
            state.skipped += 1
        check = state.checks[signed.msg_id] = Check(msg, signed.msg_id, signer, signed.signer)
        effects = checking.fetch_blob(self.ctx, self, now, check)
        checking.arm_retry(self.ctx, state.checks.values(), f"validator:{msg.task_id}:blobs")
        return effects

    def on_response(self, now, tag, response: ResponseReceived) -> list:
        kind, task_id, key = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if kind == "weights":
            effects, _ = state.policy.on_response(self.ctx, self, now, key, response)
            return effects + self._start_ready(now, state)
        check = state.checks.get(key)
        if check is None:
            return []
        effects, failure = checking.blob_arrived(check, response, now)
        if failure is not None:
            del state.checks[key]
            return [Emit("check-skipped", {"task_id": task_id, "worker": check.worker, "reason": failure})]
        if check.retry_at is not None:
            checking.arm_retry(self.ctx, state.checks.values(), f"validator:{task_id}:blobs")
            return effects
        return effects + self._start_ready(now, state)

    def _start_ready(self, now: float, state: ValidatorTask) -> list:
        """Start a verify job for each fetched batch whose policy version we hold."""
        effects = []
        for cid, check in list(state.checks.items()):
            if not check.blob_ok or check.verifying or check.result is not None:
                continue
            weights = state.policy.held.get(check.commitment.policy_version)
            if check.commitment.policy_term != state.policy.term:  # another chain's version: not ours to judge
                del state.checks[cid]
                state.skipped += 1
            elif weights is not None:
                effects.append(checking.verify_job(self.ctx, self, state.spec, check, weights))
            elif check.commitment.policy_version < min(state.policy.held, default=0):
                del state.checks[cid]  # older than any version we will ever hold
                state.skipped += 1
        return effects

    def on_job_finished(self, now, tag, done: JobFinished) -> list:
        task_id, _, commitment_id = tag
        state = self.tasks.get(task_id)
        check = state.checks.pop(commitment_id, None) if state else None
        if check is None:
            return []
        if not done.ok:
            return [Emit("job-failed", {"task_id": task_id, "kind": jobs.VERIFY, "error": done.error[:300]})]
        result: jobs.VerifyResult = done.result
        if result.passed:
            state.passed += 1
        else:
            state.failed += 1
        return checking.publish_verdict(self.ctx, now, check, result)

    def on_timer(self, now, name) -> list:
        _, task_id, what = name.split(":")
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if what == "blobs":
            return checking.retry_blobs(self.ctx, self, now, state.checks.values(), name)
        return state.policy.fetch_latest(self.ctx, self, now) + self._start_ready(now, state)

    def snapshot(self) -> dict:
        return {task_id: {"latest_version": s.policy.latest, "held_versions": sorted(s.policy.held),
                          "checking": len(s.checks), "passed": s.passed, "failed": s.failed, "skipped": s.skipped}
                for task_id, s in sorted(self.tasks.items())}
