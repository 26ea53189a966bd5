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
