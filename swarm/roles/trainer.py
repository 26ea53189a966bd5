"""The trainer: turn accepted rollouts into new policy versions and announce them.

Only a peer whose key the task names as a trainer runs this. It starts from version 0 (an `init`
job builds or resumes the base model), then collects rollout commitments within the async window
(`async_level` versions old at most; older ones are refused as too-old), fetches their blobs from
the workers, and once `prompts_per_step` prompts are ready runs one `train` job. Each new version is
announced with a signed weight manifest, re-announced periodically for late joiners. Every
commitment trained on is recorded (`rollout-trained`), which is what audits check.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field

from gossip import errors, topics
from gossip.errors import Rejected
from gossip.messages import RolloutCommitment, WeightManifest
from swarm import jobs, protocols
from swarm.io import Emit, JobFinished, ResponseReceived, StoreBlob
from swarm.roles.base import Role
from swarm.rng import stable_seed
from swarm.taskparams import TaskParams, task_spec

MAX_PENDING = 256
RETRY_AFTER = 5.0


@dataclass
class Pending:
    commitment: RolloutCommitment
    commitment_id: bytes
    worker: str
    ready: bool = False


@dataclass
class TrainerTask:
    spec: jobs.TaskSpec
    params: TaskParams
    async_level: int
    version: int = -1
    weights: bytes = b""
    weights_size: int = 0
    busy: bool = False  # an init or train job is running
    pending: dict[bytes, Pending] = field(default_factory=dict)  # by commitment id, arrival order
    in_step: list[Pending] = field(default_factory=list)
    trained_commitments: int = 0
    completions: int = 0
    dropped: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=512))


class TrainerRole(Role):
    name = "trainer"

    def __init__(self, core) -> None:
        self.core = core
        self.tasks: dict[str, TrainerTask] = {}

    def on_task(self, now, known) -> list:
        task = known.task
        if self.core.identity.public_key not in task.trainer_keys:
            return []
        state = self.tasks[task.task_id] = TrainerTask(task_spec(task), TaskParams.of(task), task.async_level)
        state.busy = True
        payload = jobs.InitJob(task=state.spec, seed=stable_seed("base-model", task.task_id) & 0x7FFFFFFF)
        return [self.core.new_job(self, (task.task_id, jobs.INIT, ()), jobs.INIT, payload),
                Emit("trainer-starting", {"task_id": task.task_id, "model": task.model})]

    # ---- rollouts in

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        if not isinstance(msg, RolloutCommitment):
            return []
        state = self.tasks.get(msg.task_id)
        if state is None or state.version < 0:
            return []
        if msg.policy_version > state.version:
            raise Rejected(errors.OUT_OF_WINDOW, f"rollouts for version {msg.policy_version}, newest is {state.version}")
        if msg.policy_version < state.version - state.async_level:
            raise Rejected(errors.TOO_OLD, f"rollouts for version {msg.policy_version}, more than "
                                           f"{state.async_level} behind {state.version}")
        if msg.samples_per_prompt != state.params.group_size:
            raise Rejected(errors.SCHEMA, f"{msg.samples_per_prompt} samples per prompt, task says "
                                          f"{state.params.group_size}")
        if len(state.pending) >= MAX_PENDING:
            raise Rejected(errors.CAPACITY, "too many rollout batches waiting")
        state.pending[signed.msg_id] = Pending(msg, signed.msg_id, signer)
        return [self.core.new_request(now, self, ("rollouts", msg.task_id, signed.msg_id), signer, protocols.BLOB,
                                      msg.blob_hash, timeout=30.0)]

    def on_response(self, now, tag, response: ResponseReceived) -> list:
        _, task_id, commitment_id = tag
        state = self.tasks.get(task_id)
        pending = state.pending.get(commitment_id) if state else None
        if pending is None:
            return []
        c = pending.commitment
        if (response.error is not None or len(response.data) != c.blob_size
                or hashlib.blake2b(response.data, digest_size=32).digest() != c.blob_hash):
            del state.pending[commitment_id]
            state.dropped += 1
            return [Emit("rollout-dropped", {"task_id": task_id, "worker": pending.worker,
                                             "reason": response.error or "blob does not match its commitment"})]
        pending.ready = True
        return [StoreBlob(c.blob_hash, response.data)] + self._maybe_train(now, state)

    # ---- training

    def _maybe_train(self, now: float, state: TrainerTask) -> list:
        if state.busy or state.version < 0:
            return []
        effects = self._drop_too_old(state)
        ready = [p for p in state.pending.values() if p.ready]
        if sum(len(p.commitment.prompt_indices) for p in ready) < state.params.prompts_per_step:
            return effects
        step, prompts = [], 0
        for p in ready:
            step.append(p)
            prompts += len(p.commitment.prompt_indices)
            if prompts >= state.params.prompts_per_step:
                break
        for p in step:
            del state.pending[p.commitment_id]
        state.in_step, state.busy = step, True
        payload = jobs.TrainJob(task=state.spec, version=state.version, weights=state.weights,
                                rollouts=tuple(p.commitment.blob_hash for p in step))
        return effects + [self.core.new_job(self, (state.spec.task_id, jobs.TRAIN, ()), jobs.TRAIN, payload)]

    def _drop_too_old(self, state: TrainerTask) -> list:
        effects = []
        for cid, p in list(state.pending.items()):
            if p.commitment.policy_version < state.version - state.async_level:
                del state.pending[cid]
                state.dropped += 1
                effects.append(Emit("rollout-dropped", {"task_id": state.spec.task_id, "worker": p.worker,
                                                        "reason": errors.TOO_OLD}))
        return effects

    def on_job_finished(self, now, tag, done: JobFinished) -> list:
        task_id, kind, _ = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        state.busy = False
        if not done.ok:
            if kind == jobs.TRAIN:  # the rollouts were not used: they may still be trained on
                for p in state.in_step:
                    state.pending[p.commitment_id] = p
            state.in_step = []
            self.core.set_timer(f"trainer:{task_id}:{kind}", now + RETRY_AFTER)
            return [Emit("job-failed", {"task_id": task_id, "kind": kind, "error": done.error[:300]})]
        result: jobs.VersionResult = done.result
        state.version, state.weights, state.weights_size = result.version, result.weights, result.size
        self.core.versions[task_id] = result.version
        effects = []
        for p in state.in_step:
            state.trained_commitments += 1
            state.completions += len(p.commitment.prompt_indices) * p.commitment.samples_per_prompt
            effects.append(Emit("rollout-trained", {"task_id": task_id, "commitment_id": p.commitment_id.hex(),
                                                    "worker": p.worker, "policy_version": p.commitment.policy_version,
                                                    "trained_into": result.version}))
        record = {"task_id": task_id, "version": result.version, "completions": state.completions,
                  **{k: round(float(v), 5) for k, v in dict(result.stats).items()}}
        state.history.append(record)
        state.in_step = []
        effects.append(Emit("version-published", record))
        effects += self._announce(now, state)
        return effects + self._maybe_train(now, state)

    def _announce(self, now: float, state: TrainerTask) -> list:
        manifest = WeightManifest(
            task_id=state.spec.task_id, version=state.version, parent_version=-1, parent_root=b"", encoding="full",
            dtype="safetensors", root=state.weights, shard_size=max(1, state.weights_size),
            raw_size=state.weights_size, compressed_size=state.weights_size, shard_hashes=(state.weights,),
            tensors=(), created_at=now)
        self.core.set_timer(f"trainer:{state.spec.task_id}:announce", now + state.params.republish_interval)
        return self.core.publish(now, topics.task_topic(state.spec.task_id, "weights"), manifest)

    def on_timer(self, now, name) -> list:
        _, task_id, what = name.split(":")
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if what == "announce" and state.version >= 0:
            return self._announce(now, state)
        if what == jobs.INIT and state.version < 0 and not state.busy:
            state.busy = True
            payload = jobs.InitJob(task=state.spec, seed=stable_seed("base-model", task_id) & 0x7FFFFFFF)
            return [self.core.new_job(self, (task_id, jobs.INIT, ()), jobs.INIT, payload)]
        return self._maybe_train(now, state)

    def snapshot(self) -> dict:
        return {task_id: {"version": s.version, "training": s.busy,
                          "pending": sum(1 for p in s.pending.values() if p.ready),
                          "fetching": sum(1 for p in s.pending.values() if not p.ready),
                          "trained_commitments": s.trained_commitments, "completions": s.completions,
                          "dropped": s.dropped, "history": list(s.history)[-64:]}
                for task_id, s in sorted(self.tasks.items())}
