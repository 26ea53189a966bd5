"""The worker: fetch the newest policy, roll out the prompts assigned to us, commit to the result.

Per task: follow the trainer's weight manifests, fetch the weights blob (from the trainer, or from
any peer whose heartbeat says it holds that version), then run one `generate` job at a time with the
newest policy we hold, as long as it is within the task's async window of the newest version
announced. Prompts are never chosen: batch b of version v is slice b of the hash-assigned prompt
list for (task, our key, v), which anyone can recompute. Each finished batch is stored as a blob
and announced with a signed rollout commitment.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from gossip import topics
from gossip.assignment import assign_prompts
from gossip.messages import RolloutCommitment, WeightManifest
from swarm import jobs, protocols
from swarm.io import Emit, JobFinished, ResponseReceived, StoreBlob
from swarm.roles.base import Role
from swarm.taskparams import TaskParams, task_spec

RETRY_AFTER = 5.0


@dataclass
class WorkerTask:
    spec: jobs.TaskSpec
    params: TaskParams
    async_level: int
    latest: int = -1  # newest version announced
    latest_weights: bytes = b""
    latest_source: str = ""
    held: dict[int, bytes] = field(default_factory=dict)  # version -> weights blob we hold
    fetching: tuple[int, bytes, list[str]] | None = None  # version, weights, peers left to try
    job_version: int | None = None
    batches: dict[int, int] = field(default_factory=dict)  # version -> batches generated
    commitments: int = 0
    completions: int = 0
    failures: int = 0
    last_reward: float | None = None


class WorkerRole(Role):
    name = "worker"

    def __init__(self, core) -> None:
        self.core = core
        self.tasks: dict[str, WorkerTask] = {}

    def on_task(self, now, known) -> list:
        task = known.task
        self.tasks[task.task_id] = WorkerTask(task_spec(task), TaskParams.of(task), task.async_level)
        return []

    # ---- policy versions

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        state = self.tasks.get(getattr(msg, "task_id", ""))
        if state is None or not isinstance(msg, WeightManifest) or msg.version <= state.latest:
            return []
        state.latest, state.latest_weights, state.latest_source = msg.version, msg.root, signer
        self._forget_old(state)
        return self._fetch_latest(now, state)

    def _forget_old(self, state: WorkerTask) -> None:
        for version in sorted(state.held):
            if version < state.latest - state.async_level - 1:
                del state.held[version]
                state.batches.pop(version, None)

    def _fetch_latest(self, now: float, state: WorkerTask) -> list:
        if state.latest in state.held or (state.fetching and state.fetching[0] >= state.latest):
            return []
        holders = [p for p in self.core.membership.alive_peers()
                   if self.core.membership.peers[p].versions.get(state.spec.task_id, -1) >= state.latest
                   and self.core.membership.peers[p].connected and p != state.latest_source]
        candidates = [state.latest_source] + self.core.rng.sample(holders, len(holders))
        state.fetching = (state.latest, state.latest_weights, candidates)
        return self._try_next_holder(now, state)

    def _try_next_holder(self, now: float, state: WorkerTask) -> list:
        version, weights, candidates = state.fetching
        if not candidates:
            state.fetching = None
            self.core.set_timer(f"worker:{state.spec.task_id}:refetch", now + RETRY_AFTER)
            return [Emit("weights-fetch-failed", {"task_id": state.spec.task_id, "version": version})]
        peer = candidates.pop(0)
        return [self.core.new_request(now, self, ("weights", state.spec.task_id, version), peer,
                                      protocols.BLOB, weights, timeout=60.0)]

    def on_response(self, now, tag, response: ResponseReceived) -> list:
        _, task_id, version = tag
        state = self.tasks.get(task_id)
        if state is None or state.fetching is None or state.fetching[0] != version:
            return []
        weights = state.fetching[1]
        if response.error is not None or hashlib.blake2b(response.data, digest_size=32).digest() != weights:
            reason = response.error or "hash mismatch"
            return [Emit("weights-fetch-retry", {"task_id": task_id, "peer": response.peer, "reason": reason[:80]})] \
                + self._try_next_holder(now, state)
        state.fetching = None
        state.held[version] = weights
        self.core.versions[task_id] = max(state.held)
        effects = [StoreBlob(weights, response.data),
                   Emit("version-installed", {"task_id": task_id, "version": version})]
        return effects + self._fetch_latest(now, state) + self._maybe_generate(now, state)

    # ---- generation

    def _maybe_generate(self, now: float, state: WorkerTask) -> list:
        if state.job_version is not None or not state.held:
            return []
        version = max(state.held)
        if version < state.latest - state.async_level:
            return []  # too stale to be trained on: wait for the fetch
        batch = state.batches.get(version, 0)
        if batch >= state.params.max_batches_per_version:
            return []
        count = state.params.prompts_per_commit
        indices = assign_prompts(state.spec.task_id, self.core.identity.public_key, version, (batch + 1) * count,
                                 state.params.n_prompts)[batch * count:]
        state.batches[version] = batch + 1
        state.job_version = version
        payload = jobs.GenerateJob(task=state.spec, version=version, weights=state.held[version],
                                   prompt_indices=tuple(indices), samples_per_prompt=state.params.group_size,
                                   worker_key=self.core.identity.public_key)
        return [self.core.new_job(self, (state.spec.task_id, version, tuple(indices)), jobs.GENERATE, payload)]

    def on_job_finished(self, now, tag, done: JobFinished) -> list:
        task_id, version, indices = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        state.job_version = None
        if not done.ok:
            state.failures += 1
            self.core.set_timer(f"worker:{task_id}:retry", now + RETRY_AFTER)
            return [Emit("job-failed", {"task_id": task_id, "kind": jobs.GENERATE, "error": done.error[:200]})]
        result: jobs.GenerateResult = done.result
        commitment = RolloutCommitment(
            task_id=task_id, policy_version=version, created_at=now, blob_hash=result.blob, blob_size=result.size,
            prompt_indices=indices, samples_per_prompt=state.params.group_size, num_tokens=result.num_tokens,
            mean_reward=result.mean_reward)
        state.commitments += 1
        state.completions += len(indices) * state.params.group_size
        state.last_reward = result.mean_reward
        effects = self.core.publish(now, topics.task_topic(task_id, "rollouts"), commitment)
        effects.append(Emit("rollouts-committed", {"task_id": task_id, "version": version,
                                                   "reward": round(result.mean_reward, 4)}))
        return effects + self._maybe_generate(now, state)

    def on_timer(self, now, name) -> list:
        _, task_id, what = name.split(":")
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if what == "refetch":
            return self._fetch_latest(now, state)
        return self._maybe_generate(now, state)

    def snapshot(self) -> dict:
        return {task_id: {"latest_version": s.latest, "held_versions": sorted(s.held),
                          "generating": s.job_version is not None, "commitments": s.commitments,
                          "completions": s.completions, "failures": s.failures, "last_reward": s.last_reward}
                for task_id, s in sorted(self.tasks.items())}
