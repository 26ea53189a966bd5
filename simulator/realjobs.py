"""The roles' jobs for real: trainer/jobs.py's `JobWorker`, one per simulated peer, on real files.

A small scenario sets `mode = "real"` for the role job kinds (init, generate, train, verify, unpack);
then every such job a peer's core asks for is run by that peer's own `JobWorker`, the code node/'s job
process runs (the tiny model, GRPO, TOPLOC proofs, the sampling replay, weight packing), at once when
the job starts. Its duration on the virtual clock still comes from the scenario's cost model, never
from the wall clock, so a replay is exact.

Each peer has a data dir under the run's work dir (`blobs/`, `shards/`, `state/`: node/'s layout)
that survives a crash-and-restart of the same peer; its `JobWorker` (the job process: cached
policies, the duplicate memory) does not. Bytes move between peers only over the simulated network:
before a job runs, each blob or shard it names is linked into the peer's directories if and only if
the peer's `NodeStore` holds it (it fetched it, or its own job made it), so a job whose peer never
received a batch fails as node/'s would. What a job writes is linked into the world's content dir
and registered with `Content.add_file`, so it travels with its real bytes.

Cheats: a peer whose adversary behaviour has a `cheat` runs its jobs with that trainer/cheats.py
`Cheater` passed in, so the real checks, not a cost model's verdict, must catch it.

Determinism: torch runs on one thread, and seeds come from the jobs' payloads, so the same scenario and
seed give the same trace on the same machine and torch build (float results may differ across CPUs).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch

from simulator.content import Content
from simulator.rolejobs import ROLE_KINDS, objective_cost
from simulator.workload import CostModelExecutor, JobContext, JobOutcome
from swarm import jobs
from swarm.taskparams import TaskParams
from trainer.cheats import GENERATING as GENERATING_CHEATS
from trainer.cheats import Cheater
from trainer.fsutil import write_atomic
from trainer.jobs import JobError, JobWorker

WALL_SUFFIX = "_s"  # the init and train jobs name their wall-clock stats so (warmup_s, grpo_s, train_s)


class RealRoleJobs:
    """Executors for the role job kinds that run trainer/jobs.py, over one work dir and `Content`."""

    def __init__(self, content: Content, specs: dict, workdir: Path) -> None:
        """`specs`: kind -> scenario JobSpec (seconds, jitter, fail_rate: the virtual cost)."""
        torch.set_num_threads(1)  # one thread: reproducible floats, and the machine stays usable
        self.content = content
        self.workdir = Path(workdir)
        self.world = self.workdir / "content"  # one copy of every blob and shard any job wrote
        self.world.mkdir(parents=True, exist_ok=True)
        self.cost = {kind: CostModelExecutor(spec.seconds, spec.jitter, 0, spec.fail_rate)
                     for kind, spec in specs.items() if kind in ROLE_KINDS}
        self._workers: dict[int, tuple[int, object]] = {}  # peer -> (incarnation, JobWorker)

    def executor(self, kind: str) -> "RealRoleExecutor":
        return RealRoleExecutor(self, kind)

    def peer_dir(self, peer: int) -> Path:
        return self.workdir / f"peer{peer}"

    def worker(self, ctx: JobContext):
        """The peer's job process: a new one after each restart (its memory is gone, its dirs are not)."""
        entry = self._workers.get(ctx.peer)
        if entry is None or entry[0] != ctx.incarnation:
            root = self.peer_dir(ctx.peer)
            cheat = Cheater(ctx.cheat) if ctx.cheat in jobs.MALICIOUS else None
            entry = (ctx.incarnation, JobWorker(root / "blobs", root / "state", cheat=cheat))
            self._workers[ctx.peer] = entry
        return entry[1]

    # ---- moving files between the world and a peer's data dir

    def stage(self, ctx: JobContext, blobs=(), shards=()) -> None:
        """Put the inputs the job names in the peer's dirs exactly when its store holds them."""
        root = self.peer_dir(ctx.peer)
        for sub, digests, held in (("blobs", blobs, ctx.store.has_blob), ("shards", shards, ctx.store.has_shard)):
            folder = root / sub
            folder.mkdir(parents=True, exist_ok=True)
            for digest in digests:
                digest = bytes(digest)
                target = folder / digest.hex()
                if held(digest) and self.content.is_file(digest):
                    if not target.exists():
                        _link(self.world / digest.hex(), target)
                else:  # never fetched, or dropped since (node/ deletes a dropped blob's file)
                    target.unlink(missing_ok=True)

    def publish(self, ctx: JobContext, sub: str, digests) -> tuple[bytes, ...]:
        """Register what the job wrote in the peer's `sub` dir as world content; the digests."""
        out = []
        for digest in digests:
            digest = bytes(digest)
            source, target = self.peer_dir(ctx.peer) / sub / digest.hex(), self.world / digest.hex()
            if not target.exists():
                _link(source, target)
            self.content.add_file(digest, str(target), target.stat().st_size)
            out.append(digest)
        return tuple(out)


