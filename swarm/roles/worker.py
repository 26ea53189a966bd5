"""The worker: fetch the newest policy, roll out the prompts assigned to us, commit to the result.

Per task: follow the trainer's weight manifests, fetch the weights blob (from the trainer, or from
any peer whose heartbeat says it holds that version), then run one `generate` job at a time with the
newest policy we hold, as long as it is within the task's async window of the newest version
announced. Prompts are never chosen: batch b of version v is slice b of the hash-assigned prompt
list for (task, our key, v), which anyone can recompute. Each finished batch is stored as a blob
and announced with a signed rollout commitment. The batch counter is in memory, so after a restart
the generate job itself skips slices it generated before (`repeated`): two commitments for one
slice would get us banned as a replayer.

With the task's `peer_checks` (and a `check_quorum`), a worker also checks the batches the active
trainer asks it to (swarm/roles/quorum.py), in the same job process as its generation.

How much to generate: a version's worth is what the trainer's next step can take (`_next_step`:
`prompts_per_step`, or when steps grow `max_prompts_per_step`), split among the workers we know of;
what a worker generates beyond that would be dropped unread, so it waits for the next version
instead (`_share`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gossip import topics
from gossip.assignment import assign_prompts
from gossip.messages import RolloutCommitment, WeightManifest
from swarm import jobs
from swarm.context import RoleContext
from swarm.io import Emit, JobFinished, Respond, ResponseReceived
from swarm.roles import refusal
from swarm.roles.base import Role
from swarm.roles.checking import CheckQueue
from swarm.roles.follower import PolicyFollower
from swarm.taskparams import TaskParams, task_spec

RETRY_AFTER = 5.0
STALL_AFTER = 20.0  # at its share, a worker waits this long for a new version before generating more
STALL_PERIODS = 2.0  # ... or this many of the trainer's recent version periods, if longer
MAX_ASKED_CHECKS = 8  # a trainer's check requests a worker holds at once; more are answered `busy`


@dataclass
class WorkerTask:
    spec: jobs.TaskSpec
    params: TaskParams
    async_level: int
    policy: PolicyFollower
    job_version: int | None = None
    job_term: int = 0  # the chain's term of the version being generated with (the commitment names it)
    batches: dict[int, int] = field(default_factory=dict)  # version -> batches generated
    stalls: dict[int, int] = field(default_factory=dict)  # version -> its stalls (each a round of batches past the share)
    stalled: int | None = None  # the version we are waiting past, once its stall timer is set
    first_version: int | None = None  # the first version we generated for (its share primes the pipeline)
    commitments: int = 0
    completions: int = 0
    failures: int = 0
    last_reward: float | None = None
    checks: CheckQueue | None = None  # what the trainer asks us to check (peer_checks)
    version_at: dict[int, float] = field(default_factory=dict)  # the newest versions -> when first announced
    refused: str = ""  # why this peer cannot work on the task (a `refused: ...` job error), once it said so


class WorkerRole(Role):
    name = "worker"

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.tasks: dict[str, WorkerTask] = {}

    def on_task(self, now, known) -> list:
        task = known.task
        policy = PolicyFollower(task.task_id, keep=task.async_level + 1)
        state = self.tasks[task.task_id] = WorkerTask(task_spec(task), TaskParams.of(task), task.async_level, policy)
        if state.params.peer_checks and state.params.check_quorum:
            state.checks = CheckQueue(self.ctx, self, state.spec, policy, MAX_ASKED_CHECKS)
        effects = refusal.too_old(self.ctx, state, self.name, state.params)
        if effects and state.checks is not None:
            state.checks.refused = state.refused
        return effects

    def on_check_request(self, now: float, request_id: int, signed, worker: str) -> list:
        state = self.tasks.get(signed.message.task_id)
        if state is None or state.checks is None:
            return [Respond(request_id, error="not-a-checker")]
        return state.checks.asked(now, request_id, signed, worker)

    # ---- policy versions

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        state = self.tasks.get(getattr(msg, "task_id", ""))
        if state is None or not isinstance(msg, WeightManifest):
            return []
        if msg.version > state.policy.latest and msg.version not in state.version_at:
            state.version_at[msg.version] = now
            for old in sorted(state.version_at)[:-3]:
                del state.version_at[old]
        effects = state.policy.on_manifest(self.ctx, self, now, msg, signer)
        for version in [v for v in state.batches if v not in state.policy.held and v < state.policy.latest]:
            del state.batches[version]
            state.stalls.pop(version, None)
        return effects

    def on_response(self, now, tag, response: ResponseReceived) -> list:
        kind, task_id, key = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if kind == "rollouts" and state.checks:  # a blob we were asked to check (weights come as shards)
            return state.checks.on_blob(now, key, response)
        return []

    # ---- generation

    def _maybe_generate(self, now: float, state: WorkerTask) -> list:
        version = state.policy.newest_held()
        if state.job_version is not None or version is None or state.refused:
            return []
        if version < state.policy.latest - state.async_level:
            return []  # too stale to be trained on: wait for the fetch
        batch = state.batches.get(version, 0)
        if state.first_version is None:
            state.first_version = version
        if batch >= min(state.params.max_batches_per_version, self._share(state, version)):
            if state.stalled != version:  # the trainer may still need more (failed checks, a worker gone)
                state.stalled = version
                self.ctx.timer(f"worker:{state.spec.task_id}:stall", now + self._stall_after(state, version))
            return []
        count = state.params.prompts_per_commit
        indices = assign_prompts(state.spec.task_id, self.ctx.public_key, version, (batch + 1) * count,
                                 state.params.n_prompts)[batch * count:]
        state.batches[version] = batch + 1
        state.job_version, state.job_term = version, state.policy.term
        payload = jobs.GenerateJob(task=state.spec, version=version, weights=state.policy.held[version],
                                   prompt_indices=tuple(indices), samples_per_prompt=state.params.group_size,
                                   worker_key=self.ctx.public_key)
        return [self.ctx.job(self, (state.spec.task_id, version, tuple(indices)), jobs.GENERATE, payload)]

    def _share(self, state: WorkerTask, version: int) -> int:
        """Batches worth generating for `version`. The trainer's next step takes `_next_step` prompts, and the
        workers we know of (`RoleContext.workers_of`: alive, vouched for or committing to the task, and
        newcomers up to as many; and us, ranked by peer id) split one step's worth of each version. More would
        go stale unread, and on a shared machine generating it takes CPU from the trainer (bench/learning.py
        measured steps several times slower). With fixed steps, the first version we serve gets async_level + 1
        shares: its backlog primes the async window (the trainer steps on older rollouts while we generate for
        the newest version), and no step after version + async_level may train on it, so more is waste (an
        uncapped first version had 36 of its batches dropped at the start of a bench run); growing steps take
        whatever is ready, so they need no priming. When the step's batches do not divide evenly, the extra ones
        go to other workers from one version to the next (the rank rotates with the version), so no worker is
        always the one left idle or doing two. Each stall of the version (`_stall_after`: failed checks, a
        worker gone) adds one round of a minimum step's batches, one each to the workers next in rank after
        those that had the version's share: the trainer needs that much to step again, and one batch from every
        worker (what each did alone before) made 64 workers generate 64 extra batches of the first version while
        its first step trained, and 54 of them aged out unread."""
        me = self.ctx.peer_id
        workers = sorted({me} | set(self.ctx.workers_of(state.spec.task_id, version)))
        n, rank = len(workers), (workers.index(me) - version) % len(workers)
        commits = -(-self._next_step(state) // state.params.prompts_per_commit)
        base, rest = divmod(commits, n)
        share = base + (1 if rank < rest else 0)
        if version == state.first_version and state.params.max_prompts_per_step is None:
            share = min(state.params.max_batches_per_version, (state.async_level + 1) * max(share, 1))
        round_size = min(n, -(-state.params.prompts_per_step // state.params.prompts_per_commit))
        return share + sum(1 for k in range(state.stalls.get(version, 0)) if (rank - commits - k * round_size) % n < round_size)

    @staticmethod
    def _next_step(state: WorkerTask) -> int:
        """Prompts a version's step may take. With fixed steps, `prompts_per_step`. When steps grow with
        what is ready, `step_limit`: each version gets a full step's worth, so the step after it can be
        full, and no more, so what the swarm generates per version never outruns what one step trains.
        Sizing it from the last step (and a commit more, to grow) kept steps at their minimum: the
        trainer steps as soon as `prompts_per_step` is checked, so the last step was always the
        smallest, and 16 workers generated 3 batches a version between them (versions came every
        second, and a third of those batches aged out before they were checked)."""
        params = state.params
        return params.prompts_per_step if params.max_prompts_per_step is None else params.step_limit

    @staticmethod
    def _stall_after(state: WorkerTask, version: int) -> float:
        """How long to wait at our share before one more batch: STALL_AFTER. When steps grow with what
        is ready, at least STALL_PERIODS of the trainer's recent version period (a busy trainer's big
        steps are not a stall, and extra batches would only be dropped), and each further extra for the
        same version waits that long again once more (before the period is known, the first versions'
        extras were what a busy trainer dropped)."""
        if state.params.max_prompts_per_step is None:  # fixed steps: a fixed wait
            return STALL_AFTER
        times = sorted(state.version_at.values())
        period = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        return max(STALL_AFTER, STALL_PERIODS * period) * (1 + state.stalls.get(version, 0))

    def on_job_finished(self, now, tag, done: JobFinished) -> list:
        task_id, version, indices = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if refusal.refuses(done):  # no retry (it would be refused again), no generating, no checking
            if version != jobs.VERIFY:
                state.job_version = None
            if state.checks:
                state.checks.checks.clear()
                state.checks.refused = state.checks.refused or done.error[:refusal.MAX_REASON]
            return refusal.refuse(state, self.name, done.error)
        if version == jobs.VERIFY:  # a check we were asked for (tag: task, VERIFY, commitment id)
            return state.checks.finished(now, indices, done) if state.checks else []
        state.job_version = None
        if not done.ok:
            state.failures += 1
            self.ctx.timer(f"worker:{task_id}:retry", now + RETRY_AFTER)
            return [Emit("job-failed", {"task_id": task_id, "kind": jobs.GENERATE, "error": done.error[:200]})]
        result: jobs.GenerateResult = done.result
        if result.repeated:  # generated before we restarted, maybe committed: never commit a slice twice
            return [Emit("rollouts-skipped", {"task_id": task_id, "version": version,
                                              "reason": "generated before a restart"})] + self._maybe_generate(now, state)
        indices = result.prompt_indices if result.prompt_indices is not None else indices
        commitment = RolloutCommitment(
            task_id=task_id, policy_version=version, created_at=now, blob_hash=result.blob, blob_size=result.size,
            prompt_indices=indices, samples_per_prompt=state.params.group_size, num_tokens=result.num_tokens,
            mean_reward=result.mean_reward, policy_term=state.job_term)
        state.commitments += 1
        state.completions += len(indices) * state.params.group_size
        state.last_reward = result.mean_reward
        effects = self.ctx.publish(now, topics.task_topic(task_id, "rollouts"), commitment)
        effects.append(Emit("rollouts-committed", {"task_id": task_id, "version": version,
                                                   "reward": round(result.mean_reward, 4)}))
        return effects + self._maybe_generate(now, state)

    def forget_task(self, now: float, task_id: str) -> list:
        state = self.tasks.pop(task_id, None)
        return state.policy.forget() if state is not None else []

    def on_timer(self, now, name) -> list:
        _, task_id, what = name.split(":")
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if what == "refetch":
            return state.policy.fetch_latest(self.ctx, self, now)
        if what == "blobs":
            return state.checks.retry(now) if state.checks else []
        effects = state.checks.start_ready(now) if what == "installed" and state.checks else []
        if what == "stall":
            version, state.stalled = state.stalled, None
            if version is not None and version == state.policy.newest_held() and state.job_version is None:
                state.stalls[version] = state.stalls.get(version, 0) + 1
        return effects + self._maybe_generate(now, state)

    def on_connected(self, now, peer) -> list:
        return [e for state in self.tasks.values() if state.checks for e in state.checks.connected(now, peer)]

    def snapshot(self) -> dict:
        return {task_id: {"latest_version": s.policy.latest, "held_versions": sorted(s.policy.held),
                          "generating": s.job_version is not None, "commitments": s.commitments,
                          "completions": s.completions, "failures": s.failures, "last_reward": s.last_reward,
                          "refused": s.refused or None, **({"checks": s.checks.snapshot()} if s.checks else {})}
                for task_id, s in sorted(self.tasks.items())}
