"""Fixtures: one thread (the machine is shared), the untrained built-in model as the policy, and a
differently seeded one as the 'other model'. Batches are small: 2 prompts x 4 samples x 8 tokens."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


class Task:
    """The built-in model on digit sorting, with the callables a validator job would pass in."""

    def __init__(self, model, tok, model_name="builtin:digit-sort-tiny", env=None, prompts=2, spp=4):
        from proofs.checks import Rules, Validator
        from trainer.envs import DigitSort
        from trainer.inference import TorchBackend
        from trainer.rollout import completion_text, score

        self.model, self.tok, self.env = model, tok, env or DigitSort()
        self.rules = Rules("test-task", 1 << 30, prompts, 64, 8, 1.0, tok.eos_token_id, model.config.vocab_size)
        self.worker = bytes(range(32))
        self.spp = spp
        self.backend = lambda m: TorchBackend(m, tok.eos_token_id, tok.pad_token_id)
        self.prompt_ids = lambda i: self.env.prompt_ids(tok, self.env.prompt(i))

        class _C:
            def __init__(self, ids, finished):
                self.token_ids, self.finished = list(ids), finished

        env = self.env
        self.reward = lambda i, ids, fin: score(env, env.prompt(i), completion_text(tok, _C(ids, fin)), fin)
        self.answer = lambda i: tok(env.prompt(i).answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        self.validator = Validator.calibrated(model, model_name, self.prompt_ids, self.reward)

    def honest(self, model=None, version=0, batch=0):
        from proofs import adversaries as adv

        return adv.honest(self.backend(model or self.model), self.rules, self.prompt_ids, self.reward,
                          self.worker, version, batch, self.spp)

    def check(self, samples, claim, **kw):
        from proofs.checks import check_batch

        return check_batch(samples, claim, self.rules, self.validator, **kw)


@pytest.fixture(scope="session")
def task():
    from trainer.model import create_builtin_model

    model, tok = create_builtin_model(0)
    return Task(model, tok)


@pytest.fixture(scope="session")
def other_model():
    from trainer.model import create_builtin_model

    return create_builtin_model(1)[0]


@pytest.fixture(scope="session")
def honest_batch(task):
    return task.honest(version=3, batch=1)
