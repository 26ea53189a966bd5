"""The init job: version 0 of a task, or the last version a restarted trainer published.

The built-in model is created from the job's seed and warmed up; other models load from disk. A
trainer restarted on its data dir republishes its last version as a full one instead (`resume`):
peers that rejoin may hold none of its ancestors.
"""

from __future__ import annotations

import copy
import time
from typing import Callable

import torch

from swarm import jobs
from trainer.blobdir import BlobDir
from trainer.inference import TorchBackend
from trainer.jobenv import JobError, env_call, task_env
from trainer.modelcache import ModelCache
from trainer.policy import base_model, is_builtin, load_weights, weights_state
from trainer.rollout import accuracy
from trainer.taskconfig import grpo_config, int_param, warmup_config
from trainer.trainerstore import TrainerStore
from trainer.versions import Versions, state_of_blob


class InitJobs:
    def __init__(self, blobs: BlobDir, versions: Versions, models: ModelCache, store: TrainerStore,
                 device: torch.device, progress: Callable[[dict], None]) -> None:
        self.blobs, self.versions, self.models, self.store = blobs, versions, models, store
        self.device, self.progress = device, progress

    def init(self, job: jobs.InitJob) -> jobs.VersionResult:
        """Version 0: the built-in model created from `seed` and warmed up, or a model from disk.
        A trainer restarted on its data dir gets the last version it published instead (`resume`)."""
        task, params = job.task, job.task.params
        env = task_env(task)
        resumed = self.resume(task)
        if resumed is not None:
            return resumed
        # progress fields: what `swarm-node local` prints while version 0 is built (node/local_progress.py)
        self.progress({"stage": "model", "model": task.model})
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
            self.progress({"stage": "heldout", "prompts": n_eval})
            backend = TorchBackend(model, tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=False)
            max_new = grpo_config(params).max_new_tokens
            stats["heldout_greedy"] = env_call(task.env, "scoring held-out prompts", lambda: accuracy(
                env, tokenizer, backend, n_eval, temperature=0.0, max_new_tokens=max_new))
        self.progress({"stage": "pack"})
        digest, size, manifest = self.versions.publish(task, weights_state(model))
        load_weights(model, self.blobs.read(digest))  # peers run the version as rebuilt from its shards
        self.models.adopt_template(task.model, model, tokenizer)
        self.models.remember(digest, model, tokenizer)
        return jobs.VersionResult(0, digest, size, stats, manifest)

    def resume(self, task: jobs.TaskSpec) -> jobs.VersionResult | None:
        """The last version this trainer trained for `task` (trainer.json in its state dir, written
        just before the version is published; the weights in its blob store), published again as a
        full version. The next train job continues from the saved master weights and optimizer
        moments (trainer/trainjob.py), so a stopped run resumes where it stopped."""
        record = self.store.last_version(task.task_id)
        if record is None:
            return None
        version, published = int(record["version"]), bytes.fromhex(record["weights"])
        if not self.blobs.path(published).exists():
            self.progress({"stage": "resume", "skipped": f"weights of version {version} are gone; starting at 0"})
            return None
        data = self.blobs.read(published, f"weights of version {version}")
        template, tokenizer = self.models.template(task.model)  # the task's model must resolve, and fit them
        model = copy.deepcopy(template)
        load_weights(model, data)
        digest, size, manifest = self.versions.publish(task, state_of_blob(data))
        if digest != published:
            raise JobError(f"init: version {version} saved in {self.store.path(task.task_id)} does not "
                           "republish to the same weights; delete that directory to start from version 0")
        self.progress({"stage": "resume", "version": version})
        self.models.remember(digest, model.eval(), tokenizer)  # verify jobs check rollouts of it
        term = float(record.get("term", 0))  # files written before terms existed have none: term 0
        return jobs.VersionResult(version, digest, size, {"resumed": 1.0, "term": term}, manifest)
