import math

import pytest
import torch

from trainer.grpo import (Batch, GRPOConfig, clip_grad, clipped_token_loss, collapse_repeats,
                          group_advantages, grpo_step, kl_k3, lr_at, make_batch, make_optimizer,
                          sized_for, token_logprobs)
from trainer.taskconfig import ParamError, grpo_config

CLIP = dict(clip_low=0.2, clip_high=0.28, delta=4.0)


def test_group_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert torch.allclose(group_advantages(r, 2, std_normalize=False), torch.tensor([.5, -.5, -.5, .5]))
    assert torch.allclose(group_advantages(r, 2), torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
    one_right = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 4)  # population std = 0.4330
    assert torch.allclose(one_right, torch.tensor([0.75, -0.25, -0.25, -0.25]) / std, atol=1e-5)
    assert torch.equal(group_advantages(torch.ones(8), 4), torch.zeros(8))  # no signal, no NaN


def _loss(ratios, adv, mask=None):
    logp = torch.log(torch.tensor([ratios], dtype=torch.float64)).requires_grad_()
    mask = torch.ones_like(logp) if mask is None else torch.tensor([mask], dtype=torch.float64)
    loss, stats = clipped_token_loss(logp, torch.zeros_like(logp), torch.tensor([adv]), mask, **CLIP)
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), stats


def test_loss_and_clipping_positive_advantage():
    # objectives min(min(r, 4) A, clip(r, 0.8, 1.28) A) for r = 1, 1.5, 0.5, 5 and A = +1:
    # 1, 1.28, 0.5, 1.28 -> mean 1.015; only unclipped tokens carry gradient r * A / 4
    loss, grad, stats = _loss([1.0, 1.5, 0.5, 5.0], 1.0)
    assert loss == pytest.approx(-1.015)
    assert grad == pytest.approx([-0.25, 0.0, -0.125, 0.0])
    assert stats["clip_frac"] == pytest.approx(0.5)


def test_loss_and_clipping_negative_advantage_with_delta():
    # A = -1: -1, -1.5 (ratio above the range is NOT clipped for A < 0), -0.8 (clipped),
    # -4 (delta caps the ratio at 4) -> loss 7.3 / 4
    loss, grad, stats = _loss([1.0, 1.5, 0.5, 5.0], -1.0)
    assert loss == pytest.approx(1.825)
    assert grad == pytest.approx([0.25, 0.375, 0.0, 0.0])
    assert stats["clip_frac"] == pytest.approx(0.5)
    assert stats["ratio_max"] == pytest.approx(5.0)


def _decoupled_loss(ratios_to_prox, adv, prox_over_behaviour):
    """Each token: behaviour logprob 0, proximal log(prox_over_behaviour), current log(that x ratio)."""
    prox = torch.log(torch.full((1, len(ratios_to_prox)), prox_over_behaviour, dtype=torch.float64))
    logp = (prox + torch.log(torch.tensor([ratios_to_prox], dtype=torch.float64))).requires_grad_()
    loss, stats = clipped_token_loss(logp, torch.zeros_like(prox), torch.tensor([adv]), torch.ones_like(prox),
                                     **CLIP, prox_logp=prox)
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), stats


def test_decoupled_loss_clips_around_the_proximal_policy_and_weights_by_staleness():
    # the policy rose 1.2x since the rollout was sampled; ratios to the proximal policy 1, 1.5,
    # 0.5, 5 and A = +1: 1.2 x (1, 1.28, 0.5, 1.28) -> mean 1.218; gradient w x q x A / 4 where
    # q is inside the range. The plain objective would see ratios 1.2, 1.8, 0.6, 6 instead.
    loss, grad, stats = _decoupled_loss([1.0, 1.5, 0.5, 5.0], 1.0, 1.2)
    assert loss == pytest.approx(-1.218)
    assert grad == pytest.approx([-0.3, 0.0, -0.15, 0.0])
    assert stats["clip_frac"] == pytest.approx(0.5)
    assert stats["ratio_mean"] == pytest.approx(2.0)  # (1 + 1.5 + 0.5 + 5) / 4, to the proximal policy
    assert stats["stale_weight_mean"] == pytest.approx(1.2)
    # A = -1, the policy fell to 0.5x since: 0.5 x (-1, -1.5, -0.8, -4) -> loss 0.5 x 7.3 / 4
    loss, grad, _ = _decoupled_loss([1.0, 1.5, 0.5, 5.0], -1.0, 0.5)
    assert loss == pytest.approx(0.9125)
    assert grad == pytest.approx([0.125, 0.1875, 0.0, 0.0])
    # a token 10x likelier now than when sampled weighs delta (4), not 10
    loss, _, stats = _decoupled_loss([1.0], 1.0, 10.0)
    assert loss == pytest.approx(-4.0) and stats["stale_weight_mean"] == pytest.approx(4.0)


