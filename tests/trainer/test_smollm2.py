"""SmolLM2-135M-Instruct end to end: GGUF -> safetensors cache -> generation -> one GRPO step."""

import pytest
import torch

from trainer.envs import ChatArithmetic
from trainer.grpo import GRPOConfig, group_advantages, grpo_step, make_batch, make_optimizer
from trainer.inference import TorchBackend, prefill
from trainer.rollout import generate_rollouts

pytest.importorskip("gguf", reason="SmolLM2 loads from GGUF through the gguf package")


@pytest.mark.slow
def test_smollm2_generates_and_takes_a_grpo_step(tmp_path_factory):
    from trainer.model import load_model, load_smollm2, smollm2_gguf_path

    smollm2_gguf_path()  # a clear error, not a skip, when the wheel is missing
    cache = tmp_path_factory.mktemp("cache")
    model, tok = load_smollm2(cache)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cache / "SmolLM2-135M-Instruct" / "model.safetensors").is_file()
    assert "quantization_config" not in (cache / "SmolLM2-135M-Instruct" / "config.json").read_text()
    again, _ = load_model(cache / "SmolLM2-135M-Instruct")  # the fast path: plain safetensors
    torch.testing.assert_close(again.lm_head.weight, model.lm_head.weight)

    env = ChatArithmetic()
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id)
    rollouts = generate_rollouts(env, tok, backend, [0, 1], samples=2, max_new_tokens=12)
    assert len(rollouts) == 4
    for r in rollouts:
        c = r.completion
        assert c.prompt_ids[-3:] == tok("<|im_start|>assistant\n")["input_ids"][-3:]
        assert c.hidden.shape == (len(c.token_ids), model.config.hidden_size)
        logp, _ = prefill(model, c.prompt_ids, c.token_ids)
        assert torch.allclose(logp, c.logprobs, atol=2e-3)
        assert r.reward in (0.0, 1.0)

    cfg = GRPOConfig(lr=1e-5, minibatches=1)
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0])  # fixed, so the step always has a signal
    batch = make_batch([r.completion.prompt_ids for r in rollouts],
                       [r.completion.token_ids for r in rollouts],
                       [r.completion.logprobs for r in rollouts], group_advantages(rewards, 2),
                       tok.pad_token_id)
    before = model.model.layers[0].mlp.up_proj.weight.detach().clone()
    stats = grpo_step(model, make_optimizer(model, cfg), batch, cfg)
    assert torch.isfinite(torch.tensor(stats["loss"])) and stats["grad_norm"] > 0
    assert abs(stats["ratio_mean"] - 1.0) < 1e-2
    assert not model.model.layers[0].mlp.up_proj.weight.equal(before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_smollm2_on_cuda_bf16_rollouts_verify_and_a_grpo_step_runs(tmp_path_factory):
    """The real model on a GPU through the torch backend, as a GPU worker and trainer would run it:
    bf16 rollouts checked by a bf16 validator on the same GPU (logprobs close, TOPLOC chunks closer
    than the same rollouts checked against a perturbed model), then one fp32 GRPO step on the GPU."""
    pytest.importorskip("toploc", reason="toploc is built from source by scripts/setup.sh")
    from tests.proof_separation import assert_separated, chunk_results
    from trainer.model import load_model, load_smollm2

    cache = tmp_path_factory.mktemp("cache")
    worker, tok = load_smollm2(cache, dtype=torch.bfloat16, device="cuda")
    env = ChatArithmetic()
    rollouts = generate_rollouts(env, tok, TorchBackend(worker, tok.eos_token_id, tok.pad_token_id),
                                 [0, 1, 2, 3], samples=2, max_new_tokens=16)
    assert len(rollouts) == 8 and all(r.completion.token_ids for r in rollouts)
    validator, _ = load_model(cache / "SmolLM2-135M-Instruct", dtype=torch.bfloat16, device="cuda")
    honest = []
    for r in rollouts:
        c = r.completion
        logp, hidden = prefill(validator, c.prompt_ids, c.token_ids)
        assert (logp.float().cpu() - c.logprobs.float().cpu()).abs().mean() < 0.1
        honest.append(chunk_results(c.hidden, hidden))
    with torch.no_grad():  # the wrong model: the validator's MLP weights scaled by 10%
        for name, p in validator.named_parameters():
            if "mlp" in name:
                p.mul_(1.1)
    cheating = [chunk_results(r.completion.hidden, prefill(validator, r.completion.prompt_ids,
                                                            r.completion.token_ids)[1]) for r in rollouts]
    assert_separated(honest, cheating)

    trainer, _ = load_model(cache / "SmolLM2-135M-Instruct", dtype=torch.float32, device="cuda")
    cfg = GRPOConfig(lr=1e-5, minibatches=1)
    rewards = torch.tensor([0.0, 1.0] * 4)  # fixed, so the step always has a signal
    batch = make_batch([r.completion.prompt_ids for r in rollouts], [r.completion.token_ids for r in rollouts],
                       [r.completion.logprobs.float().cpu() for r in rollouts], group_advantages(rewards, 2),
                       tok.pad_token_id)
    before = trainer.model.layers[0].mlp.up_proj.weight.detach().clone()
    stats = grpo_step(trainer, make_optimizer(trainer, cfg), batch, cfg)
    assert torch.isfinite(torch.tensor(stats["loss"])) and stats["grad_norm"] > 0
    assert abs(stats["ratio_mean"] - 1.0) < 0.05  # bf16 behaviour policy, fp32 trainer
    assert not trainer.model.layers[0].mlp.up_proj.weight.equal(before)