class RealRoleExecutor:
    def __init__(self, owner: RealRoleJobs, kind: str) -> None:
        self.owner = owner
        self.kind = kind
        self.cost = owner.cost[kind]

    def run(self, ctx: JobContext) -> JobOutcome:
        duration = self.cost.duration(ctx.rng)
        if self.cost.fail_rate and ctx.rng.random() < self.cost.fail_rate:
            return JobOutcome(duration, False, error=f"{ctx.kind} failed (cost model)")
        job, owner = ctx.payload, self.owner
        try:
            owner.stage(ctx, *_inputs(self.kind, job))
            result = owner.worker(ctx).run(self.kind, job)
        except JobError as exc:
            return JobOutcome(duration, False, error=str(exc)[:200])
        except Exception as exc:  # node/jobrunner.py reports any job exception as a failed job, never a crash
            return JobOutcome(duration, False, error=f"{self.kind}: {type(exc).__name__}: {exc}"[:200])
        blobs, shards, honest = (), (), None
        if self.kind == jobs.TRAIN:  # a bigger step takes longer, as in the cost model (simulator/rolejobs.py)
            duration *= train_scale(job, result)
        if self.kind in (jobs.INIT, jobs.TRAIN, jobs.UNPACK):
            # the job's wall-clock timings (warmup_s, train_s, ...) would make the trace differ run to run
            result = replace(result, stats={k: v for k, v in result.stats.items() if not k.endswith(WALL_SUFFIX)})
            blobs = owner.publish(ctx, "blobs", (result.weights,))
            if result.manifest is not None:
                state = tuple(result.state["shard_hashes"]) if getattr(result, "state", None) else ()
                shards = owner.publish(ctx, "shards", tuple(result.manifest["shard_hashes"]) + state)
        elif self.kind == jobs.GENERATE:
            honest = ctx.cheat not in GENERATING_CHEATS
            if not result.repeated:
                blobs = owner.publish(ctx, "blobs", (result.blob,))
        elif ctx.cheat == "lying-validator" or ctx.cheat == "rubber-stamp" and not result.passed:
            honest = False
        return JobOutcome(duration, True, result, honest=honest, blobs=blobs, shards=shards)


def _inputs(kind: str, job) -> tuple[tuple, tuple]:
    """(blobs, shards) a job of `kind` reads."""
    if kind == jobs.GENERATE:
        return (job.weights,), ()
    if kind == jobs.TRAIN:  # with a standby's first step, the checkpoint it fetched
        return (job.weights, *job.rollouts), (tuple(job.state.shard_hashes) if job.state is not None else ())
    if kind == jobs.VERIFY:
        return (job.weights, job.blob), ()
    if kind == jobs.UNPACK:
        return ((job.parent_weights,) if job.parent_weights else ()), tuple(job.manifest.shard_hashes)
    return (), ()


def _link(source: Path, target: Path) -> None:
    """A hard link (the same bytes, no copy), or a copy where the file system has none."""
    try:
        os.link(source, target)
    except FileExistsError:
        pass
    except OSError:
        write_atomic(target, Path(source).read_bytes())


def train_scale(job: jobs.TrainJob, result: jobs.VersionResult) -> float:
    """How much longer than the cost model's step on `prompts_per_step` prompts this step takes. The
    GRPO step computes only on completions with an advantage (trainer/train_batch.py drops the groups
    whose samples all scored the same: DAPO's dynamic sampling), so a step costs the prompts' worth of
    completions it used, never less than the base step (packing and publishing a version are paid anyway),
    and the decoupled objective's extra pass a third more (simulator/rolejobs.py `objective_cost`)."""
    params = TaskParams.from_params(job.task.params)
    used = float(dict(result.stats).get("completions_used", 0.0)) / params.group_size
    return max(1.0, used / params.prompts_per_step) * objective_cost(params)
