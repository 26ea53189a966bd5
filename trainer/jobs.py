"""What a `RunJob` effect executes: init, generate and train, inside one long-lived job process.

`JobWorker.run(kind, payload)` takes the payloads of `swarm/jobs.py` and returns their results.
Bulk data moves through the node's blob directory only: a job reads weights and rollout batches by
hash (re-hashing what it reads) and stores what it makes under its hash. Models stay cached in
memory between jobs (policies by weights hash, the trainer's model and optimizer per task), so a
worker pays for loading a policy once per version and a trainer never reloads between steps.

The trainer's master weights and optimizer state are written to `state_dir/<task>/` (atomically,
with the version and weights hash they belong to) after a step at most every `save_every` seconds
and when the job process stops, so a restarted trainer given the same version resumes with the same
Adam moments; given any other version (a crash since the last save) it starts a fresh optimizer
from the published weights. Writing both after every step cost the job process, the swarm's
critical path on one machine, about 65 ms of CPU and more of wall time per version.

Every failure an operator can cause or fix (unknown model or environment, a malformed model dir,
a missing or corrupt blob, a bad task parameter, an environment that raises) is a `JobError` whose
message says what happened; the job process reports it and keeps running.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from swarm import jobs
from proofs import toploc
from trainer import generated, trainstate
from trainer.batch_codec import BatchError, RolloutBatch, RolloutSample, decode, encode
from trainer.blobdir import BlobDir, BlobError
from trainer.envs import get_env
from trainer.grpo import grpo_step, lr_at, make_optimizer
from trainer.inference import TorchBackend, sample_seed
from trainer.policy import (PolicyError, base_model, is_builtin, load_state, load_weights, weights_bytes,
                            weights_state)
from trainer.rollout import accuracy, completion_text, score
from trainer.taskconfig import ParamError, grpo_config, int_param, warmup_config
from trainer.train_batch import build_batch
from trainer.versions import VersionError, Versions, state_of_blob

POLICY_CACHE = 3  # policies kept in memory: the current version and an async window of 2
# How often the job process writes a trainer's master weights and moments (node/jobrunner.py); it also
# writes them when it stops. A crash loses at most this much of them, never a version (trainer.json is
# written every step): the resumed trainer then continues from the published weights, fresh moments.
SAVE_EVERY = 30.0


class JobError(RuntimeError):
    """A job failed for a reason the operator can act on; the message is shown to them as is."""


@dataclass
class _Trainer:
    model_name: str
    model: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    version: int
    weights: bytes
    saved_at: float | None = None  # monotonic time of the last save of master weights and moments
    unsaved: bool = False  # the model and optimizer moved past what the state dir holds


class JobWorker:
    def __init__(self, blob_dir: Path, state_dir: Path,
                 progress: Callable[[dict], None] | None = None, malicious: str = "", defer_saves: bool = False,
                 device: str = "cpu", save_every: float = 0.0) -> None:
        self.blobs = BlobDir(blob_dir)
        self.device = torch.device(device)  # where models run (generation, checks, GRPO); blobs stay on CPU
        self.versions = Versions(self.blobs, Path(blob_dir).parent / "shards")  # the node's shard store
        self.state_dir = Path(state_dir)
        self.progress = progress or (lambda fields: None)
        self._templates: dict[str, tuple] = {}  # model name -> (model, tokenizer), weights irrelevant
        self._policies: OrderedDict[bytes, tuple] = OrderedDict()  # weights hash -> (model, tokenizer)
        self._trainers: dict[str, _Trainer] = {}
        self._seen: dict[str, OrderedDict] = {}  # task -> content digests of batches that passed verify
        self.defer_saves = defer_saves  # the job process: saves that need not precede the answer wait for `flush`
        self._deferred: list[Callable[[], None]] = []
        self.save_every = save_every  # seconds between a trainer's state saves; 0: after every step
        self.cheat = None
        if malicious:  # demonstrations and tests only: trainer/cheats.py
            from trainer.cheats import Cheater
            self.cheat = Cheater(malicious)

    def _later(self, save: Callable[[], None]) -> None:
        if self.defer_saves:
            self._deferred.append(save)
        else:
            save()

    def flush(self) -> None:
        """Run the saves the last job deferred. Every job starts with this, so no job sees stale state."""
        while self._deferred:
            self._deferred.pop(0)()

    def close(self) -> None:
        """Write what a stopping job process must not lose: deferred saves, and the master weights and
        moments of every trainer that stepped since its last save (the resume after Ctrl-C continues
        from exactly them)."""
        self.flush()
        for task_id, st in self._trainers.items():
            if st.unsaved:
                self._save_trainer(self._state_path(task_id), st, weights_bytes(st.model))

    def _save_trainer(self, path: Path, st: _Trainer, master: bytes) -> None:
        self.versions.save_master(path, st.weights, master)
        trainstate.save(path, st.optimizer, st.version, st.weights)
        st.unsaved = False

    def run(self, kind: str, payload):
        self.flush()
        handlers = {jobs.INIT: self.init, jobs.GENERATE: self.generate, jobs.TRAIN: self.train,
                    jobs.VERIFY: self.verify, jobs.UNPACK: self.unpack}
        handler = handlers.get(kind)
        if handler is None:
            raise JobError(f"unknown job kind {kind!r}; this job process runs {sorted(handlers)}")
        try:
            return handler(payload)
        except (PolicyError, BlobError, BatchError, ParamError, trainstate.StateError) as exc:
            raise JobError(f"{kind}: {exc}") from None

    # ---------------------------------------------------------------- init

    def init(self, job: jobs.InitJob) -> jobs.VersionResult:
        """Version 0: the built-in model created from `seed` and warmed up, or a model from disk.
        A trainer restarted on its data dir gets the last version it published instead (`_resume`)."""
        task, params = job.task, job.task.params
        env = _env(task.env)
        resumed = self._resume(task)
        if resumed is not None:
            return resumed
        model, tokenizer = base_model(task.model, job.seed)
        model = model.to(self.device)
        stats: dict[str, float] = {}
        if is_builtin(task.model):
            wcfg = warmup_config(params, job.seed)
            if wcfg.steps:
                from trainer.warmup import warmup

                t0 = time.monotonic()
                losses = warmup(model, tokenizer, env, wcfg, progress=lambda s, n, loss: self.progress(
                    {"stage": "warmup", "step": s, "steps": n, "loss": round(loss, 4)}))
                stats.update(warmup_loss=losses[-1], warmup_s=time.monotonic() - t0)
        n_eval = int_param(params, "eval_prompts", 256 if is_builtin(task.model) else 16)
        if n_eval:
            backend = TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=False)
            max_new = grpo_config(params).max_new_tokens
            stats["heldout_greedy"] = _env_call(task.env, "scoring held-out prompts", lambda: accuracy(
                env, tokenizer, backend, n_eval, temperature=0.0, max_new_tokens=max_new))
        digest, size, manifest = self.versions.publish(task, weights_state(model))
        load_weights(model, self.blobs.read(digest))  # peers run the version as rebuilt from its shards
        self._templates.setdefault(task.model, (model, tokenizer))
        self._remember(digest, model, tokenizer)
        return jobs.VersionResult(0, digest, size, stats, manifest)

    def _resume(self, task: jobs.TaskSpec) -> jobs.VersionResult | None:
        """The last version this trainer trained for `task` (trainer.json in its state dir, written
        just before the version is published; the weights in its blob store), published again as a
        full version: peers that rejoin may hold none of its ancestors. The next train job continues
        from the saved master weights and optimizer moments (`_trainer`), so a stopped run resumes
        where it stopped."""
        record = trainstate.saved(self._state_path(task.task_id))
        if record is None:
            return None
        version, published = int(record["version"]), bytes.fromhex(record["weights"])
        if not self.blobs.path(published).exists():
            self.progress({"stage": "resume", "skipped": f"weights of version {version} are gone; starting at 0"})
            return None
        data = self.blobs.read(published, f"weights of version {version}")
        template, tokenizer = self._template(task.model)  # the task's model must resolve, and fit them
        model = copy.deepcopy(template)
        load_weights(model, data)
        digest, size, manifest = self.versions.publish(task, state_of_blob(data))
        if digest != published:
            raise JobError(f"init: version {version} saved in {self._state_path(task.task_id)} does not "
                           "republish to the same weights; delete that directory to start from version 0")
        self.progress({"stage": "resume", "version": version})
        self._remember(digest, model.eval(), tokenizer)  # verify jobs check rollouts of it
        return jobs.VersionResult(version, digest, size, {"resumed": 1.0}, manifest)

    # ---------------------------------------------------------------- unpack

    def unpack(self, job: jobs.UnpackJob) -> jobs.VersionResult:
        """Rebuild a version from its verified shards (trainer/versions.py) as a weights blob."""
        try:
            return self.versions.unpack(job)
        except VersionError as exc:
            raise JobError(str(exc)) from None

    # ---------------------------------------------------------------- generate

    def generate(self, job: jobs.GenerateJob) -> jobs.GenerateResult:
        """`samples_per_prompt` seeded completions per assigned prompt, scored, each with its TOPLOC
        proof (proofs/toploc.py), stored as one batch; `repeated` (nothing generated) for a slice this
        worker generated before a restart (trainer/generated.py)."""
        _env(job.task.env)
        if not job.prompt_indices or job.samples_per_prompt < 1:
            raise JobError("generate: the job names no prompts or no samples per prompt")
        grpo_config(job.task.params)  # bad task params are an error, whether or not the slice is new
        state, claim = self._state_path(job.task.task_id), (job.worker_key, job.version, job.prompt_indices)
        if generated.seen(state, *claim):
            return jobs.GenerateResult(b"", 0, 0, 0.0, repeated=True)  # maybe committed before a restart
        if self.cheat is not None and self.cheat.generates:
            result = self.cheat.generate(self, job)
        else:
            model, tokenizer = self._policy(job.task.model, job.weights)
            result = self.store_batch(job, job.prompt_indices, self.rollouts(job, model, tokenizer, job.prompt_indices))
        generated.record(state, *claim)
        return result

    def rollouts(self, job: jobs.GenerateJob, model, tokenizer, indices) -> list[RolloutSample]:
        """Seeded completions of `model` for prompts `indices`, scored, with proofs."""
        task = job.task
        cfg = grpo_config(task.params)
        env = _env(task.env)
        prompts, prompt_ids = _env_call(task.env, "building prompts", lambda: _prompts(env, tokenizer, indices))
        seeds = [sample_seed(task.task_id, job.worker_key, job.version, i, s)
                 for i in indices for s in range(job.samples_per_prompt)]
        backend = TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=True)
        completions = backend.generate(prompt_ids, job.samples_per_prompt, cfg.max_new_tokens,
                                       cfg.temperature, seeds)
        samples = []
        # A group repeats completions (52 of 64 samples of a trained policy), whose hidden states are
        # bit-identical within one generated batch: each distinct one is proved once.
        proofs: dict[bytes, bytes] = {}
        for k, c in enumerate(completions):
            p, s = divmod(k, job.samples_per_prompt)
            prompt = prompts[p]
            reward = _env_call(task.env, f"scoring prompt {prompt.index}", lambda: score(
                env, prompt, completion_text(tokenizer, c), c.finished, cfg.format_weight))
            bits = c.hidden.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
            proof = proofs.get(bits) or proofs.setdefault(bits, toploc.build_proof(c.hidden))
            samples.append(RolloutSample(
                prompt_index=indices[p], sample_index=s, prompt_ids=tuple(c.prompt_ids),
                token_ids=tuple(c.token_ids), logprobs=c.logprobs.numpy(), reward=float(reward),
                finished=c.finished, seed=c.seed, proof=proof))
        return samples

    def store_batch(self, job: jobs.GenerateJob, indices, samples) -> jobs.GenerateResult:
        task = job.task
        batch = RolloutBatch(task.task_id, job.version, bytes(job.worker_key), tuple(indices),
                             job.samples_per_prompt, tuple(samples))
        data = encode(batch)
        digest = self.blobs.write(data)
        other = tuple(indices) if tuple(indices) != tuple(job.prompt_indices) else None
        return jobs.GenerateResult(digest, len(data), batch.num_tokens, batch.mean_reward, other)

    def score(self, job, prompt_index: int, token_ids, finished: bool) -> float:
        """The environment's reward for a completion given as token ids (what validators recompute)."""
        task = job.task
        env, cfg = _env(task.env), grpo_config(task.params)
        _, tokenizer = self._template(task.model)
        prompt = _env_call(task.env, f"building prompt {prompt_index}", lambda: env.prompt(prompt_index, "train"))
        text = completion_text(tokenizer, _Ids(list(token_ids), finished))
        return float(_env_call(task.env, f"scoring prompt {prompt_index}", lambda: score(
            env, prompt, text, finished, cfg.format_weight)))

    # ---------------------------------------------------------------- verify

    def verify(self, job: jobs.VerifyJob) -> jobs.VerifyResult:
        """Every check of proofs/checks.py on one committed batch, against our copy of its version.

        A blob that does not decode, or names another task, version, worker or prompts than its
        commitment, fails like any other check (the worker signed it); what we cannot do ourselves
        (a missing blob or weights, an uncalibrated model) is a JobError, never a verdict."""
        from proofs.checks import Claim, Rules, Validator, check_batch, rejected
        from swarm.taskparams import TaskParams

        task = job.task
        cfg, params, env = grpo_config(task.params), TaskParams.from_params(task.params), _env(task.env)
        claim = Claim(bytes(job.worker_key), job.version, tuple(job.prompt_indices), job.samples_per_prompt,
                      float(job.mean_reward), int(job.num_tokens))
        data = self.blobs.read(job.blob, "rollout batch")
        model, tokenizer = self._policy(task.model, job.weights)
        try:
            batch = decode(data)
        except BatchError as exc:
            return self._answer(job, rejected(claim, "schema", {"error": str(exc)[:200]}))
        header = (batch.task_id, batch.version, bytes(batch.worker_key), tuple(batch.prompt_indices),
                  batch.samples_per_prompt)
        if header != (task.task_id, claim.version, claim.worker_key, claim.prompt_indices, claim.samples_per_prompt):
            return self._answer(job, rejected(claim, "claim", header="batch header differs from its commitment"))
        rules = Rules(task.task_id, params.n_prompts, params.prompts_per_commit, params.max_batches_per_version,
                      cfg.max_new_tokens, cfg.temperature, tokenizer.eos_token_id, model.config.vocab_size,
                      samples_per_prompt=params.group_size)
        try:
            validator = Validator.calibrated(
                model, task.model, lambda i: env.prompt_ids(tokenizer, env.prompt(i, "train")),
                lambda i, ids, finished: self.score(job, i, ids, finished))
        except FileNotFoundError as exc:
            raise JobError(f"verify: {exc}") from None
        seen = self._seen.setdefault(task.task_id, OrderedDict())
        verdict = check_batch(batch.samples, claim, rules, validator, seen=seen)
        if verdict.passed:
            seen[bytes.fromhex(verdict.evidence["content"])] = None
            while len(seen) > 8192:
                seen.popitem(last=False)
        return self._answer(job, verdict)

    def _answer(self, job: jobs.VerifyJob, verdict) -> jobs.VerifyResult:
        result = jobs.VerifyResult(verdict.passed, verdict.reason, verdict.evidence_hash, verdict.detail)
        return self.cheat.lie(job, result) if self.cheat is not None else result

    # ---------------------------------------------------------------- train

    def train(self, job: jobs.TrainJob) -> jobs.VersionResult:
        """One GRPO step on the validated batches: version -> version + 1."""
        task = job.task
        cfg = grpo_config(task.params)
        if not job.rollouts:
            raise JobError("train: the job names no rollout batches")
        batches = [self._rollout_batch(task.task_id, job.version, h) for h in job.rollouts]
        t0 = time.monotonic()
        st = self._trainer(job, cfg)
        for group in st.optimizer.param_groups:  # the signed task's settings, even for a resumed optimizer
            group.update(lr=lr_at(cfg, job.version), betas=cfg.betas, weight_decay=cfg.weight_decay)
        built = build_batch(batches, cfg.std_normalize, st.tokenizer.pad_token_id)
        stats = {"reward": built.mean_reward, "completions": float(built.completions),
                 "completions_used": float(built.used)}
        if built.batch is not None:
            stats.update(grpo_step(st.model, st.optimizer, built.batch, cfg))
        stats["grpo_s"] = time.monotonic() - t0  # the rest of train_s packs and saves the version
        digest, size, manifest = self.versions.publish(task, weights_state(st.model), job.weights,
                                                       job.parent_root, job.parent_depth)
        path, version = self._state_path(task.task_id), job.version + 1
        trainstate.save_version(path, version, digest)
        st.version, st.weights, st.unsaved = version, digest, True
        # the master weights and the moments (about 12 bytes per parameter) are written after the
        # answer when the job process defers saves (off the critical path, before the next job reads
        # them: see `flush`), and only every `save_every` seconds (`close` writes the rest); a
        # trainer killed in between resumes from the published weights
        now = time.monotonic()
        if st.saved_at is None or now - st.saved_at >= self.save_every:
            st.saved_at = now
            self._later(lambda: self._save_trainer(path, st, weights_bytes(st.model)))
        stats["train_s"] = time.monotonic() - t0
        return jobs.VersionResult(st.version, digest, size, stats, manifest)

    def _trainer(self, job: jobs.TrainJob, cfg) -> _Trainer:
        """The in-memory trainer if it is at this job's version and weights, else one rebuilt from
        the weights blob (with the saved optimizer state when it belongs to exactly that version)."""
        task_id, name = job.task.task_id, job.task.model
        st = self._trainers.get(task_id)
        if st is not None and (st.version, st.weights, st.model_name) == (job.version, bytes(job.weights), name):
            return st
        data = (self.versions.master(self._state_path(task_id), job.weights)
                or self.blobs.read(job.weights, f"weights of version {job.version}"))
        template, tokenizer = self._template(name)
        model = copy.deepcopy(template)
        load_weights(model, data)
        optimizer = make_optimizer(model, cfg)
        trainstate.load_if_matching(self._state_path(task_id), optimizer, job.version, bytes(job.weights))
        st = self._trainers[task_id] = _Trainer(name, model, tokenizer, optimizer, job.version, bytes(job.weights))
        return st

    def _rollout_batch(self, task_id: str, version: int, digest: bytes) -> RolloutBatch:
        batch = decode(self.blobs.read(digest, "rollout batch"))
        if batch.task_id != task_id:
            raise JobError(f"train: rollout batch {bytes(digest).hex()[:16]} belongs to task "
                           f"{batch.task_id!r}, not {task_id!r}; refusing to train on it")
        if batch.version > version:
            raise JobError(f"train: rollout batch {bytes(digest).hex()[:16]} claims policy version "
                           f"{batch.version}, newer than the version being trained ({version})")
        return batch

    # ---------------------------------------------------------------- models

    def _template(self, name: str) -> tuple:
        if name not in self._templates:
            model, tokenizer = base_model(name, 0)
            self._templates[name] = (model.to(self.device), tokenizer)
        return self._templates[name]

    def _policy(self, name: str, digest: bytes) -> tuple:
        digest = bytes(digest)
        if digest in self._policies:
            self._policies.move_to_end(digest)
            return self._policies[digest]
        template, tokenizer = self._template(name)
        # a full cache hands its oldest model over to the new version (loading weights into it costs
        # a fraction of copying the template, once per version on every worker and validator)
        reuse = self._policies.popitem(last=False)[1] if len(self._policies) >= POLICY_CACHE else None
        model = reuse[0] if reuse is not None and reuse[1] is tokenizer else copy.deepcopy(template)
        unpacked = self.versions.unpacked(digest)  # just rebuilt by an unpack job here: already parsed
        if unpacked is not None:
            load_state(model, unpacked)
        else:
            load_weights(model, self.blobs.read(digest, "policy weights"))
        return self._remember(digest, model.eval(), tokenizer)

    def _remember(self, digest: bytes, model, tokenizer) -> tuple:
        self._policies[digest] = (model, tokenizer)
        while len(self._policies) > POLICY_CACHE:
            self._policies.popitem(last=False)
        return model, tokenizer

    def _state_path(self, task_id: str) -> Path:
        return self.state_dir / trainstate.safe_name(task_id)


class _Ids:
    """What completion_text reads of a completion."""

    def __init__(self, token_ids: list[int], finished: bool) -> None:
        self.token_ids, self.finished = token_ids, finished


def _env(name: str):
    try:
        return get_env(name)
    except ValueError as exc:
        raise JobError(str(exc)) from None


def _prompts(env, tokenizer, indices):
    prompts = [env.prompt(i, "train") for i in indices]
    return prompts, [env.prompt_ids(tokenizer, p) for p in prompts]


def _env_call(env_name: str, what: str, fn):
    """Run environment code; whatever it raises becomes a JobError naming the environment."""
    try:
        return fn()
    except JobError:
        raise
    except Exception as exc:  # an environment is third-party code: any exception is its failure
        raise JobError(f"environment {env_name!r} raised {type(exc).__name__} while {what}: {exc}") from None
