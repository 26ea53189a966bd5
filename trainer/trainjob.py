"""The train job: one GRPO step on validated rollout batches, version -> version + 1.

The trainer's model and optimizer stay in memory between steps (one per task). After a step the
version is recorded and published at once; its master weights and optimizer moments are written
(trainer/trainerstore.py) at most every `save_every` seconds (longer if a save costs over a
twentieth of that) and when the job process stops (`close`), so a restarted trainer given the same
version resumes with the same Adam moments; given any other version (a crash since the last save)
it starts a fresh optimizer from the published weights. Writing both after every step cost the job
process, the swarm's critical path on one machine, about 65 ms of CPU and more of wall time per
version.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from swarm import jobs
from trainer.batch_codec import RolloutBatch, decode
from trainer import checkpoint
from trainer.blobdir import BlobDir
from trainer.grpo import grpo_step, lr_at, make_optimizer, sized_for
from trainer.jobenv import JobError
from trainer.modelcache import ModelCache
from trainer.policy import load_weights, weights_bytes, weights_state
from trainer.taskconfig import grpo_config
from trainer.train_batch import build_batch
from trainer.trainerstore import TrainerStore
from trainer.versions import Versions


@dataclass
class Trainer:
    """A task's trainer in memory: its model and optimizer at `version` (published as `weights`)."""
    model_name: str
    model: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    version: int
    weights: bytes
    saved_at: float | None = None  # monotonic time of the last save of master weights and moments
    save_s: float = 0.0  # what that save took
    unsaved: bool = False  # the model and optimizer moved past what the state dir holds
    restored: int = 0  # checkpoint.EXACT / MOMENTS: what a standby's checkpoint gave it (-1: unreadable)


SAVE_SHARE = 20  # a trainer's state saves are at least this many times their own cost apart


def save_interval(save_every: float, last_save_s: float) -> float:
    """Seconds between a trainer's state saves: `save_every` (0: every step), or longer where a save
    is dear, so that at most 1/SAVE_SHARE of the job process's time goes to saving. Why: the master
    and the moments are 12 bytes a parameter (1.6 GB for SmolLM2-135M, seconds to serialize, hash
    and write), and the job process shares its cores with the peer's workers and checks, so a save
    every 30 s took CPU the swarm's generation needed; a crash costs the moments since the last
    save, never a version."""
    return save_every and max(save_every, SAVE_SHARE * last_save_s)


class TrainJobs:
    def __init__(self, blobs: BlobDir, versions: Versions, models: ModelCache, store: TrainerStore,
                 save_every: float = 0.0) -> None:
        self.blobs, self.versions, self.models, self.store = blobs, versions, models, store
        self.save_every = save_every  # seconds between a trainer's state saves; 0: after every step
        self._trainers: dict[str, Trainer] = {}
        self._packed: dict[str, dict] = {}  # task -> checkpoint fields packed since the last answer

    def train(self, job: jobs.TrainJob) -> jobs.VersionResult:
        """One GRPO step on the validated batches: version -> version + 1."""
        task = job.task
        if not job.rollouts:
            raise JobError("train: the job names no rollout batches")
        batches = [self._rollout_batch(task.task_id, job.version, h) for h in job.rollouts]
        cfg = sized_for(grpo_config(task.params), sum(len(b.prompt_indices) for b in batches))
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
        task_id, version = task.task_id, job.version + 1
        self.store.record_version(task_id, version, digest, job.term)
        st.version, st.weights, st.unsaved = version, digest, True
        # the master weights and the moments (about 12 bytes per parameter) are written after the
        # answer when the job process defers saves (off the critical path, before the next job reads
        # them), and only every `save_interval` seconds (`close` writes the rest); a trainer killed in
        # between resumes from the published weights
        now = time.monotonic()
        if st.saved_at is None or now - st.saved_at >= save_interval(self.save_every, st.save_s):
            st.saved_at = now
            self.store.later(lambda: self._save(task_id, st))
        if job.pack_state:  # after the answer too, before the next step moves the state on
            root = manifest["root"]
            self.store.later(lambda: self._pack_state(task, st, version, digest, root))
        packed, pack_s = self._packed.pop(task_id, (None, 0.0))
        if packed is not None:  # packed after an earlier answer: its cost is reported now
            stats.update(state_pack_s=pack_s, state_bytes=float(packed["compressed_size"]))
        if st.restored:
            stats["state_restored"], st.restored = float(st.restored), 0
        stats["train_s"] = time.monotonic() - t0
        return jobs.VersionResult(st.version, digest, size, stats, manifest, packed)

    def _pack_state(self, task: jobs.TaskSpec, st: Trainer, version: int, published: bytes, root: bytes) -> None:
        if st.version != version:  # another step ran first (a save flushed late): that state is gone
            return
        t0 = time.monotonic()
        fields = checkpoint.pack(task.params, st.model, st.optimizer, published, self.versions.shards.write)
        self._packed[task.task_id] = ({**fields, "version": version, "weights_root": bytes(root),
                                       "step": _adam_step(st.optimizer)}, time.monotonic() - t0)

    def close(self) -> None:
        """Write the master weights and moments of every trainer that stepped since its last save."""
        for task_id, st in self._trainers.items():
            if st.unsaved:
                self._save(task_id, st)

    def _save(self, task_id: str, st: Trainer) -> None:
        t0 = time.monotonic()
        self.store.save(task_id, st.optimizer, st.version, st.weights, weights_bytes(st.model))
        st.unsaved, st.save_s = False, time.monotonic() - t0

    def _trainer(self, job: jobs.TrainJob, cfg) -> Trainer:
        """The in-memory trainer if it is at this job's version and weights, else one rebuilt from
        the weights blob (with the saved optimizer state when it belongs to exactly that version)."""
        task_id, name = job.task.task_id, job.task.model
        st = self._trainers.get(task_id)
        if st is not None and (st.version, st.weights, st.model_name) == (job.version, bytes(job.weights), name):
            return st
        data = (self.store.master(task_id, job.weights)
                or self.blobs.read(job.weights, f"weights of version {job.version}"))
        template, tokenizer = self.models.template(name)
        model = copy.deepcopy(template)
        load_weights(model, data)
        optimizer = make_optimizer(model, cfg)
        loaded = self.store.load_moments(task_id, optimizer, job.version, bytes(job.weights))
        restored = 0
        if job.state is not None and not loaded:  # a standby's first step: the active trainer's state
            try:
                restored = checkpoint.restore(checkpoint.read(job.state, self.versions.shards.read), model,
                                              optimizer, bytes(job.weights))
            except checkpoint.CheckpointError:  # checked by hash on arrival: only a damaged disk gets here
                optimizer, restored = make_optimizer(model, cfg), -1  # continue with fresh moments
                load_weights(model, data)
        st = self._trainers[task_id] = Trainer(name, model, tokenizer, optimizer, job.version, bytes(job.weights),
                                               restored=restored)
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


def _adam_step(optimizer: torch.optim.Optimizer) -> int:
    """Optimizer steps taken so far (every parameter has stepped as often)."""
    for state in optimizer.state.values():
        step = state.get("step")
        if step is not None:
            return int(step.item() if torch.is_tensor(step) else step)
    return 0
