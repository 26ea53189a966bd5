"""A trainer's state as content-addressed shards: what a standby needs to continue its run.

Packed with trainer/weights like a version (fp32, byte-shuffled, zstd, shards and pieces under one
root), so it travels over the same exchange and is checked the same way. Tensors:

    master.<name>      fp32 master weights minus the published (rounded) weights: exact, since
                       `published + (master - published)` rounds back to `master`, and with a bf16
                       version the low mantissa byte of every difference is zero, which the shuffle
                       and zstd collapse
    exp_avg.<name>, exp_avg_sq.<name>, step.<name>
                       AdamW's state per parameter (names, not optimizer indices, so another
                       process's optimizer over the same model lines up)
    rng.torch          the job process's torch RNG state
    weights            the blake2b-256 of the published weights blob the residuals apply to

`restore` applies the moments, step and RNG always, and the master weights only when the job
continues from exactly that published version (else the residuals belong to other weights).
"""

from __future__ import annotations

import torch

from trainer.blobdir import BlobError
from trainer.crashpoints import crash_point
from trainer.versions import pack_settings
from trainer.weights import WeightsError, pack_version, unpack_version
from trainer.weights.manifest import FORMAT
from trainer.weights.tensors import carried

EXACT, MOMENTS = 2, 1  # what `restore` applied


class CheckpointError(RuntimeError):
    """A checkpoint could not be read back (the message says why)."""


def state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer, dtype: str,
                  published: bytes) -> dict[str, torch.Tensor]:
    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        master = p.detach().to("cpu", torch.float32)
        out[f"master.{name}"] = (master - carried(master, dtype).float()).contiguous()
    for group in optimizer.param_groups:
        for p in group["params"]:
            entry = optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq", "step"):
                if key in entry:
                    value = entry[key]
                    value = value if torch.is_tensor(value) else torch.tensor(float(value))
                    out[f"{key}.{names[id(p)]}"] = value.detach().to("cpu", torch.float32).reshape(-1).contiguous()
    out["rng.torch"] = torch.get_rng_state().clone()
    out["weights"] = torch.frombuffer(bytearray(published), dtype=torch.uint8).clone()
    return out


def pack(params, model: torch.nn.Module, optimizer: torch.optim.Optimizer, published: bytes,
         write_shard) -> dict:
    """Pack the state; every shard goes to `write_shard`; returns the checkpoint's packing fields."""
    shard_size, _, _, dtype = pack_settings(params)
    # whole shards as pieces: a checkpoint goes from one trainer to a few standbys, where a request per
    # round trip moves four times the bytes of the weights' smaller pieces (those pay off relayed wide)
    packed = pack_version(state_tensors(model, optimizer, dtype, published), None, shard_size=shard_size,
                          piece_size=shard_size, dtype="fp32")
    for shard in packed.shards:
        write_shard(shard)
        crash_point("checkpoint-pack")
    return {"root": packed.root, "dtype": packed.dtype, "shard_size": packed.shard_size,
            "raw_size": packed.raw_size, "compressed_size": packed.compressed_size,
            "shard_hashes": tuple(packed.shard_hashes), "piece_size": packed.piece_size,
            "piece_hashes": tuple(packed.piece_hashes), "shuffle": packed.shuffle,
            "tensors": tuple((t.name, t.dtype, tuple(t.shape), t.hash) for t in packed.tensors)}


def fields_of(c) -> dict:
    """The trainer/weights manifest fields of a signed TrainerCheckpoint (parse_manifest re-checks the root)."""
    return {"format": FORMAT, "encoding": "full", "delta_op": None, "parent_root": None, "depth": 0,
            "dtype": c.dtype, "shuffle": c.shuffle, "shard_size": c.shard_size, "raw_size": c.raw_size,
            "compressed_size": c.compressed_size,
            "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "hash": t.hash} for t in c.tensors],
            "shard_hashes": list(c.shard_hashes), "piece_size": c.piece_size,
            "piece_hashes": list(c.piece_hashes), "root": c.root}


def read(c, read_shard) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, every shard and tensor checked against its hashes."""
    try:
        shards = [read_shard(h, f"shard {i} of the trainer checkpoint of version {c.version}")
                  for i, h in enumerate(c.shard_hashes)]
        return unpack_version(fields_of(c), shards, None)
    except (OSError, BlobError, WeightsError) as exc:
        raise CheckpointError(f"trainer checkpoint of version {c.version} unreadable: {exc}") from None


def restore(tensors: dict[str, torch.Tensor], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            published: bytes) -> int:
    """Apply a checkpoint to a trainer rebuilt from `published` weights; EXACT or MOMENTS (what it applied)."""
    params = dict(model.named_parameters())
    missing = [n for n in params if f"exp_avg.{n}" not in tensors]
    if missing:
        raise CheckpointError(f"trainer checkpoint lacks the moments of {missing[0]} (another model?)")
    exact = bytes(tensors["weights"].numpy().tobytes()) == bytes(published)
    with torch.no_grad():
        for name, p in params.items():
            for key in ("exp_avg", "exp_avg_sq"):
                if tensors[f"{key}.{name}"].numel() != p.numel():
                    raise CheckpointError(f"trainer checkpoint's {key} of {name} has another shape")
            state = optimizer.state[p]
            state["exp_avg"] = tensors[f"exp_avg.{name}"].reshape(p.shape).to(p.device, p.dtype).clone()
            state["exp_avg_sq"] = tensors[f"exp_avg_sq.{name}"].reshape(p.shape).to(p.device, p.dtype).clone()
            state["step"] = tensors[f"step.{name}"].reshape(()).clone()
            if exact:
                master = p.detach().to("cpu", torch.float32) + tensors[f"master.{name}"].reshape(p.shape)
                p.copy_(master.to(p.device, p.dtype))
    torch.set_rng_state(tensors["rng.torch"])
    return EXACT if exact else MOMENTS
