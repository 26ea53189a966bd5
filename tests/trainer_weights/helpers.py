"""Shared builders for the weight-packing tests: small state dicts and forged manifests."""

from __future__ import annotations

import torch

from gossip.hashing import blake2b256
from trainer.weights import compute_root


def model(seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """A few tensors shaped like a tiny transformer's, with typical init scales."""
    g = torch.Generator().manual_seed(seed)
    return {
        "emb.weight": (torch.randn(64, 32, generator=g) * 0.02).to(dtype),
        "h.0.attn.weight": (torch.randn(96, 32, generator=g) * 0.02).to(dtype),
        "h.0.ln.weight": torch.ones(32, dtype=dtype),
        "h.0.ln.bias": torch.zeros(32, dtype=dtype),
        "pos_ids": torch.arange(16),
    }


def step(sd: dict[str, torch.Tensor], seed: int = 1, lr: float = 3e-5) -> dict[str, torch.Tensor]:
    """An Adam-like step: every float moves by about lr in a random direction (fp32 math)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in sd.items():
        if t.is_floating_point():
            u = torch.sign(torch.randn(t.shape, generator=g)) * (0.5 + 0.5 * torch.rand(t.shape, generator=g))
            out[name] = (t.float() - lr * u).to(t.dtype)
        else:
            out[name] = t.clone()
    return out


def reshard(fields: dict, frame: bytes) -> tuple[dict, list[bytes]]:
    """Replace the payload behind `fields` with `frame`, keeping the manifest self-consistent.

    This is what a malicious *publisher* could do (it signs whatever root it likes), so the
    receiver's payload checks must hold even when every hash and the root are correct.
    """
    size, piece = fields["shard_size"], fields["piece_size"]
    shards = [frame[i : i + size] for i in range(0, len(frame), size)]
    out = dict(fields, compressed_size=len(frame), shard_hashes=[blake2b256(s) for s in shards],
               piece_hashes=[blake2b256(frame[i : i + piece]) for i in range(0, len(frame), piece)])
    out["root"] = compute_root(out)
    return out, shards
