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
def warmed(tmp_path_factory, worker_id):
    """(model, tokenizer, losses, progress calls) after the default warm-up, shared by tests.

    The warm-up is most of a minute of CPU: under pytest-xdist the first worker to need it runs it
    and leaves the result in the run's shared temp directory for the others (xdist's documented
    pattern), rather than each worker warming up its own copy."""
    if worker_id == "master":
        return _warm_up()
    from filelock import FileLock

    from trainer.model import create_builtin_model

    shared = tmp_path_factory.getbasetemp().parent / "warmed.pt"  # one directory per run, all workers
    with FileLock(f"{shared}.lock"):
        if not shared.exists():
            model, tok, losses, calls = _warm_up()
            torch.save({"state": model.state_dict(), "losses": losses, "calls": calls}, f"{shared}.tmp")
            os.replace(f"{shared}.tmp", shared)
            return model, tok, losses, calls
    saved = torch.load(shared)
    model, tok = create_builtin_model(0)
    model.load_state_dict(saved["state"])
    return model.eval(), tok, saved["losses"], saved["calls"]


def _warm_up():
    from trainer.envs import DigitSort
    from trainer.model import create_builtin_model
    from trainer.warmup import warmup

    model, tok = create_builtin_model(0)
    calls = []
    losses = warmup(model, tok, DigitSort(), progress=lambda s, n, loss: calls.append((s, n, loss)))
    return model, tok, losses, calls
