"""SmolLM2-135M with its own calibrated thresholds: honest passes, cheats fail (kept short)."""

import copy

import pytest

from proofs import adversaries as adv

pytest.importorskip("gguf", reason="SmolLM2 loads from GGUF through the gguf package")


@pytest.mark.slow
def test_smollm2_honest_passes_and_cheats_fail():
    from trainer.envs import ChatArithmetic
    from trainer.model import load_smollm2

    from tests.proofs.conftest import Task

    model, tok = load_smollm2()  # converted once into the user cache, then about a second
    task = Task(model, tok, "SmolLM2-135M-Instruct", ChatArithmetic(), prompts=1, spp=2)
    samples, claim = task.honest(version=1, batch=0)
    v = task.check(samples, claim)
    assert (v.passed, v.reason) == (True, "ok"), v.evidence

    def choose(i):  # a reply the sampler did not draw
        return tok(f"It is {task.env.prompt(i).answer}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    assert all(choose(s.prompt_index) != s.token_ids for s in samples)
    fake = adv.fabricate(model, samples, choose, task.reward, task.rules.eos_id, only_failed=False)
    fake_claim = adv.claim_for(fake, claim.worker_key, claim.version, claim.prompt_indices, task.spp)
    assert task.check(fake, fake_claim).reason == "sampling"

    cheaper = copy.deepcopy(model)
    cheaper.model.layers = cheaper.model.layers[:15]
    cheaper.config.num_hidden_layers = 15
    other, other_claim = task.honest(cheaper, version=1, batch=0)
    assert task.check(other, other_claim).reason == "toploc"
