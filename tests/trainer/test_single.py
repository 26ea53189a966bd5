import copy

import pytest
import torch

from trainer.envs import DigitSort
from trainer.grpo import GRPOConfig
from trainer.single import SingleConfig, run_single

pytestmark = pytest.mark.slow  # the CPU tests use `warmed`: the warm-up trains the model first


def test_single_loop_runs_trains_and_reports(warmed):
    model, tok, _, _ = warmed
    model = copy.deepcopy(model)
    before = model.lm_head.weight.detach().clone()
    records = []
    cfg = SingleConfig(grpo=GRPOConfig(prompts_per_step=4, group_size=4, lr=1e-4),
                       seconds=60, max_steps=3, eval_every=2, eval_prompts=32)
    history = run_single(model, tok, DigitSort(), cfg, log=records.append)
    assert history == records and [r["step"] for r in history] == [0, 1, 2, 3]
    for r in history[1:]:
        assert 0.0 <= r["reward"] <= 1.0 and r["tokens"] > 0 and r["gen_s"] > 0
    evals = [r for r in history if "greedy_acc" in r]
    assert [r["step"] for r in evals] == [0, 2, 3]  # start, every 2, and the end
    assert all(0.0 <= r["greedy_acc"] <= 1.0 and 0.0 <= r["sampled_acc"] <= 1.0 for r in evals)
    assert not model.lm_head.weight.equal(before)


def test_checkpoints_stop_the_clock_and_eval_every_zero_evaluates_nothing(warmed, monkeypatch):
    """A checkpoint moves run_single's clock on by an hour instead of sleeping: were checkpoint time
    counted, elapsed_s would be hours, so a bound with minutes of slack for a loaded machine still
    tells the two apart (a sleep with a sub-second margin did not, on a busy 2-core CI)."""
    import time
    from types import SimpleNamespace

    import trainer.single

    model, tok, _, _ = warmed
    model = copy.deepcopy(model)
    seen = []
    skipped = [0.0]
    monkeypatch.setattr(trainer.single, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + skipped[0]))

    def keep(record, m):  # what bench/learning.py does: copy the weights for offline evaluation
        seen.append((record["step"], m.lm_head.weight.detach().clone()))
        skipped[0] += 3600.0

    cfg = SingleConfig(grpo=GRPOConfig(prompts_per_step=2, group_size=4, lr=1e-3),
                       seconds=60, max_steps=2, eval_every=0)
    history = run_single(model, tok, DigitSort(), cfg, checkpoint=keep)
    assert [s for s, _ in seen] == [r["step"] for r in history] == [0, 1, 2]
    assert not any("greedy_acc" in r or "sampled_acc" in r for r in history)
    assert not seen[0][1].equal(seen[2][1])  # the copies are of the weights as they were then
    work = sum(r["gen_s"] + r["train_s"] for r in history[1:])
    assert skipped[0] == 3 * 3600.0  # three checkpoints, an hour each
    assert history[-1]["elapsed_s"] < work + 120  # the 2 h in the first two checkpoints is not counted


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_single_loop_and_scoring_run_on_cuda_as_on_the_cpu(builtin):
    """bench/learning.py --device cuda: the single loop trains on the GPU, and a version scores the
    same on the GPU as on the CPU (the sampling noise is drawn on the CPU either way)."""
    from trainer.evaluate import evaluate_weights
    from trainer.policy import weights_bytes
    from trainer.warmup import WarmupConfig, warmup

    model, tok = builtin
    base = copy.deepcopy(model)
    warmup(base, tok, DigitSort(), WarmupConfig(steps=40, target=0.0))  # part-trained: rewards with a spread
    gpu = copy.deepcopy(base).cuda()
    cfg = SingleConfig(grpo=GRPOConfig(prompts_per_step=4, group_size=4, lr=1e-3, format_weight=1.0),
                       seconds=120, max_steps=3, eval_every=3, eval_prompts=16)
    history = run_single(gpu, tok, DigitSort(), cfg)
    assert [r["step"] for r in history] == [0, 1, 2, 3] and "greedy_acc" in history[-1]
    assert next(gpu.parameters()).device.type == "cuda"
    assert sum(r["used"] for r in history[1:]) > 0, history  # the format reward gives the groups a spread
    assert not gpu.lm_head.weight.cpu().equal(base.lm_head.weight)
    data = weights_bytes(gpu)
    on_gpu = evaluate_weights(data, n_heldout=32, device="cuda")
    on_cpu = evaluate_weights(data, n_heldout=32, device="cpu")
    assert abs(on_gpu["greedy"] - on_cpu["greedy"]) <= 2 / 32 and abs(on_gpu["sampled"] - on_cpu["sampled"]) <= 2 / 32
