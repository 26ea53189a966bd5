"""vLLM backend against the torch reference. Needs a CUDA GPU and vllm; skipped (with a reason)
elsewhere."""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM backend needs a CUDA GPU"),
]


def test_vllm_backend_matches_torch_prefill(tmp_path):
    pytest.importorskip("vllm", reason="install the [gpu] extra (vllm==0.32.0)")
    from trainer.envs import DigitSort
    from trainer.inference import prefill, sample_seed
    from trainer.inference_vllm import VllmBackend
    from trainer.model import create_builtin_model, save_model

    model, tok = create_builtin_model(0)
    save_model(model, tok, tmp_path / "m")
    backend = VllmBackend(str(tmp_path / "m"), dtype="bfloat16", gpu_memory_utilization=0.2)
    env = DigitSort()
    prompts = [env.prompt_ids(tok, env.prompt(i)) for i in range(3)]
    seeds = [sample_seed("t", b"w", 0, p, s) for p in range(3) for s in range(2)]
    out = backend.generate(prompts, 2, 10, 1.0, seeds)
    again = backend.generate(prompts, 2, 10, 1.0, seeds)
    assert [c.token_ids for c in out] == [c.token_ids for c in again]  # seeded per request
    reference = model.cuda().to(torch.bfloat16)
    for c in out:
        n = len(c.token_ids)
        assert c.logprobs.shape == (n,) and c.hidden.shape == (n, model.config.hidden_size)
        assert c.hidden.dtype == torch.bfloat16
        logp, hidden = prefill(reference, c.prompt_ids, c.token_ids)
        assert (logp - c.logprobs).abs().mean() < 0.05
        cos = torch.nn.functional.cosine_similarity(hidden.float(), c.hidden.float(), dim=-1)
        assert cos.min() > 0.99
