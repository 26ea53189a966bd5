"""The roles' jobs by cost model: init, train, generate, verify and unpack with real result types.

The roles emit `RunJob` with the payloads of swarm/jobs.py and expect its results (`VersionResult`
with the manifest fields of a packed version, `GenerateResult`, `VerifyResult`); these executors
answer exactly that, with virtual durations from the scenario's `[jobs.<kind>]` tables (defaults in
`DEFAULTS`) and every choice drawn from the job's own seeded stream. Blobs and shards are virtual
(simulator/content.py): a job that would write a file adds a digest to its peer's `NodeStore` when
it finishes, and a job that would read one fails, like trainer/jobs.py's, if its peer does not hold
it. What the bytes stand for lives in the `Content` registry, so a verify job can run the checks of
proofs/checks.py, in their order, on the facts of the batch:

  claim       batch header, tokens or mean reward differ from the commitment
  duplicate   this peer's job process already passed the same content
  assignment  the prompts are not a hash-assigned slice for (task, worker, version)  <- cherry-pick
  reward      a claimed reward differs from the recomputed one                     <- inflated-reward
  toploc      the batch was not generated with the weights of the claimed version  <- other-model

A version is `compressed_size` bytes (`[jobs.init] result_bytes` for a full encoding, `[jobs.train]
result_bytes` for a delta; task params `shard_size` and `full_every` as trainer/versions.py reads
them) cut into shards whose hashes and root follow from the version's content and encoding. The
weights id follows from the content alone (the manifest's tensor hash), so every peer that unpacks a
manifest names the same weights the trainer checks rollouts against, and a restarted trainer that
republishes its last version as a full one (trainer/initjob.py) names the same weights too.

Cheats (a peer's adversary behaviour sets `cheat`): `other-model`, `inflated-reward`, `cherry-pick`
forge generate results; `lying-validator` inverts verify results. Forged results are marked
`honest=False` in the job-done trace record, which the checkers read.
"""

from __future__ import annotations

from dataclasses import dataclass

from gossip.assignment import assigned_slice
from simulator.content import Content, label_of
from simulator.workload import CostModelExecutor, JobContext, JobOutcome
from swarm import jobs
from swarm.pieces import default_piece_size
from swarm.taskparams import TaskParams

ROLE_KINDS = jobs.KINDS
# kind -> (seconds, jitter, result_bytes): a 4 MB full version, 1 MB deltas, 64 KiB rollout batches.
# The ratios are measured on the built-in model (one core each; the `learning` scenario's durations): a
# batch generated in 20 s is checked in 7.4 s (0.37x: TOPLOC + sampling replay, 0.37-0.39x on the
# built-in model and SmolLM2, bench/detection.py), and a step on `prompts_per_step` prompts trains in
# 12 s (0.6 s against 1.0 s per batch of 8 prompts). A train job's time grows with the prompts it
# trains on (`train_seconds`): steps that grow with the swarm cost what they train.
DEFAULTS = {jobs.INIT: (10.0, 0.0, 4 << 20), jobs.TRAIN: (12.0, 0.1, 1 << 20), jobs.GENERATE: (20.0, 0.2, 64 << 10),
            jobs.VERIFY: (7.4, 0.2, 0), jobs.UNPACK: (1.0, 0.2, 0)}
GENERATING_CHEATS = ("other-model", "inflated-reward", "cherry-pick")
CHEATS = GENERATING_CHEATS + ("lying-validator", "rubber-stamp")
CHERRY_POOL = 256  # cherry-pick takes the easiest prompts of a fixed pool, like trainer/cheats.py
DEFAULT_SHARD_SIZE = 1 << 20  # trainer/versions.py
DEFAULT_FULL_EVERY = 8
STATE_RATIO = 0.76  # a trainer checkpoint's compressed size over its raw size, as measured on the built-in model (docs/weights.md)
TOKENS_PER_SAMPLE = (8, 24)


@dataclass(frozen=True)
class Batch:
    """What a virtual rollout batch holds (its blob's meaning)."""

    task_id: str
    version: int
    worker_key: bytes
    prompts: tuple[int, ...]  # what the batch (and so the commitment) holds
    samples_per_prompt: int
    weights: bytes  # the weights it was really generated with
    reward: float  # the mean reward the environment's checker gives it
    claimed_reward: float  # the mean reward the batch claims
    num_tokens: int
    content: bytes  # content id (what the duplicate check compares)
    cheat: str = ""


