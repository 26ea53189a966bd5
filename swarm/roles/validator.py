"""The validator: check other workers' rollouts and gossip signed verdicts with evidence.

It follows the policy like a worker does (it needs the exact version a commitment claims). Without a
check quorum it chooses which commitments to check: all of them, or a fraction (`validate_fraction`)
picked by the hash of its own signature over the commitment id. A worker cannot predict that choice
(it would need the validator's secret key), yet anyone can confirm it afterwards from the signature.
With the task's `check_quorum` it checks what the active trainer asks of it instead (the trainer
spreads the checks: swarm/roles/quorum.py). Verdicts from a key the task names as a validator are
what other peers act on.
"""

from __future__ import annotations

from dataclasses import dataclass

from gossip.messages import RolloutCommitment, WeightManifest
from swarm.context import RoleContext
from swarm.io import JobFinished, Respond, ResponseReceived
from swarm.roles import quorum, refusal
from swarm.roles.base import Role
from swarm.roles.checking import Check, CheckQueue
from swarm.roles.follower import PolicyFollower
from swarm.taskparams import TaskParams, task_spec

MAX_CHECKS = 256


@dataclass
class ValidatorTask:
    policy: PolicyFollower
    params: TaskParams
    queue: CheckQueue


class ValidatorRole(Role):
    name = "validator"

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.tasks: dict[str, ValidatorTask] = {}

    def on_task(self, now, known) -> list:
        task = known.task
        policy = PolicyFollower(task.task_id, task.async_level + 1)
        params = TaskParams.of(task)
        checks = CheckQueue(self.ctx, self, task_spec(task), policy, MAX_CHECKS)
        self.tasks[task.task_id] = ValidatorTask(policy, params, checks)
        return refusal.too_old(self.ctx, checks, self.name, params)

    def chooses(self, state: ValidatorTask, commitment_id: bytes) -> bool:
        return quorum.draw(self.ctx, b"validate-choice", commitment_id) < state.params.validate_fraction

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        state = self.tasks.get(getattr(msg, "task_id", ""))
        if state is None:
            return []
        if isinstance(msg, WeightManifest):
            return state.policy.on_manifest(self.ctx, self, now, msg, signer)
        if not isinstance(msg, RolloutCommitment) or signer == self.ctx.peer_id or state.params.check_quorum:
            return []  # with a quorum, the trainer asks (on_check_request)
        if not self.chooses(state, signed.msg_id):
            state.queue.skipped += 1
            return []
        return state.queue.add(now, Check(msg, signed.msg_id, signer, signed.signer))

    def on_check_request(self, now: float, request_id: int, signed, worker: str) -> list:
        state = self.tasks.get(signed.message.task_id)
        return state.queue.asked(now, request_id, signed, worker) if state else [Respond(request_id, error="not-following")]

    def on_response(self, now, tag, response: ResponseReceived) -> list:
        _, task_id, key = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        return state.queue.on_blob(now, key, response)  # the rollout blob of a batch it was asked to check

    def on_job_finished(self, now, tag, done: JobFinished) -> list:
        task_id, _, commitment_id = tag
        state = self.tasks.get(task_id)
        return state.queue.finished(now, commitment_id, done) if state else []

    def forget_task(self, now: float, task_id: str) -> list:
        state = self.tasks.pop(task_id, None)
        return state.policy.forget() if state is not None else []

    def on_timer(self, now, name) -> list:
        _, task_id, what = name.split(":")
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if what == "blobs":
            return state.queue.retry(now)
        return state.policy.fetch_latest(self.ctx, self, now) + state.queue.start_ready(now)

    def on_connected(self, now, peer) -> list:
        return [e for state in self.tasks.values() for e in state.queue.connected(now, peer)]

    def snapshot(self) -> dict:
        return {task_id: {"latest_version": s.policy.latest, "held_versions": sorted(s.policy.held),
                          **s.queue.snapshot()}
                for task_id, s in sorted(self.tasks.items())}
