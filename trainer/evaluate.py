"""Held-out accuracy of a policy version, for offline learning curves (bench/, operators).

    evaluate_weights(blob_path_or_state_dict, "builtin:digit-sort-tiny", "digit-sort")
    -> {"greedy": 0.41, "sampled": 0.27}

Greedy is one argmax completion per held-out prompt; sampled is one seeded temperature-1 sample per
prompt (seeds fixed by `seed_tag`, so two versions are compared on the same noise). Both use the
same reward checker as training, on the held-out split that training never sees.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from trainer.envs import Environment, get_env
from trainer.inference import TorchBackend
from trainer.policy import base_model, load_weights
from trainer.rollout import accuracy


def evaluate_weights(weights: str | os.PathLike | bytes | dict, model: str = "builtin:digit-sort-tiny",
                     env: str | Environment = "digit-sort", n_heldout: int = 256,
                     max_new_tokens: int = 10, seed_tag: str = "eval") -> dict[str, float]:
    """`weights`: a weights blob file (as stored by the init/train jobs), its bytes, or a state dict."""
    net, tokenizer = base_model(model, 0)
    if isinstance(weights, dict):
        net.load_state_dict(weights, strict=False)
        missing = set(net.state_dict()) - set(weights) - set(getattr(net, "_tied_weights_keys", None) or {})
        if missing:
            raise ValueError(f"state dict is missing {sorted(missing)[:3]}")
    else:
        data = weights if isinstance(weights, (bytes, bytearray)) else Path(weights).read_bytes()
        load_weights(net, bytes(data))
    env = get_env(env) if isinstance(env, str) else env
    backend = TorchBackend(net.eval(), tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=False)
    with torch.no_grad():
        return {"greedy": accuracy(env, tokenizer, backend, n_heldout, temperature=0.0,
                                   max_new_tokens=max_new_tokens),
                "sampled": accuracy(env, tokenizer, backend, n_heldout, temperature=1.0,
                                    max_new_tokens=max_new_tokens, seed_tag=seed_tag)}
