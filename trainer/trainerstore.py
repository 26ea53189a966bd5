"""The trainer's state on disk, one directory per task (`state_dir/<task>/`), and when it is written.

What a restarted job process resumes from: the last version trained (trainer/trainstate.py,
written every step, before the version is published), the full-precision master weights behind it
(trainer/versions.py) and the optimizer moments (trainstate). The master weights and moments are
about 12 bytes per parameter; the job process defers writing them until after its answer (`later`,
run by `flush` before the next job reads anything), which keeps them off the swarm's critical path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from trainer import trainstate
from trainer.versions import Versions


class TrainerStore:
    def __init__(self, state_dir: Path, versions: Versions, defer_saves: bool = False) -> None:
        self.root = Path(state_dir)
        self.versions = versions
        self.defer_saves = defer_saves  # the job process: saves that need not precede the answer wait for `flush`
        self._deferred: list[Callable[[], None]] = []

    def path(self, task_id: str) -> Path:
        """The task's state directory (also where generate jobs record their slices: trainer/generated.py)."""
        return self.root / trainstate.safe_name(task_id)

    def later(self, save: Callable[[], None]) -> None:
        """Run `save` now, or at the next `flush` when saves are deferred."""
        if self.defer_saves:
            self._deferred.append(save)
        else:
            save()

    def flush(self) -> None:
        """Run the deferred saves. Every job starts with this, so no job sees stale state."""
        while self._deferred:
            self._deferred.pop(0)()

    def last_version(self, task_id: str) -> dict | None:
        """{"version", "weights" (hex)} of the last version trained for the task, or None."""
        return trainstate.saved(self.path(task_id))

    def record_version(self, task_id: str, version: int, weights: bytes, term: int = 0) -> None:
        """Record the version about to be published and its chain's term (what a restarted trainer resumes from)."""
        trainstate.save_version(self.path(task_id), version, weights, term)

    def save(self, task_id: str, optimizer: torch.optim.Optimizer, version: int, weights: bytes,
             master: bytes) -> None:
        """The master weights and optimizer moments behind published version `version` (`weights`)."""
        path = self.path(task_id)
        self.versions.save_master(path, weights, master)
        trainstate.save(path, optimizer, version, weights)

    def master(self, task_id: str, weights: bytes) -> bytes | None:
        """The saved master weights behind published `weights`, if they are the ones saved."""
        return self.versions.master(self.path(task_id), weights)

    def load_moments(self, task_id: str, optimizer: torch.optim.Optimizer, version: int, weights: bytes) -> bool:
        """Load the saved moments into `optimizer` if they belong to exactly this version and weights."""
        return trainstate.load_if_matching(self.path(task_id), optimizer, version, weights)
