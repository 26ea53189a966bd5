"""The blocking work a peer asks its runtime to do, as plain frozen descriptions.

The core emits `RunJob(job_id, kind, payload)` with one of these payloads and later receives
`JobFinished(job_id, ok, result)` with the matching result. `node/` runs them in a job process
(`trainer/jobs.py`), the simulator runs them for real or by a cost model. Bulk data never travels
in a payload: weights and rollout batches are content-addressed blobs named by their blake2b-256
hash; the runtime knows where its blobs live (the node's blob store, the simulator's memory), and a
job that produces a blob stores it there and returns its hash and size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

INIT = "init"  # trainer: build (or load) the task's base model and store it as version 0
GENERATE = "generate"  # worker: roll out assigned prompts with a policy version
TRAIN = "train"  # trainer: one GRPO step on validated rollout batches -> the next version
VERIFY = "verify"  # validator: re-check a committed rollout batch (proofs issue)
UNPACK = "unpack"  # any follower: rebuild a version from its verified shards (and its parent) as a blob
KINDS = (INIT, GENERATE, TRAIN, VERIFY, UNPACK)  # every kind a role emits

# A job error that starts with this: the peer cannot work on the task as signed (an environment, a
# generator version or a model it lacks or holds in another version: trainer/pins.py). The role stops
# working on that task (no more jobs for it) and says why once (`task-refused`); a node restarted after
# installing or fetching what was missing tries again.
REFUSED = "refused: "


def refused(error: str) -> bool:
    return isinstance(error, str) and error.startswith(REFUSED)


# How a job process may be told to cheat (`swarm-node start --malicious KIND`, for demonstrations and
# tests; trainer/cheats.py does it). The core never knows: a malicious peer runs the honest protocol
# around dishonest jobs, exactly what an attacker with a modified job process would do.
MALICIOUS = ("other-model", "low-precision", "int8-quant", "laundered", "fabricated-tokens", "inflated-reward",
             "cherry-pick", "replay", "lying-validator", "rubber-stamp")


@dataclass(frozen=True)
class TaskSpec:
    """What every job needs to know about its task (copied from the signed announcement)."""

    task_id: str
    model: str
    env: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InitJob:
    task: TaskSpec
    seed: int  # the base model's seed (built-in models are created and warmed up from it)


@dataclass(frozen=True)
class GenerateJob:
    task: TaskSpec
    version: int
    weights: bytes  # blob hash of the policy's weights for `version`
    prompt_indices: tuple[int, ...]
    samples_per_prompt: int
    worker_key: bytes  # seeds derive from (task, worker, version, prompt, sample)


@dataclass(frozen=True)
class TrainJob:
    task: TaskSpec
    version: int  # the version being trained from; the result is version + 1
    weights: bytes  # blob hash of `version`'s weights
    rollouts: tuple[bytes, ...]  # blob hashes of validated rollout batches
    parent_root: bytes = b""  # manifest root of `version` (what the new version's delta applies to)
    parent_depth: int = 0  # its depth (deltas since the last full version)
    term: int = 0  # the chain's term: recorded with the version, so a restarted trainer knows the term it signed
    pack_state: bool = False  # pack the trainer state after this step (a checkpoint for standbys)
    state: Any = None  # a gossip.messages.TrainerCheckpoint to continue from (a standby's first step)


@dataclass(frozen=True)
class UnpackJob:
    """Rebuild `version` from its shards (in the node's shard store) and, for a delta, its parent."""

    task_id: str
    version: int
    manifest: Any  # the signed gossip.messages.WeightManifest
    parent_weights: bytes  # blob hash of the parent version's weights; empty for a full encoding


@dataclass(frozen=True)
class VersionResult:
    """INIT, TRAIN and UNPACK results: a policy version stored as a blob.

    `weights` is the version as every peer reconstructs it from the shards (floats rounded to the
    carried dtype), so the trainer checks rollouts against exactly what workers generated with.
    INIT and TRAIN also pack it: `manifest` holds the `WeightManifest` fields other than task_id,
    version, parent_version and created_at (its shards are already in the shard store)."""

    version: int
    weights: bytes  # blob hash
    size: int
    stats: Mapping[str, float] = field(default_factory=dict)  # loss, reward, accuracy, ... for operators
    manifest: Mapping[str, Any] | None = None
    # TRAIN: a trainer checkpoint packed since the last result (its shards are in the shard store): the
    # TrainerCheckpoint fields but task_id, term, rank and created_at, with `version` and `weights_root`
    # naming the version it belongs to (packing is deferred, so it may be an earlier version's).
    state: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class GenerateResult:
    blob: bytes  # blob hash of the rollout batch
    size: int
    num_tokens: int
    mean_reward: float
    # Only a cheating job (the cherry-pick demo) answers with prompts other than those it was given;
    # the worker commits to whatever the batch really holds, so validators can catch it.
    prompt_indices: tuple[int, ...] | None = None
    # The job had generated this slice before (the worker restarted since): committing it again
    # would look like a replay (two commitments for one slice), so nothing was generated.
    repeated: bool = False


@dataclass(frozen=True)
class VerifyJob:
    """Re-check one committed rollout batch with the validator's own copy of the policy."""

    task: TaskSpec
    worker_key: bytes
    version: int  # the policy version the commitment claims
    weights: bytes  # blob hash of that version's weights
    blob: bytes  # blob hash of the rollout batch
    prompt_indices: tuple[int, ...]
    samples_per_prompt: int
    mean_reward: float
    num_tokens: int


@dataclass(frozen=True)
class VerifyResult:
    passed: bool
    reason: str  # a stable reason code ("ok" when passed)
    evidence_hash: bytes  # blake2b-256 of the evidence (what failed, the numbers), or empty
    detail: str = ""