def test_decoupled_loss_with_the_behaviour_policy_as_proximal_is_the_plain_loss():
    ratios = torch.tensor([[1.0, 1.5, 0.5, 5.0], [0.9, 1.1, 1.3, 0.7]], dtype=torch.float64)
    old = torch.tensor([[-0.5, -1.0, -2.0, -0.1], [-0.3, -0.2, -3.0, -1.0]], dtype=torch.float64)
    adv, mask = torch.tensor([1.0, -0.5]), torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float64)
    results = []
    for prox in (None, old.clone()):
        logp = (old + ratios.log()).requires_grad_()
        loss, stats = clipped_token_loss(logp, old, adv, mask, **CLIP, prox_logp=prox)
        loss.backward()
        results.append((loss.item(), logp.grad.clone(), stats))
    (plain, g_plain, s_plain), (dec, g_dec, s_dec) = results
    assert dec == pytest.approx(plain, rel=1e-12) and torch.allclose(g_dec, g_plain, rtol=1e-12)
    assert s_dec["clip_frac"] == s_plain["clip_frac"] and s_dec["stale_weight_mean"] == 1.0


def test_loss_is_token_level_not_sequence_level():
    logp = torch.zeros((2, 3), requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    loss, _ = clipped_token_loss(logp, torch.zeros(2, 3), torch.tensor([1.0, 1.0]), mask, **CLIP)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)
    # every completion token weighs 1/4, the one-token completion included; padding weighs 0
    assert torch.allclose(logp.grad, -mask / 4)


def test_kl_k3_and_penalty():
    p, q = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    assert kl_k3(p, q).item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl_k3(p, p).item() == 0.0
    logp = torch.zeros((1, 2))
    base, _ = clipped_token_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), **CLIP)
    with_kl, stats = clipped_token_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), **CLIP,
                                        ref_logp=torch.full((1, 2), math.log(0.5)), kl_coef=0.1)
    assert stats["kl"] == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert with_kl.item() == pytest.approx(base.item() + 0.1 * stats["kl"], abs=1e-6)


def test_make_batch_aligns_targets():
    b = make_batch([[1, 5, 6, 13], [1, 7, 13]], [[3, 4, 2], [9]],
                   [torch.tensor([-0.1, -0.2, -0.3]), torch.tensor([-0.5])], torch.tensor([1.0, -1.0]), 0)
    assert b.input_ids.tolist() == [[1, 5, 6, 13, 3, 4, 2], [1, 7, 13, 9, 0, 0, 0]]
    assert b.mask.tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 1, 0, 0, 0]]
    assert b.old_logp[0, 3:].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert b.old_logp[1, 2].item() == pytest.approx(-0.5)


def test_clip_grad():
    lin = torch.nn.Linear(2, 1, bias=False)
    lin.weight.grad = torch.tensor([[3.0, 4.0]])
    assert clip_grad(lin, 1.0) == pytest.approx(5.0)
    assert lin.weight.grad.norm().item() == pytest.approx(1.0, abs=1e-5)


def test_grpo_step_moves_logprobs_the_right_way():
    from trainer.model import create_builtin_model

    model, tok = create_builtin_model(3)
    prompt = tok("4213>")["input_ids"]
    good, bad = tok("1234", add_special_tokens=False)["input_ids"] + [2], [tok.eos_token_id]
    batch = make_batch([prompt, prompt], [good, bad], [torch.zeros(5), torch.zeros(1)],
                       torch.tensor([1.0, -1.0]), tok.pad_token_id)
    with torch.no_grad():
        before = token_logprobs(model, batch.input_ids)
    batch.old_logp = before * batch.mask
    cfg = GRPOConfig(lr=1e-3, minibatches=1)
    stats = grpo_step(model, make_optimizer(model, cfg), batch, cfg)
    with torch.no_grad():
        after = token_logprobs(model, batch.input_ids)
    gain = ((after - before) * batch.mask).sum(1)
    assert gain[0] > 0 and gain[1] < 0
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # on-policy: ratio 1 before the step
    assert {"loss", "grad_norm", "clip_frac", "tokens"} <= set(stats) and stats["tokens"] == 6
    assert not model.training


