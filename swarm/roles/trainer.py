"""The trainer: turn accepted rollouts into new policy versions and announce them.

Only a peer whose key the task names as a trainer runs this. It starts from version 0 (an `init`
job builds or resumes the base model), then collects rollout commitments within the async window
(`async_level` versions old at most; older ones are refused as too-old), fetches their blobs from
the workers and has each batch checked: by itself (a `verify` job against its own copy of that
version), or, with the task's `check_quorum`, by checkers it asks, spot-checking a share itself
(swarm/roles/quorum.py). Once `prompts_per_step` checked prompts are ready it runs one `train` job on
all of them, up to `max_prompts_per_step`; steps that grow first wait for a batch of the policy before
the newest (swarm/roles/steps.py). A batch whose worker is banned meanwhile (a failed check elsewhere, a
replay seen later) is dropped before the next step. A trusted validator's verdict that the trainer's own
check contradicts costs that validator its trust. Each new version is announced with a signed weight
manifest, re-announced for late joiners; every commitment trained on is recorded (`rollout-trained`).

A task may name several trainers: rank 0 starts active, the others are standbys that follow its
chain and take over when it falls silent (swarm/roles/standby.py, the fork choice in
swarm/forkchoice.py). The active trainer trains only on rollouts of versions on its own chain: a
commitment names its version's term, and one that is not this chain's is refused (`other-chain`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from gossip import errors, topics
from gossip.errors import Rejected
from gossip.messages import RolloutCommitment, TensorEntry, TrainerCheckpoint, Verdict, WeightManifest
from swarm import jobs
from swarm.context import RoleContext
from swarm.io import Emit, JobFinished, ResponseReceived
from swarm.roles import checking, quorum, refusal, standby, steps, summary, trainerstate, welcome
from swarm.roles.base import Role
from swarm.roles.checking import Check
from swarm.roles.follower import PolicyFollower
from swarm.roles.trainerstate import Checkpoints
from swarm.rng import stable_seed
from swarm.taskparams import TaskParams, task_spec

MAX_PENDING = 256
RETRY_AFTER = 5.0


@dataclass
class TrainerTask:
    spec: jobs.TaskSpec
    params: TaskParams
    async_level: int
    version: int = -1
    weights: bytes = b""
    weights_size: int = 0
    weights_by_version: dict[int, bytes] = field(default_factory=dict)  # what verify jobs check against
    manifests: dict[int, WeightManifest] = field(default_factory=dict)  # the chain since the last full version
    busy: bool = False  # an init or train job is running
    pending: dict[bytes, Check] = field(default_factory=dict)  # by commitment id, arrival order
    in_step: list[Check] = field(default_factory=list)
    opinions: quorum.Opinions = field(default_factory=quorum.Opinions)  # checkers' verdicts and our own checks
    validators: tuple[bytes, ...] = ()  # the task's trusted validator keys (checkers a quorum may ask)
    worked: dict[str, int] = field(default_factory=dict)  # worker -> its batches trained on (proven work)
    own_checks: int = 0  # verify jobs run by this trainer
    version_at: float = 0.0  # when the newest version was published
    announced_at: float = float("-inf")  # when its manifest was last (re-)announced (welcome.py)
    by_quorum: int = 0  # batches trained on the passes of checkers alone
    rejected: int = 0
    checked: dict[str, int] = field(default_factory=dict)  # worker -> verify jobs started for its batches
    trained_commitments: int = 0
    completions: int = 0
    dropped: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=512))
    rank: int = 0  # index in the task's trainer_keys
    term: int = 0  # the term of the chain this trainer publishes (or last published)
    takeovers: int = 0  # times this peer took the task over from a silent trainer (standby.py)
    active: bool = True  # publishing; False: a standby following the head chain
    policy: PolicyFollower | None = None  # a standby's follower
    chain_terms: dict[int, int] = field(default_factory=dict)  # version -> term, for the versions we train from
    heard: deque = field(default_factory=lambda: deque(maxlen=MAX_PENDING))  # a standby's recent commitments
    resumed: bool = False  # a returning trainer that heard no chain and resumed its own (standby.py)
    states: Checkpoints | None = None  # trainer checkpoints published or fetched (trainerstate.py)
    resume_state: TrainerCheckpoint | None = None  # handed to the first train job after a takeover
    refused: str = ""  # why this peer cannot train the task (a `refused: ...` job error): it stops there
    recent: summary.Recent = field(default_factory=summary.Recent)  # what the task summary says (summary.py)


class TrainerRole(Role):
    name = "trainer"

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.tasks: dict[str, TrainerTask] = {}
        self.keys: dict[str, tuple[bytes, ...]] = {}  # task -> its trainer keys (the ranks)

    def on_task(self, now, known) -> list:
        task = known.task
        if self.ctx.public_key not in task.trainer_keys:
            return []
        rank = task.trainer_keys.index(self.ctx.public_key)
        state = self.tasks[task.task_id] = TrainerTask(task_spec(task), TaskParams.of(task), task.async_level,
                                                       rank=rank, active=rank == 0, validators=task.validator_keys)
        state.policy = standby.new_follower(state)
        state.states = Checkpoints(self.ctx, task.task_id, state.params.state_every)
        state.opinions = quorum.Opinions(known=lambda cid, t=task.task_id: self.ctx.knows_commitment(t, cid))
        self.keys[task.task_id] = task.trainer_keys
        too_old = refusal.too_old(self.ctx, state, self.name, state.params)
        if too_old:  # no init job, no takeover: the task's other trainers will
            refusal.stop_trainer(state)
            return too_old
        if rank > 0:  # a standby: follows the chain until it must take over
            self.ctx.timer(standby.timer_name(task.task_id), now + state.params.takeover_s)
            return [Emit("trainer-standby", {"task_id": task.task_id, "rank": rank,
                                             "takeover_after": state.params.takeover_s})]
        state.busy = True
        payload = jobs.InitJob(task=state.spec, seed=stable_seed("base-model", task.task_id) & 0x7FFFFFFF)
        return [self.ctx.job(self, (task.task_id, jobs.INIT, ()), jobs.INIT, payload),
                Emit("trainer-starting", {"task_id": task.task_id, "model": task.model,
                                          "takeover_after": state.params.takeover_s,
                                          **({"check_quorum": state.params.check_quorum,
                                              "spot_check": state.params.spot_check}
                                             if state.params.check_quorum else {})})]

    # ---- rollouts in

    def on_message(self, now, signed, signer) -> list:
        msg = signed.message
        if isinstance(msg, Verdict):
            return quorum.on_verdict(self.ctx, self, now, msg, signed.signer, self.ctx.signer(signed.signer))
        state = self.tasks.get(getattr(msg, "task_id", ""))
        if isinstance(msg, TrainerCheckpoint) and state is not None:
            return [] if state.active else trainerstate.heard(self.ctx, now, state.states, msg, signer)
        if isinstance(msg, WeightManifest) and state is not None:
            effects = []
            if standby.beaten_by(state, msg.term, msg.rank):
                effects = standby.step_down(self.ctx, self, now, state, msg.term, msg.rank)
            return effects + ([] if state.active else state.policy.on_manifest(self.ctx, self, now, msg, signer))
        if not isinstance(msg, RolloutCommitment) or state is None or state.refused:
            return []
        if not state.active:  # remembered (and with standby_checks, checked) to train on if we take over
            return standby.on_commitment(self.ctx, self, now, state, signed, signer)
        if state.version < 0:
            return []
        if msg.policy_version > state.version:
            raise Rejected(errors.OUT_OF_WINDOW, f"rollouts for version {msg.policy_version}, newest is {state.version}")
        if msg.policy_version < state.version - state.async_level:
            raise Rejected(errors.TOO_OLD, f"rollouts for version {msg.policy_version}, more than "
                                           f"{state.async_level} behind {state.version}")
        if msg.samples_per_prompt != state.params.group_size:
            raise Rejected(errors.SCHEMA, f"{msg.samples_per_prompt} samples per prompt, task says "
                                          f"{state.params.group_size}")
        if msg.policy_version in state.chain_terms and state.chain_terms[msg.policy_version] != msg.policy_term \
                or msg.policy_version not in state.chain_terms and msg.policy_term != state.term:
            raise Rejected(errors.OTHER_CHAIN, f"rollouts for version {msg.policy_version} of term {msg.policy_term},"
                                               f" not on this trainer's chain")
        if len(state.pending) >= MAX_PENDING:
            raise Rejected(errors.CAPACITY, "too many rollout batches waiting")
        quorum.within_share(self.ctx, state, signer)
        check = state.pending[signed.msg_id] = Check(msg, signed.msg_id, signer, signed.signer, wire=signed.wire)
        effects = checking.fetch_blob(self.ctx, self, now, check)
        checking.arm_retry(self.ctx, state.pending.values(), f"trainer:{msg.task_id}:blobs")
        if state.params.check_quorum:
            effects += quorum.start(self.ctx, self, now, state, check)
        return effects

    def on_response(self, now, tag, response: ResponseReceived) -> list:
        task_id, commitment_id = tag[1], tag[2]
        state = self.tasks.get(task_id)
        check = state.pending.get(commitment_id) if state else None
        if check is None:
            return []
        if tag[0] == "check":  # a checker we asked: accepted (the verdict comes by gossip), or not
            if response.error is None:
                return []
            return quorum.refused(self.ctx, self, now, state, check, tag[3], response.error) + \
                quorum.verify_more(self.ctx, self, now, state)
        effects, failure = checking.blob_arrived(check, response, now)
        if failure is not None:
            del state.pending[commitment_id]
            state.dropped += 1
            return [Emit("rollout-dropped", {"task_id": task_id, "worker": check.worker, "reason": failure})]
        if check.retry_at is not None:
            checking.arm_retry(self.ctx, state.pending.values(), f"trainer:{task_id}:blobs")
            return effects
        return effects + quorum.verify_more(self.ctx, self, now, state)

    def _on_verify_finished(self, now: float, state: TrainerTask, commitment_id: bytes, done: JobFinished) -> list:
        check = state.pending.get(commitment_id)
        if check is None:
            return []
        check.verifying = False
        if not done.ok:  # the check itself broke (not the worker's fault): do not train on it
            del state.pending[commitment_id]
            state.dropped += 1
            return [Emit("job-failed", {"task_id": state.spec.task_id, "kind": jobs.VERIFY,
                                        "error": done.error[:300]})] + self.maybe_train(now, state)
        result: jobs.VerifyResult = done.result
        check.result = result
        effects = quorum.ban_liars(self.ctx, self, now, state,
                                   state.opinions.checked(commitment_id, result.passed, result.reason or ""))
        # Published either way: a trainer's verdict settles the commitment for every peer, so a
        # validator that said otherwise is shown wrong everywhere (swarm/trust.py).
        effects += checking.publish_verdict(self.ctx, now, check, result)
        if not result.passed:
            state.rejected += 1
            del state.pending[commitment_id]
        return effects + self.maybe_train(now, state)

    # ---- training

    def maybe_train(self, now: float, state: TrainerTask) -> list:
        return [] if state.refused else self._start_step(now, state) + quorum.verify_more(self.ctx, self, now, state)

    def _start_step(self, now: float, state: TrainerTask) -> list:
        if state.busy or state.version < 0:
            return []
        effects = self._drop_unusable(state)
        step = steps.choose(self.ctx, now, state)
        if not step:
            return effects
        for p in step:
            del state.pending[p.commitment_id]
        state.in_step, state.busy = step, True
        parent = state.manifests.get(state.version)
        pack = state.states.due(state.version, len(self.keys[state.spec.task_id]))
        if pack:
            state.states.packed_at = state.version + 1
        payload = jobs.TrainJob(task=state.spec, version=state.version, weights=state.weights,
                                rollouts=tuple(p.commitment.blob_hash for p in step),
                                parent_root=parent.root if parent else b"", parent_depth=parent.depth if parent else 0,
                                term=state.term, pack_state=pack, state=state.resume_state)
        return effects + [self.ctx.job(self, (state.spec.task_id, jobs.TRAIN, ()), jobs.TRAIN, payload)]

    def _drop_unusable(self, state: TrainerTask) -> list:
        """Before each step: nothing too old, nothing from a peer banned since we accepted it."""
        effects = []
        for cid, p in list(state.pending.items()):
            reason = (errors.TOO_OLD if p.commitment.policy_version < state.version - state.async_level
                      else errors.BANNED if self.ctx.is_banned(p.worker) else None)
            if reason is not None and not p.verifying:
                del state.pending[cid]
                state.dropped += 1
                effects.append(Emit("rollout-dropped", {"task_id": state.spec.task_id, "worker": p.worker,
                                                        "reason": reason}))
        return effects

    def on_job_finished(self, now, tag, done: JobFinished) -> list:
        task_id, kind, extra = tag
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if refusal.refuses(done):  # this peer cannot reproduce the task: no verdict, no step, nothing more
            refusal.stop_trainer(state)
            return refusal.refuse(state, self.name, done.error)
        if kind == jobs.VERIFY:
            return self._on_verify_finished(now, state, extra, done)
        state.busy = False
        if not state.active:  # stepped down meanwhile: this chain is lost
            if done.ok:
                self.ctx.hold_blob(self, done.result.weights)
                return self.ctx.release_blobs(self, [done.result.weights])
            return []
        if not done.ok:
            if kind == jobs.TRAIN:  # the rollouts were not used: they may still be trained on
                for p in state.in_step:
                    state.pending[p.commitment_id] = p
            state.in_step = []
            self.ctx.timer(f"trainer:{task_id}:{kind}", now + RETRY_AFTER)
            return [Emit("job-failed", {"task_id": task_id, "kind": kind, "error": done.error[:300]})]
        result: jobs.VersionResult = done.result
        if kind == jobs.INIT:  # a restarted trainer learns the term it last signed (trainer/trainstate.py)
            state.term = max(state.term, int(dict(result.stats).get("term", 0)))
        if kind == jobs.INIT and result.version > 0 and len(self.keys[task_id]) > 1 and not state.resumed:
            return standby.returning(self.ctx, self, now, state, result.weights)
        try:
            manifest = _manifest(now, state, result)
        except (TypeError, ValueError, KeyError) as exc:  # the job packed nothing usable: do not publish
            for p in state.in_step:
                state.pending[p.commitment_id] = p
            state.in_step = []
            self.ctx.timer(f"trainer:{task_id}:{kind}", now + RETRY_AFTER)
            return [Emit("job-failed", {"task_id": task_id, "kind": kind, "error": f"bad manifest: {exc}"[:300]})]
        state.version, state.weights, state.weights_size = result.version, result.weights, result.size
        state.version_at = now
        state.weights_by_version[result.version] = result.weights
        state.chain_terms[result.version] = state.term
        self.ctx.chain(task_id).own(now, state.term, state.rank, result.version)
        self.ctx.hold_blob(self, result.weights)
        old = [state.weights_by_version.pop(v) for v in sorted(state.weights_by_version)
               if v < result.version - state.async_level]
        for v in [v for v in state.chain_terms if v < result.version - state.async_level]:
            del state.chain_terms[v]
        kept = set(state.weights_by_version.values())
        released = self.ctx.release_blobs(self, [d for d in old if d not in kept])
        self.ctx.trained_version(task_id, result.version)
        # a new checkpoint's shards are seeded before the old version's are released (a gc spares them)
        effects = released + (self._checkpoint(now, state, result.state, manifest) if kind == jobs.TRAIN else [])
        effects += self._keep_chain(now, state, manifest)
        step_completions = 0
        for p in state.in_step:
            state.trained_commitments += 1
            state.worked[p.worker] = state.worked.get(p.worker, 0) + 1
            state.by_quorum += not p.own
            step_completions += len(p.commitment.prompt_indices) * p.commitment.samples_per_prompt
            effects.append(Emit("rollout-trained", {"task_id": task_id, "commitment_id": p.commitment_id.hex(),
                                                    "worker": p.worker, "policy_version": p.commitment.policy_version,
                                                    "policy_term": p.commitment.policy_term,
                                                    "trained_into": result.version, "term": state.term}))
        state.completions += step_completions
        state.recent.trained([p.worker for p in state.in_step], step_completions)
        stats = {k: round(float(v), 5) for k, v in dict(result.stats).items()}
        # the job's own count is this step's; `completions` stays the running total (an int) operators read
        if "completions" in stats:
            stats["step_completions"] = int(stats.pop("completions"))
        record = {"task_id": task_id, "version": result.version, "completions": state.completions, **stats}
        state.history.append(record)
        state.in_step = []
        # the weights hash lets audits and bench/learning.py score any version offline from the blob store
        effects.append(Emit("version-published", {**record, "term": state.term, "rank": state.rank,
                                                  "weights": result.weights.hex()}))
        effects += self._announce(now, state)
        if kind == jobs.TRAIN:  # after its manifest: peers check a checkpoint against the version's root
            state.resume_state = None
            effects += trainerstate.announce(self.ctx, now, state.states)
        return effects + self.maybe_train(now, state)

    def _keep_chain(self, now: float, state: TrainerTask, manifest: WeightManifest) -> list:
        """Serve the new version; keep (and re-announce) every version back to the last full one and
        the async window; release the rest, whose shards are then garbage-collected."""
        state.manifests[manifest.version] = manifest
        effects = self.ctx.seed_shards(now, manifest, self)
        floor, v = manifest.version - state.async_level - 1, manifest.version
        while v in state.manifests and state.manifests[v].encoding == "delta":
            v = state.manifests[v].parent_version
        floor = min(floor, v)
        for old in [v for v in state.manifests if v < floor]:
            effects += self.ctx.release_shards(now, state.manifests.pop(old).root, self)
        return effects

    def _checkpoint(self, now: float, state: TrainerTask, fields, new: WeightManifest) -> list:
        """Publish the state the job packed, if it is of a version of this chain (a job process that
        outlived a step-down may hand back the old chain's)."""
        if not fields:
            return []
        m = new if new.version == int(fields["version"]) else state.manifests.get(int(fields["version"]))
        if m is None or m.root != bytes(fields["weights_root"]):
            return [Emit("checkpoint-dropped", {"task_id": state.spec.task_id, "version": int(fields["version"]),
                                                "reason": "not a version of this chain"})]
        try:
            c = trainerstate.checkpoint_of(now, state.spec.task_id, state.term, state.rank, fields)
        except (TypeError, ValueError, KeyError) as exc:
            return [Emit("checkpoint-dropped", {"task_id": state.spec.task_id, "version": int(fields["version"]),
                                                "reason": f"bad fields: {exc}"[:200]})]
        return trainerstate.publish(self.ctx, now, state.states, c)

    def on_shards_done(self, now: float, root: bytes) -> list:
        return []  # the trainer only seeds

    def _announce(self, now: float, state: TrainerTask, chain: bool = False) -> list:
        """The newest manifest (re-signed now); with `chain`, also its ancestors back to the last full
        version, which a peer that joins late needs to rebuild the newest one."""
        task_id = state.spec.task_id
        versions, v = [state.version], state.version
        while chain and v in state.manifests and state.manifests[v].encoding == "delta":
            v = state.manifests[v].parent_version
            versions.insert(0, v)
        effects = [e for v in versions if v in state.manifests for e in self.ctx.publish(
            now, topics.task_topic(task_id, "weights"), replace(state.manifests[v], created_at=now))]
        if chain:
            effects += trainerstate.announce(self.ctx, now, state.states, again=True)
        effects += summary.publish(self.ctx, now, task_id, state.version, state.term, self.keys[task_id], state.recent)
        state.announced_at = now
        self.ctx.timer(f"trainer:{task_id}:announce", now + state.params.republish_interval)
        return effects

    def forget_task(self, now: float, task_id: str) -> list:
        state = self.tasks.pop(task_id, None)
        if state is None:
            return []
        effects = state.policy.forget() if state.policy is not None else []
        return effects + self.ctx.release_blobs(self, list(set(state.weights_by_version.values())))

    def on_connected(self, now, peer) -> list:  # a standby's checks too; a late member's version (welcome.py)
        welcome.soon(self.ctx, now, self.tasks)
        return [e for task_id, state in self.tasks.items()
                for e in checking.connected(self.ctx, self, now, state.pending.values(), peer, f"trainer:{task_id}:blobs")]

    def on_timer(self, now, name) -> list:
        _, task_id, what = name.split(":")
        state = self.tasks.get(task_id)
        if state is None:
            return []
        if what == "announce" and state.version >= 0 and state.active:
            self.ctx.chain(task_id).own(now, state.term, state.rank, state.version)
            return self._announce(now, state, chain=True)
        if what == "takeover":  # not by a trainer that refused the task: the other standbys will
            return [] if state.refused else self._take_over(now, state)
        if what == "resume":
            return standby.resume(self.ctx, self, now, state)
        if what == "refetch" and not state.active:
            return state.policy.fetch_latest(self.ctx, self, now)
        if what == "blobs":  # a standby's checks too
            return checking.retry_blobs(self.ctx, self, now, state.pending.values(), name)
        if what == "quorum":
            return quorum.overdue(self.ctx, now, state) + self.maybe_train(now, state)
        if not state.active:
            return []
        if what == jobs.INIT and state.version < 0 and not state.busy:
            state.busy = True
            payload = jobs.InitJob(task=state.spec, seed=stable_seed("base-model", task_id) & 0x7FFFFFFF)
            return [self.ctx.job(self, (task_id, jobs.INIT, ()), jobs.INIT, payload)]
        return self.maybe_train(now, state)

    def _take_over(self, now: float, state: TrainerTask) -> list:
        effects = standby.check(self.ctx, self, now, state, self.keys[state.spec.task_id])
        if not state.active:
            return effects
        for signed, signer in list(state.heard):  # what the workers committed to while we stood by
            try:
                effects += self.on_message(now, signed, signer)
            except Rejected:
                pass
        state.heard.clear()
        return effects + self.maybe_train(now, state)

    def snapshot(self) -> dict:
        return {task_id: {"version": s.version, "training": s.busy, "active": s.active, "term": s.term, "rank": s.rank,
                          "takeovers": s.takeovers,
                          "ready": sum(1 for p in s.pending.values() if p.result is not None),
                          "checking": sum(1 for p in s.pending.values() if p.result is None),
                          "rejected": s.rejected, "own_checks": s.own_checks, "by_quorum": s.by_quorum,
                          "trained_commitments": s.trained_commitments, "completions": s.completions,
                          "dropped": s.dropped, "history": list(s.history)[-64:],
                          "checkpoint": s.states.snapshot(), "refused": s.refused or None}
                for task_id, s in sorted(self.tasks.items())}


def _manifest(now: float, state: TrainerTask, result: jobs.VersionResult) -> WeightManifest:
    """The signed-to-be manifest of a version the job packed (its fields come from trainer/weights)."""
    fields = dict(result.manifest or {})
    if not fields:
        raise ValueError("the job returned no manifest")
    fields["tensors"] = tuple(t if isinstance(t, TensorEntry) else TensorEntry(*t) for t in fields["tensors"])
    fields["shard_hashes"] = tuple(fields["shard_hashes"])
    fields["piece_hashes"] = tuple(fields.get("piece_hashes", ()))
    parent = -1
    if fields["encoding"] == "delta":
        parent = result.version - 1
        if parent not in state.manifests or state.manifests[parent].root != fields["parent_root"]:
            raise ValueError(f"delta on a parent root that is not version {parent}'s")
    prompts = sum(len(p.commitment.prompt_indices) for p in state.in_step)
    return WeightManifest(task_id=state.spec.task_id, version=result.version, parent_version=parent,
                          created_at=now, term=state.term, rank=state.rank, prompts=prompts, **fields)
