"""What a `RunJob` effect executes, inside one long-lived job process: `JobWorker` dispatches.

`JobWorker.run(kind, payload)` takes the payloads of `swarm/jobs.py` and returns their results.
Each kind lives in its own module over shared parts: init (trainer/initjob.py), generate
(trainer/generatejob.py), verify (trainer/verifyjob.py), train (trainer/trainjob.py) and unpack
(trainer/versions.py); the models in memory (trainer/modelcache.py) and the trainer's state on
disk (trainer/trainerstore.py). Bulk data moves through the node's blob directory only: a job reads
weights and rollout batches by hash (re-hashing what it reads) and stores what it makes under its
hash.

A dishonest job process (demonstrations and tests) is given its cheat by whoever starts it
(node/jobrunner.py, simulator/realjobs.py: a trainer/cheats.py `Cheater`); the honest code never
imports it.

Every failure an operator can cause or fix (unknown model or environment, a malformed model dir,
a missing or corrupt blob, a bad task parameter, an environment that raises) is a `JobError` whose
message says what happened; the job process reports it and keeps running. A job that names a task
first checks what the task pins (trainer/pins.py: the environment's package version, the model's
content hash): a peer that differs refuses it (`TaskRefused`, a JobError) before any work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from swarm import jobs
from trainer.batch_codec import BatchError
from trainer.blobdir import BlobDir, BlobError
from trainer.generatejob import GenerateJobs
from trainer.initjob import InitJobs
from trainer.jobenv import JobError, TaskRefused, task_env
from trainer.modelcache import ModelCache
from trainer.policy import BaseModelError, PolicyError
from trainer.taskconfig import ParamError
from trainer.trainerstore import TrainerStore
from trainer.trainjob import TrainJobs
from trainer.trainstate import StateError
from trainer.verifyjob import VerifyJobs
from trainer.versions import VersionError, Versions

__all__ = ["SAVE_EVERY", "JobError", "JobWorker"]

# How often, at most, the job process writes a trainer's master weights and moments (node/jobrunner.py;
# less often where a save is dear, trainer/trainjob.py: save_interval); it also writes them when it
# stops. A crash loses the moments since the last save, never a version (trainer.json is written every
# step): the resumed trainer then continues from the published weights, fresh moments.
SAVE_EVERY = 30.0


class JobWorker:
    def __init__(self, blob_dir: Path, state_dir: Path, progress: Callable[[dict], None] | None = None,
                 cheat=None, defer_saves: bool = False, device: str = "cpu", save_every: float = 0.0,
                 inference: str = "torch") -> None:
        """`cheat`: None, or a trainer/cheats.py `Cheater` (demonstrations and tests only).
        `inference`: what generates rollouts, "torch" or "vllm" (trainer/generatejob.py).
        `defer_saves`: the job process's saves that need not precede an answer wait for `flush`.
        `save_every`: seconds between a trainer's state saves; 0: after every step."""
        self.blobs = BlobDir(blob_dir)
        device = torch.device(device)  # where models run (generation, checks, GRPO); blobs stay on CPU
        self.versions = Versions(self.blobs, Path(blob_dir).parent / "shards")  # the node's shard store
        self.models = ModelCache(self.blobs, self.versions, device)
        self.store = TrainerStore(state_dir, self.versions, defer_saves)
        progress = progress or (lambda fields: None)
        self.initing = InitJobs(self.blobs, self.versions, self.models, self.store, device, progress)
        self.generating = GenerateJobs(self.blobs, self.models, self.store, cheat, inference)
        self.verifying = VerifyJobs(self.blobs, self.models, cheat)
        self.training = TrainJobs(self.blobs, self.versions, self.models, self.store, save_every)
        self.handlers = {jobs.INIT: self.initing.init, jobs.GENERATE: self.generating.generate,
                         jobs.TRAIN: self.training.train, jobs.VERIFY: self.verifying.verify,
                         jobs.UNPACK: self.versions.unpack}

    def run(self, kind: str, payload):
        self.flush()
        handler = self.handlers.get(kind)
        if handler is None:
            raise JobError(f"unknown job kind {kind!r}; this job process runs {sorted(self.handlers)}")
        try:
            task = getattr(payload, "task", None)
            if task is not None:
                task_env(task)  # TaskRefused before any work when this peer differs from the task's pins
            return handler(payload)
        except VersionError as exc:  # unpack: the message names the version already
            raise JobError(str(exc)) from None
        except BaseModelError as exc:  # the task's model does not load here: this peer cannot work on it
            raise TaskRefused(f"refused: {exc}") from None
        except (PolicyError, BlobError, BatchError, ParamError, StateError) as exc:
            raise JobError(f"{kind}: {exc}") from None

    def flush(self) -> None:
        """Run the saves the last job deferred. Every job starts with this, so no job sees stale state."""
        self.store.flush()

    def close(self) -> None:
        """Write what a stopping job process must not lose: deferred saves, and the master weights and
        moments of every trainer that stepped since its last save (the resume after Ctrl-C continues
        from exactly them)."""
        self.flush()
        self.training.close()