@dataclass(frozen=True)
class Weights:
    """What a virtual weights blob is: one policy version's content."""

    task_id: str
    version: int
    tensor_hash: bytes
    seed: bytes  # the content label (a resumed trainer repacks the same content)


@dataclass(frozen=True)
class State:
    """What a virtual trainer checkpoint is: the state behind one version's weights."""

    weights: bytes


def weights_id(tensor_hash: bytes) -> bytes:
    """The weights blob of the version whose manifest carries `tensor_hash`: the same on every peer."""
    return label_of("sim-weights", tensor_hash)


class RoleJobs:
    """Executors for the role job kinds over one `Content` registry."""

    def __init__(self, content: Content, specs: dict) -> None:
        """`specs`: kind -> object with seconds, jitter, result_bytes, fail_rate (scenario JobSpec)."""
        self.content = content
        self.cost: dict[str, CostModelExecutor] = {}
        self.sizes: dict[str, int] = {}
        for kind in ROLE_KINDS:
            spec = specs.get(kind)
            seconds, jitter, size = DEFAULTS[kind]
            if spec is not None:
                seconds, jitter, size = spec.seconds, spec.jitter, spec.result_bytes or size
            self.cost[kind] = CostModelExecutor(seconds, jitter, size, getattr(spec, "fail_rate", 0.0))
            self.sizes[kind] = max(1, size)

    def executor(self, kind: str) -> "RoleExecutor":
        return RoleExecutor(self, kind)

    # ------------------------------------------------------------------ versions

    def pack(self, task: jobs.TaskSpec, version: int, seed: bytes, parent_root: bytes = b"",
             parent_depth: int = 0) -> tuple[jobs.VersionResult, tuple[bytes, ...]]:
        """A version packed into virtual shards: (its VersionResult with manifest fields, shard digests)."""
        params = TaskParams.from_params(task.params)  # checked when the scenario loaded
        shard_size = params.shard_size or DEFAULT_SHARD_SIZE
        piece_size = params.piece_size or default_piece_size(shard_size)
        if shard_size % piece_size:
            piece_size = shard_size  # trainer/versions.py refuses such a task; the cost model just ignores it
        full_every = params.full_every or DEFAULT_FULL_EVERY
        delta = bool(parent_root) and parent_depth + 1 < full_every
        full_size = self.sizes[jobs.INIT]
        size = self.sizes[jobs.TRAIN] if delta else full_size
        n = -(-size // shard_size)
        encoding = (b"delta", bytes(parent_root)) if delta else (b"full",)
        hashes = tuple(self.content.make(label_of(seed, *encoding, "shard", i),
                                         shard_size if i < n - 1 else size - shard_size * (n - 1), keep=True)
                       for i in range(n))
        pieces = self._pieces(hashes, piece_size)
        root = label_of("sim-root", seed, *encoding, *hashes)
        raw_size = 2 * full_size
        tensor_hash = label_of("sim-tensor", seed)
        weights = self.content.name(weights_id(tensor_hash), raw_size, Weights(task.task_id, version, tensor_hash, seed))
        self.content.name(root, 0, weights)  # which weights a root rebuilds to (unpack checks a delta's parent)
        manifest = {"parent_root": bytes(parent_root) if delta else b"", "encoding": "delta" if delta else "full",
                    "dtype": "bf16", "root": root, "shard_size": shard_size, "raw_size": raw_size,
                    "compressed_size": size, "shard_hashes": hashes, "piece_size": piece_size, "piece_hashes": pieces,
                    "tensors": (("sim.weights", "bf16", (raw_size // 2,), tensor_hash),),
                    "delta_op": "sub" if delta else "", "depth": parent_depth + 1 if delta else 0, "shuffle": True}
        return jobs.VersionResult(version, weights, raw_size, {}, manifest), hashes

    def _pieces(self, hashes: tuple[bytes, ...], piece_size: int) -> tuple[bytes, ...]:
        """The piece hashes of virtual shards, in stream order."""
        return tuple(self.content.hasher(self.content.piece(h, offset, min(piece_size, length - offset)))
                     for h, length in ((h, self.content.size(h)) for h in hashes)
                     for offset in range(0, length, piece_size))

    def pack_state(self, task: jobs.TaskSpec, version: int, seed: bytes, weights: bytes,
                   weights_root: bytes) -> tuple[dict, tuple[bytes, ...]]:
        """A trainer checkpoint in virtual shards (trainer/checkpoint.py's layout): fp32 master residuals
        and two moments per parameter, `STATE_RATIO` of the raw state once compressed."""
        params = TaskParams.from_params(task.params)
        shard_size = piece_size = params.shard_size or DEFAULT_SHARD_SIZE  # whole shards (trainer/checkpoint.py)
        raw = 6 * self.sizes[jobs.INIT]  # bf16 weights -> three fp32 tensors per parameter
        size = max(1, int(raw * STATE_RATIO))
        n = -(-size // shard_size)
        hashes = tuple(self.content.make(label_of(seed, "state", i), shard_size if i < n - 1 else size - shard_size * (n - 1),
                                         keep=True) for i in range(n))
        pieces = self._pieces(hashes, piece_size)
        root = label_of("sim-state-root", seed, *hashes)
        self.content.name(root, 0, State(weights))
        fields = {"version": version, "weights_root": weights_root, "step": version, "root": root, "dtype": "fp32",
                  "shard_size": shard_size, "raw_size": raw, "compressed_size": size, "shard_hashes": hashes,
                  "piece_size": piece_size, "piece_hashes": pieces, "shuffle": True,
                  "tensors": (("sim.state", "fp32", (raw // 4,), label_of("sim-state-tensor", seed)),)}
        return fields, hashes


class RoleExecutor:
    def __init__(self, jobs_: RoleJobs, kind: str) -> None:
        self.jobs = jobs_
        self.kind = kind
        self.cost = jobs_.cost[kind]
        self.run_kind = {jobs.INIT: self._init, jobs.TRAIN: self._train, jobs.GENERATE: self._generate,
                         jobs.VERIFY: self._verify, jobs.UNPACK: self._unpack}[kind]

    def run(self, ctx: JobContext) -> JobOutcome:
        duration = self.cost.duration(ctx.rng)
        if self.kind == jobs.TRAIN:
            duration = train_seconds(duration, ctx.payload, self.jobs.content)
        if self.cost.fail_rate and ctx.rng.random() < self.cost.fail_rate:
            return JobOutcome(duration, False, error=f"{ctx.kind} failed (cost model)")
        try:
            return self.run_kind(ctx, duration)
        except JobFailed as exc:
            return JobOutcome(duration, False, error=f"{ctx.kind}: {exc}"[:200])
        except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a payload the job process would refuse
            return JobOutcome(duration, False, error=f"{ctx.kind}: bad payload ({type(exc).__name__}: {exc})"[:200])

    def _need_blob(self, ctx: JobContext, digest: bytes, what: str) -> None:
        if ctx.store is None or not ctx.store.has_blob(digest):
            raise JobFailed(f"{what} {bytes(digest).hex()[:16]} is not in the blob store")

    # ---- trainer

    def _init(self, ctx: JobContext, duration: float) -> JobOutcome:
        job: jobs.InitJob = ctx.payload
        version, seed = 0, label_of("sim-init", job.task.task_id, job.task.model, job.seed)
        last = ctx.store.published.get(job.task.task_id) if ctx.store is not None else None
        meta = self.jobs.content.meta(last[1]) if last is not None and ctx.store.has_blob(last[1]) else None
        stats = {"heldout_greedy": 0.0}
        if isinstance(meta, Weights):  # a restarted trainer resumes (trainer/initjob.py): its last version,
            version, seed = last[0], meta.seed  # the same weights republished as a full version
            if last[2]:  # and its term (left out at term 0, so single-trainer traces stay as they were)
                stats["term"] = float(last[2])
        result, shards = self.jobs.pack(job.task, version, seed)
        result = jobs.VersionResult(version, result.weights, result.size, stats, result.manifest)
        return JobOutcome(duration, True, result, blobs=(result.weights,), shards=shards)

    def _train(self, ctx: JobContext, duration: float) -> JobOutcome:
        job: jobs.TrainJob = ctx.payload
        if not job.rollouts:
            raise JobFailed("the job names no rollout batches")
        self._need_blob(ctx, job.weights, f"weights of version {job.version}")
        rewards, completions = [], 0
        for digest in job.rollouts:
            self._need_blob(ctx, digest, "rollout batch")
            batch = self.jobs.content.meta(digest)
            if not isinstance(batch, Batch) or batch.task_id != job.task.task_id or batch.version > job.version:
                raise JobFailed(f"rollout batch {bytes(digest).hex()[:16]} is not a batch of this task and version")
            rewards.append(batch.claimed_reward)
            completions += len(batch.prompts) * batch.samples_per_prompt
        seed = label_of("sim-train", job.task.task_id, job.version + 1, job.weights, *job.rollouts)
        result, shards = self.jobs.pack(job.task, job.version + 1, seed, job.parent_root, job.parent_depth)
        stats = {"reward": sum(rewards) / len(rewards), "completions": float(completions)}
        if job.state is not None:  # a standby's first step (trainer/trainjob.py): the checkpoint it fetched
            held = ctx.store is not None and all(ctx.store.has_shard(h) for h in job.state.shard_hashes)
            meta = self.jobs.content.meta(job.state.root)
            stats["state_restored"] = (-1.0 if not held else 2.0 if isinstance(meta, State)
                                       and meta.weights == bytes(job.weights) else 1.0)
        state = None
        if job.pack_state:  # returned at once (the real job hands it back with its next answer)
            state, state_shards = self.jobs.pack_state(job.task, job.version + 1, seed, result.weights,
                                                       result.manifest["root"])
            shards += state_shards
            stats["state_bytes"] = float(state["compressed_size"])
        result = jobs.VersionResult(job.version + 1, result.weights, result.size, stats, result.manifest, state)
        return JobOutcome(duration, True, result, blobs=(result.weights,), shards=shards)

    # ---- followers

    def _unpack(self, ctx: JobContext, duration: float) -> JobOutcome:
        job: jobs.UnpackJob = ctx.payload
        m = job.manifest
        for i, digest in enumerate(m.shard_hashes):
            if ctx.store is None or not ctx.store.has_shard(digest):
                raise JobFailed(f"shard {i} of version {job.version} is not in the shard store")
        if m.encoding == "delta":
            self._need_blob(ctx, job.parent_weights, "parent weights")
            if bytes(job.parent_weights) != self.jobs.content.meta(m.parent_root):
                raise JobFailed(f"version {job.version} does not rebuild: its parent is not the given weights")
        if len(m.tensors) != 1:
            raise JobFailed(f"version {job.version} is not a simulated version")
        weights = weights_id(m.tensors[0].hash)
        if not isinstance(self.jobs.content.meta(weights), Weights):
            raise JobFailed(f"version {job.version} does not rebuild: unknown content")
        return JobOutcome(duration, True, jobs.VersionResult(job.version, weights, m.raw_size), blobs=(weights,))

    # ---- worker

    def _generate(self, ctx: JobContext, duration: float) -> JobOutcome:
        job: jobs.GenerateJob = ctx.payload
        self._need_blob(ctx, job.weights, f"weights of version {job.version}")
        claim = (job.task.task_id, bytes(job.worker_key), job.version, tuple(job.prompt_indices))
        if claim in ctx.store.generated:  # trainer/generated.py: a restarted worker never commits a slice twice
            return JobOutcome(0.0, True, jobs.GenerateResult(b"", 0, 0, 0.0, repeated=True), honest=True)
        rng = ctx.rng
        cheat = ctx.cheat if ctx.cheat in GENERATING_CHEATS else ""
        prompts, weights = tuple(job.prompt_indices), bytes(job.weights)
        reward = round(min(1.0, max(0.0, 0.2 + 0.03 * job.version + rng.uniform(-0.1, 0.1))), 4)
        claimed = reward
        if cheat == "other-model":
            weights = label_of("other-model", weights)  # a cheaper model: its activations are not the policy's
        elif cheat == "inflated-reward":
            claimed = 1.0
        elif cheat == "cherry-pick":
            pool = sorted(range(CHERRY_POOL), key=lambda i: label_of("difficulty", job.task.task_id, i))
            prompts = tuple(sorted(pool[:len(prompts)]))
            reward = claimed = round(min(1.0, reward + 0.3), 4)
        lo, hi = TOKENS_PER_SAMPLE
        tokens = sum(lo + rng.randrange(hi - lo) for _ in range(len(prompts) * job.samples_per_prompt))
        content = label_of("batch", job.task.task_id, job.worker_key, job.version, prompts, weights, reward, tokens,
                           rng.next_u64())
        batch = Batch(job.task.task_id, job.version, bytes(job.worker_key), prompts, job.samples_per_prompt, weights,
                      reward, claimed, tokens, content, cheat)
        size = self.cost.result_bytes or DEFAULTS[jobs.GENERATE][2]
        blob = self.jobs.content.make(content, size, batch)
        result = jobs.GenerateResult(blob, size, tokens, claimed, prompts if cheat == "cherry-pick" else None)
        return JobOutcome(duration, True, result, honest=not cheat, blobs=(blob,), generated=claim)

    # ---- validator (and the trainer's own check)

    def _verify(self, ctx: JobContext, duration: float) -> JobOutcome:
        job: jobs.VerifyJob = ctx.payload
        self._need_blob(ctx, job.blob, "rollout batch")
        self._need_blob(ctx, job.weights, f"weights of version {job.version}")
        batch = self.jobs.content.meta(job.blob)
        if not isinstance(batch, Batch):
            reason = "schema"
        else:
            reason = check(batch, job, ctx.store)
        if reason == "ok" and ctx.store is not None:
            ctx.store.remember_seen(batch.content)
        passed = reason == "ok"
        evidence = b"" if passed else label_of("evidence", reason, job.worker_key, job.version, job.prompt_indices)
        result = jobs.VerifyResult(passed, reason, evidence, "" if passed else f"{reason} (cost model)")
        if ctx.cheat == "lying-validator":
            lie = jobs.VerifyResult(True, "ok", b"") if not passed else jobs.VerifyResult(
                False, "toploc", label_of("made-up", job.blob), "toploc (made up)")
            return JobOutcome(duration, True, lie, honest=False)
        if ctx.cheat == "rubber-stamp":  # a colluding checker: passes everything
            return JobOutcome(duration, True, jobs.VerifyResult(True, "ok", b""), honest=passed)
        return JobOutcome(duration, True, result)


def train_seconds(duration: float, job: jobs.TrainJob, content: Content) -> float:
    """The cost model's train time is for a step of `prompts_per_step` prompts; a bigger step (steps
    that grow with the rollouts ready) takes proportionally longer, as its optimizer steps do, and the
    decoupled objective's extra pass a third more."""
    prompts = 0
    for digest in job.rollouts:
        batch = content.meta(digest)
        prompts += len(batch.prompts) if isinstance(batch, Batch) else 0
    params = TaskParams.from_params(job.task.params)
    return duration * max(1.0, prompts / params.prompts_per_step) * objective_cost(params)


def objective_cost(params: TaskParams) -> float:
    """A step's cost for its objective, relative to the plain one: the decoupled objective (trainer/grpo.py)
    adds a forward pass without gradients over the step's rows for the proximal policy, about a third
    of the forward and backward the step already does."""
    return 4 / 3 if params.decoupled_objective else 1.0


class JobFailed(Exception):
    """The job could not run (a missing blob or shard): a failed JobFinished, never a verdict."""


def check(batch: Batch, job: jobs.VerifyJob, store) -> str:
    """The reason proofs/checks.py would give for this batch against this commitment ("ok" if none)."""
    header = (batch.task_id, batch.version, batch.worker_key, batch.prompts, batch.samples_per_prompt)
    if header != (job.task.task_id, job.version, bytes(job.worker_key), tuple(job.prompt_indices),
                  job.samples_per_prompt):
        return "claim"
    if batch.num_tokens != job.num_tokens or abs(batch.claimed_reward - job.mean_reward) > 1e-6:
        return "claim"
    if store is not None and batch.content in store.seen:
        return "duplicate"
    params = TaskParams.from_params(job.task.params)
    if not assigned(job.task.task_id, batch.worker_key, batch.version, batch.prompts, params):
        return "assignment"
    if abs(batch.reward - batch.claimed_reward) > 1e-6:
        return "reward"
    if batch.weights != bytes(job.weights):
        return "toploc"
    return "ok"


def assigned(task_id: str, worker_key: bytes, version: int, prompts: tuple[int, ...], params: TaskParams) -> bool:
    """Is `prompts` slice b of the worker's assignment for `version`, for some b < max_batches_per_version?
    (the check proofs/checks.py makes, from gossip.assignment)."""
    return assigned_slice(task_id, worker_key, version, prompts, params.prompts_per_commit,
                          params.max_batches_per_version, params.n_prompts) is not None
