"""Policy versions as they travel: the trainer packs each one, every follower unpacks it.

The trainer's job process calls `publish` after init and after every GRPO step: the model's weights
are packed with trainer/weights (floats carried in bf16, a zigzag delta against the previous
version when that is smaller, a full version at least every `full_every` versions, zstd, shards of
`shard_size` bytes), each shard is written to the node's shard store (named by its blake2b-256,
like blobs), and the manifest fields go back to the core, which signs and gossips them.

What every peer then uses is the version *as reconstructed from the shards*: floats rounded to the
carried dtype (and stored in it: models widen them as they load). `published_blob` writes that form
as a weights blob, and the trainer uses it too (for its verify jobs), so the trainer checks rollouts
against exactly the weights workers generated with; its own optimizer keeps the full-precision
master weights.

Task params: `shard_size` (bytes, default 1 MiB), `piece_size` (bytes, a divisor of `shard_size`:
what peers request and relay one by one; default 256 KiB where it divides `shard_size`, else the
shard), `full_every` (default 8), `weights_dtype` ("bf16", "fp16" or "fp32"; default "bf16").
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import torch

from gossip.messages import WeightManifest
from swarm import jobs
from trainer.blobdir import BlobDir
from trainer.crashpoints import crash_point
from trainer.fsutil import discard, write_atomic
from trainer.taskconfig import ParamError, int_param
from trainer.weights import WeightsError, default_piece_size, pack_version, unpack_version
from trainer.weights.manifest import FORMAT, MIN_PIECE_SIZE
from trainer.weights.tensors import CARRY_DTYPES, carried

DEFAULT_SHARD_SIZE = 1 << 20
MASTER_FILE = "master-weights"  # in the trainer's state dir: "<published hash> <master blob hash>"
DEFAULT_FULL_EVERY = 8
UNPACKED_CACHE_BYTES = 64 << 20  # parsed weights kept by `Versions.unpack` (the built-in model: 5 MB each)
# The newest rebuilt version is kept past that budget up to this size: the next version's unpack
# needs it as its delta parent and the generate job as its policy. Dropping SmolLM2-135M's (270 MB in
# bf16) made the worker read, hash and parse it twice a version, on the swarm's critical path (in
# py-spy of a 2-peer bench/learning.py worker, blob reads and blake2b were about a tenth of its samples).
UNPACKED_NEWEST_MAX = 1 << 30


class VersionError(RuntimeError):
    """A version could not be packed or rebuilt (the message says why)."""


def state_of_blob(data: bytes) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    return load(bytes(data))


def _master_record(state_path: Path) -> tuple[bytes, bytes] | None:
    """(published weights hash, master blob hash) from MASTER_FILE, or None if missing or unreadable."""
    try:
        published, digest = (state_path / MASTER_FILE).read_text().split()
        published, digest = bytes.fromhex(published), bytes.fromhex(digest)
        if len(published) != 32 or len(digest) != 32:
            raise ValueError("not two 32-byte hashes")
        return published, digest
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # damaged: resume from the published weights instead
        discard(state_path / MASTER_FILE, f"unreadable ({exc}); the trainer resumes from the published weights")
        return None


def published_blob(tensors: dict[str, torch.Tensor], dtype: str) -> bytes:
    """The weights blob of a version as peers rebuild it: floats rounded to `dtype` and stored in it
    (bf16: half the bytes to write, hash and read of a float32 blob, every version on every peer)."""
    return blob_of(published_state(tensors, dtype))


def published_state(tensors: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    """The tensors `published_blob` stores, never sharing memory with the input (which may be a
    live model's parameters: the trainer keeps these as the next delta's parent)."""
    out = {}
    for name in sorted(tensors):
        t = carried(tensors[name], dtype)
        out[name] = t.clone() if t.data_ptr() == tensors[name].data_ptr() else t
    return out


def blob_of(state: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(state, metadata={"format": "pt"})


def pack_settings(params) -> tuple[int, int, int, str]:
    """(shard_size, piece_size, full_every, dtype) from task params."""
    shard_size = min(int_param(params, "shard_size", DEFAULT_SHARD_SIZE, lo=256), 64 << 20)
    piece_size = int_param(params, "piece_size", default_piece_size(shard_size), lo=MIN_PIECE_SIZE)
    if shard_size % piece_size:
        raise ParamError(f"task param piece_size ({piece_size}) must divide shard_size ({shard_size})")
    full_every = int_param(params, "full_every", DEFAULT_FULL_EVERY, lo=1)
    dtype = params.get("weights_dtype", "bf16")
    if dtype not in CARRY_DTYPES:
        raise ParamError(f"task param weights_dtype must be one of {CARRY_DTYPES}, got {dtype!r}")
    return shard_size, piece_size, full_every, dtype


class Versions:
    def __init__(self, blobs: BlobDir, shard_dir: Path) -> None:
        self.blobs = blobs
        self.shards = BlobDir(shard_dir, point="shard")
        self._last: dict[str, tuple[bytes, dict[str, torch.Tensor]]] = {}  # task -> (root, tensors) just packed
        # weights blobs this process just rebuilt, parsed: the next version's delta parent and the
        # generate job's policy, without reading and hashing the file again (a worker's job
        # process spent about 7% of its time on that, once per version)
        self._unpacked: OrderedDict[bytes, tuple[dict[str, torch.Tensor], int]] = OrderedDict()  # -> (state, bytes)

    def publish(self, task: jobs.TaskSpec, tensors: dict[str, torch.Tensor], parent_weights: bytes = b"",
                parent_root: bytes = b"", parent_depth: int = 0) -> tuple[bytes, int, dict]:
        """Pack `tensors` (float32 master weights) as the next version: (blob hash, size, manifest fields)."""
        shard_size, piece_size, full_every, dtype = pack_settings(task.params)
        parent = None
        if parent_root:
            last = self._last.get(task.task_id)
            if last is not None and last[0] == bytes(parent_root):
                parent = last[1]
            elif parent_weights and self.blobs.path(parent_weights).exists():
                parent = state_of_blob(self.blobs.read(parent_weights, "parent weights"))
        # carried once: packing the carried tensors carries nothing again (casting is idempotent),
        # where packing the master would dither all of it a second time
        state = published_state(tensors, dtype)
        packed = pack_version(state, parent, shard_size=shard_size, piece_size=piece_size, dtype=dtype,
                              parent_root=bytes(parent_root) if parent is not None else None,
                              parent_depth=parent_depth, full_every=full_every)
        for shard in packed.shards:
            self.shards.write(shard)
            crash_point("version-pack")  # a version half packed: some shards, no blob, no trainer.json
        data = blob_of(state)
        digest = self.blobs.write(data)
        self._last[task.task_id] = (packed.root, state)
        return digest, len(data), message_fields(packed)

    def save_master(self, state_path: Path, published: bytes, master: bytes) -> None:
        """Remember the full-precision weights behind a published version, so a restarted trainer
        resumes from them rather than from the rounded version peers run."""
        digest = self.blobs.write(master)
        state_path.mkdir(parents=True, exist_ok=True)
        before = _master_record(state_path)
        write_atomic(state_path / MASTER_FILE, f"{bytes(published).hex()} {digest.hex()}\n".encode(),
                     point="master-weights")
        if before is not None and before[1] != digest:  # only the newest is ever resumed from
            self.blobs.path(before[1]).unlink(missing_ok=True)

    def master(self, state_path: Path, published: bytes) -> bytes | None:
        record = _master_record(state_path)
        if record is None or record[0] != bytes(published) or not self.blobs.path(record[1]).exists():
            return None
        try:
            return self.blobs.read(record[1], "master weights")
        except OSError:
            return None

    def unpack(self, job: jobs.UnpackJob) -> jobs.VersionResult:
        m: WeightManifest = job.manifest
        shards = [self.shards.read(h, f"shard {i} of version {job.version}") for i, h in enumerate(m.shard_hashes)]
        parent = None
        if m.encoding == "delta":
            parent = self.unpacked(job.parent_weights)
            if parent is None:
                parent = state_of_blob(self.blobs.read(job.parent_weights, "parent weights"))
        try:
            tensors = unpack_version(manifest_fields(m), shards, parent)
        except WeightsError as exc:
            raise VersionError(f"version {job.version} does not rebuild: {exc}") from None
        state = published_state(tensors, m.dtype)
        data = blob_of(state)
        digest = self.blobs.write(data)
        self._remember(digest, state, len(data))
        return jobs.VersionResult(job.version, digest, len(data))

    def unpacked(self, digest: bytes) -> dict[str, torch.Tensor] | None:
        """The parsed tensors of a weights blob this process rebuilt recently (never modify them)."""
        kept = self._unpacked.get(bytes(digest))
        return None if kept is None else kept[0]

    def _remember(self, digest: bytes, state: dict[str, torch.Tensor], size: int) -> None:
        """Keep `state` as the newest; older ones go once the budget is spent (the newest always stays,
        unless it is over UNPACKED_NEWEST_MAX: for a model that large, memory is the dearer cost)."""
        if size > UNPACKED_NEWEST_MAX:
            return
        self._unpacked[bytes(digest)] = (state, size)
        self._unpacked.move_to_end(bytes(digest))
        while len(self._unpacked) > 1 and sum(n for _, n in self._unpacked.values()) > UNPACKED_CACHE_BYTES:
            self._unpacked.popitem(last=False)


def message_fields(packed) -> dict:
    """`WeightManifest` fields (all but task_id, version, parent_version, created_at) of a packed version."""
    return {"parent_root": packed.parent_root or b"", "encoding": packed.encoding, "dtype": packed.dtype,
            "root": packed.root, "shard_size": packed.shard_size, "raw_size": packed.raw_size,
            "compressed_size": packed.compressed_size, "shard_hashes": tuple(packed.shard_hashes),
            "piece_size": packed.piece_size, "piece_hashes": tuple(packed.piece_hashes),
            "tensors": tuple((t.name, t.dtype, tuple(t.shape), t.hash) for t in packed.tensors),
            "delta_op": packed.delta_op or "", "depth": packed.depth, "shuffle": packed.shuffle}


def manifest_fields(m: WeightManifest) -> dict:
    """The trainer/weights manifest fields of a signed manifest (parse_manifest re-checks the root)."""
    return {"format": FORMAT, "encoding": m.encoding, "delta_op": m.delta_op or None,
            "parent_root": m.parent_root or None, "depth": m.depth, "dtype": m.dtype, "shuffle": m.shuffle,
            "shard_size": m.shard_size, "raw_size": m.raw_size, "compressed_size": m.compressed_size,
            "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "hash": t.hash} for t in m.tensors],
            "shard_hashes": list(m.shard_hashes), "piece_size": m.piece_size,
            "piece_hashes": list(m.piece_hashes), "root": m.root}