def _batch_with_repeats(tok, logp_noise: float = 0.0) -> Batch:
    """Six rows, three of them copies: a right answer three times, a wrong one twice, one other."""
    prompt = tok("4213>")["input_ids"]
    right = tok("1234", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    wrong = tok("1243", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    other = tok("12", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    lp = torch.tensor([-0.3, -0.2, -0.1, -0.4, -0.05])  # right and wrong: 4 digits + eos
    lp_other = torch.tensor([-0.6, -0.7, -0.2])
    rows = [(right, lp, 1.2), (wrong, lp - 1, -0.8), (right, lp, 1.2), (other, lp_other, -0.8),
            (right, lp + logp_noise, 1.2), (wrong, lp - 1, -0.8)]
    return make_batch([prompt] * len(rows), [r[0] for r in rows], [r[1] for r in rows],
                      torch.tensor([r[2] for r in rows]), tok.pad_token_id)


def test_collapse_repeats_counts_only_bit_equal_rows(builtin):
    _, tok = builtin
    mb, counts = collapse_repeats(_batch_with_repeats(tok))
    assert counts.tolist() == [3, 2, 1] and mb.input_ids.shape[0] == 3
    assert torch.equal(mb.input_ids, _batch_with_repeats(tok).input_ids[[0, 1, 3]])
    # one float ulp of a behaviour logprob apart: a different row (its ratio differs)
    _, counts = collapse_repeats(_batch_with_repeats(tok, logp_noise=1e-7))
    assert counts.tolist() == [2, 2, 1, 1]
    # the same completion with another advantage (another group) is another row too
    b = _batch_with_repeats(tok)
    b.advantages[2] = 0.5
    assert collapse_repeats(b)[1].tolist() == [2, 2, 1, 1]


def test_collapsed_rows_give_the_full_batches_loss_and_gradient():
    """With a KL term and off-policy ratios: the weighted distinct rows give the loss, every
    statistic and every parameter gradient of the full batch. The model runs in float64 but
    `token_logprobs` takes float32 log-softmax, so gradients agree to float32 rounding; a wrong
    weight would be off by tens of percent."""
    from trainer.model import create_builtin_model

    model, tok = create_builtin_model(5)
    model.double()
    full = _batch_with_repeats(tok)
    ref_model, _ = create_builtin_model(6)
    ref_model.double()

    def loss_grads(b: Batch, weights=None):
        model.zero_grad(set_to_none=True)
        logp = token_logprobs(model, b.input_ids)
        with torch.no_grad():
            ref = token_logprobs(ref_model, b.input_ids)
        loss, stats = clipped_token_loss(logp, b.old_logp.double(), b.advantages, b.mask, **CLIP,
                                         ref_logp=ref, kl_coef=0.1, weights=weights)
        loss.backward()
        return loss.item(), stats, [p.grad.clone() for p in model.parameters()]

    loss, stats, grads = loss_grads(full)
    mb, counts = collapse_repeats(full)
    c_loss, c_stats, c_grads = loss_grads(mb, counts)
    assert c_loss == pytest.approx(loss, rel=1e-12)
    assert c_stats == pytest.approx(stats, rel=1e-12)
    assert max(float((g - c).norm() / g.norm()) for g, c in zip(grads, c_grads)) < 1e-5
    assert any(g.abs().max() > 0 for g in grads)


def test_grpo_step_on_a_batch_doubled_row_for_row_takes_the_same_step(builtin):
    """Each minibatch of the doubled batch is the original's with every row twice, so the copies
    collapse away and the update is bit-for-bit the same."""
    from trainer.model import create_builtin_model

    _, tok = builtin
    once = _batch_with_repeats(tok, logp_noise=1e-7)
    twice = Batch(*(torch.cat([t, t]) for t in (once.input_ids, once.mask, once.old_logp, once.advantages)))
    cfg = GRPOConfig(lr=1e-3, minibatches=2)
    results = []
    for b in (once, twice):
        model, _ = create_builtin_model(4)
        stats = grpo_step(model, make_optimizer(model, cfg), b, cfg)
        results.append((stats, [p.detach().clone() for p in model.parameters()]))
    (s1, w1), (s2, w2) = results
    assert (s1["rows"], s1["distinct_rows"]) == (6, 4)
    assert (s2["rows"], s2["distinct_rows"]) == (12, 4)
    assert all(torch.equal(a, b) for a, b in zip(w1, w2))
    assert s2["loss"] == s1["loss"] and s2["tokens"] == 2 * s1["tokens"]


def test_grpo_step_decoupled_on_fresh_rollouts_takes_the_on_policy_step(builtin):
    """Rollouts whose behaviour logprobs are exactly these weights' own: the decoupled step (an
    extra proximal pass, w = 1) and the on-policy step (no pass) move the weights identically."""
    from trainer.model import create_builtin_model

    _, tok = builtin
    batch = _batch_with_repeats(tok, logp_noise=1e-7)
    model, _ = create_builtin_model(4)
    with torch.no_grad():
        batch.old_logp = token_logprobs(model.eval(), batch.input_ids) * batch.mask
    cfg = GRPOConfig(lr=1e-3, minibatches=2, decoupled=True)
    results = []
    for on_policy in (True, False):
        m, _ = create_builtin_model(4)
        stats = grpo_step(m, make_optimizer(m, cfg), batch, cfg, on_policy=on_policy)
        results.append((stats, [p.detach().clone() for p in m.parameters()]))
    (s_on, w_on), (s_dec, w_dec) = results
    assert "stale_weight_mean" not in s_on and s_dec["stale_weight_mean"] == pytest.approx(1.0, abs=1e-6)
    # AdamW moves every parameter by about lr whatever its gradient's size, so a component whose gradient
    # is float noise in both runs may differ by a small fraction of lr (2.6e-5 at lr 1e-3 on one EPYC's
    # kernels, 0 on another's); a wrong proximal policy moves the weights apart by about lr
    assert max(float((a - b).abs().max()) for a, b in zip(w_on, w_dec)) < 0.05 * cfg.lr
    assert any(not torch.equal(a, b) for a, b in zip(w_on, [p.detach() for p in create_builtin_model(4)[0].parameters()]))


def test_a_model_with_dropout_gets_its_own_proximal_pass(builtin):
    """The first minibatch's training forward stands in for the proximal pass only when it is not random."""
    from trainer.grpo import has_dropout

    model, _ = builtin
    assert not has_dropout(model)
    assert has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
    assert not has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))
    config_only = torch.nn.Linear(2, 2)
    config_only.config = type("Config", (), {})()
    config_only.config.attention_dropout = 0.1  # HF attention applies it functionally, in training only
    assert has_dropout(config_only)


def test_grpo_step_decoupled_still_learns_from_a_stale_wrong_answer(builtin):
    """Both answers were sampled when each token was 3x likelier than now. The plain objective
    sees ratio 1/3 and clips the wrong answer's term away (A < 0, ratio below 1 - clip_low), so
    the step, driven by the right answer alone, raises both (they share the model); the decoupled
    one measures the ratio from where the policy is (1) and pushes the wrong answer down. Plain
    SGD, so the step is the gradient itself and not Adam's sign-like first move."""
    from trainer.model import create_builtin_model

    _, tok = builtin
    prompt = tok("4213>")["input_ids"]
    right = tok("1234", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    wrong = tok("4321", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    batch = make_batch([prompt] * 4, [right, right, wrong, wrong], [torch.zeros(5)] * 4,
                       torch.tensor([1.0, 1.0, -1.0, -1.0]), tok.pad_token_id)
    model, _ = create_builtin_model(4)
    with torch.no_grad():
        start = token_logprobs(model.eval(), batch.input_ids)
    batch.old_logp = (start + math.log(3.0)) * batch.mask
    gains, clipped = {}, {}
    for decoupled in (False, True):
        cfg = GRPOConfig(minibatches=2, max_grad_norm=1e9, decoupled=decoupled)
        m, _ = create_builtin_model(4)
        clipped[decoupled] = grpo_step(m, torch.optim.SGD(m.parameters(), lr=0.01), batch, cfg)["clip_frac"]
        with torch.no_grad():
            after = token_logprobs(m, batch.input_ids)
        gains[decoupled] = ((after - start) * batch.mask).sum(1)[[0, 2]].tolist()  # right, wrong
    assert gains[False][1] > 1.0  # plain: the wrong answer rose with the right one
    assert gains[True][0] > 0 > gains[True][1]  # decoupled: the right one up, the wrong one down
    assert clipped[False] == pytest.approx(0.5) and clipped[True] < 0.1
    assert grpo_config({"decoupled": True}).decoupled is True and not GRPOConfig().decoupled
    with pytest.raises(ParamError, match="decoupled"):
        grpo_config({"decoupled": 1})


def test_lr_warmup_ramps_linearly_then_holds():
    cfg = GRPOConfig(lr=1e-4, lr_warmup=4)
    assert [lr_at(cfg, s) for s in range(6)] == pytest.approx([2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 1e-4])
    assert lr_at(GRPOConfig(lr=3e-5), 0) == lr_at(GRPOConfig(lr=3e-5), 100) == 3e-5
    assert grpo_config({"lr": 1e-4, "lr_warmup": 4}).lr_warmup == 4
    assert grpo_config({"lr_warmup": 0}).lr_warmup == 0
    with pytest.raises(ParamError):
        grpo_config({"lr_warmup": 2.5})


def test_lr_decay_is_a_cosine_from_lr_to_lr_min_then_holds():
    cfg = GRPOConfig(lr=4e-5, lr_warmup=2, lr_decay_start=10, lr_decay_steps=100, lr_min=1e-5)
    # warm-up, constant, then half-way down the cosine at 60, lr_min from 110 on
    assert [lr_at(cfg, s) for s in (0, 1, 9, 10, 60, 110, 5000)] == pytest.approx(
        [2e-5, 4e-5, 4e-5, 4e-5, 2.5e-5, 1e-5, 1e-5])
    assert lr_at(cfg, 35) == pytest.approx(1e-5 + 3e-5 * 0.5 * (1 + math.cos(math.pi / 4)))
    rates = [lr_at(cfg, s) for s in range(10, 111)]
    assert all(a > b for a, b in zip(rates, rates[1:]))  # strictly falling through the decay
    parsed = grpo_config({"lr": 4e-5, "lr_decay_start": 10, "lr_decay_steps": 100, "lr_min": 1e-5})
    assert (parsed.lr_decay_start, parsed.lr_decay_steps, parsed.lr_min) == (10, 100, 1e-5)
    with pytest.raises(ParamError, match="lr_min"):
        grpo_config({"lr": 1e-5, "lr_decay_steps": 100, "lr_min": 2e-5})
    with pytest.raises(ParamError, match="lr_decay_steps"):
        grpo_config({"lr_decay_steps": 10.0})


def test_a_bigger_step_takes_more_updates_of_the_same_minibatch_size_at_the_same_lr():
    cfg = GRPOConfig(lr=3e-5, minibatches=2, prompts_per_step=16)
    assert sized_for(cfg, 16) is cfg
    assert sized_for(cfg, 18).minibatches == 2  # an overshoot by part of a commit: the task's step
    for prompts, steps in ((32, 4), (64, 8), (40, 5), (8, 1), (1, 1)):
        sized = sized_for(cfg, prompts)
        assert sized.minibatches == steps and sized.lr == cfg.lr
        if prompts >= cfg.prompts_per_step:  # rows per update stay the task's
            assert prompts / sized.minibatches == pytest.approx(8, rel=0.25)


def test_grpo_step_on_a_doubled_step_makes_twice_the_optimizer_steps():
    from trainer.model import create_builtin_model

    model, tok = create_builtin_model(3)
    prompt = tok("4213>")["input_ids"]
    good, bad = tok("1234", add_special_tokens=False)["input_ids"] + [2], [tok.eos_token_id]
    batch = make_batch([prompt] * 8, [good, bad] * 4, [torch.zeros(5), torch.zeros(1)] * 4,
                       torch.tensor([1.0, -1.0] * 4), tok.pad_token_id)
    with torch.no_grad():
        batch.old_logp = token_logprobs(model, batch.input_ids) * batch.mask
    cfg = sized_for(GRPOConfig(lr=1e-3, minibatches=2, prompts_per_step=2), 4)
    optimizer = make_optimizer(model, cfg)
    grpo_step(model, optimizer, batch, cfg)
    assert cfg.minibatches == 4
    assert max(int(s["step"]) for s in optimizer.state.values()) == 4
