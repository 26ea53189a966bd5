"""Shared fixtures: one thread per test process (the machine is shared) and small cached models."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def builtin():
    """(model, tokenizer) of the untrained built-in model, seed 0. Tests must not train it."""
    from trainer.model import create_builtin_model

    return create_builtin_model(0)


@pytest.fixture(scope="session")
def warmed():
    """(model, tokenizer, losses, progress calls) after the default warm-up, shared by tests."""
    from trainer.envs import DigitSort
    from trainer.model import create_builtin_model
    from trainer.warmup import warmup

    model, tok = create_builtin_model(0)
    calls = []
    losses = warmup(model, tok, DigitSort(), progress=lambda s, n, loss: calls.append((s, n, loss)))
    return model, tok, losses, calls
