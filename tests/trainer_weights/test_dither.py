"""bf16 as weights travel: dithered rounding keeps a small optimizer step that rounding to nearest drops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.weights.tensors import carried, dithered_bf16

torch.set_num_threads(1)


def patterns(t: torch.Tensor) -> np.ndarray:
    return t.reshape(-1).view(torch.int16).numpy().view(np.uint16)


def reference(t: torch.Tensor) -> np.ndarray:
    """The rule in plain integers: keep the top 16 bits, one more when the low 16 exceed i * 40503 mod 2**16."""
    bits = t.float().contiguous().reshape(-1).view(torch.int32).numpy().view(np.uint32).astype(np.int64)
    threshold = (np.arange(bits.size, dtype=np.int64) * 40503) % (1 << 16)
    return ((bits >> 16) + ((bits & 0xFFFF) > threshold)).astype(np.uint16)


def grid(n: int, seed: int = 0) -> torch.Tensor:
    """Weights exactly on the bf16 grid, as a model loaded from bf16 files has them."""
    return (torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 0.05).bfloat16().float()


def ulp_up(t: torch.Tensor) -> torch.Tensor:
    """One bf16 ulp away from zero at each (on-grid) value."""
    away = torch.where(t < 0, torch.full_like(t, -1e30), torch.full_like(t, 1e30)).bfloat16()
    return torch.nextafter(t.bfloat16(), away).float() - t


@pytest.mark.parametrize("n", [0, 1, 7, 1 << 16, (1 << 16) * 3 + 5])
def test_the_rule_for_any_size_and_sign(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 0.05
    for t in (x, -x, x.reshape(-1, 1) if n else x):
        assert (patterns(dithered_bf16(t)) == reference(t)).all()
        assert dithered_bf16(t).shape == t.shape and dithered_bf16(t).dtype == torch.bfloat16


def test_exact_values_are_kept_and_specials_round_as_torch_does():
    on_grid = grid(100_000)
    assert torch.equal(dithered_bf16(on_grid).float(), on_grid)
    special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-40, -1.0, 3.0])
    assert (patterns(dithered_bf16(special)) == patterns(special.bfloat16())).all()
    payload = torch.tensor([0x7F800001, -0x00000001], dtype=torch.int32).view(torch.float32)  # NaNs with payloads
    assert torch.isnan(dithered_bf16(payload).float()).all()


def test_every_weight_lands_on_one_of_its_two_neighbours_and_the_error_is_unbiased():
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(1)) * 0.05
    d = dithered_bf16(x).float()
    down = (x.view(torch.int32) & ~0xFFFF).view(torch.float32)  # towards zero
    assert bool(((d == down) | (d == down + ulp_up(down))).all())
    err_in_ulps = (d - x) / ulp_up(down)
    assert abs(float(err_in_ulps.mean())) < 0.01 and float(err_in_ulps.abs().max()) < 1.0


@pytest.mark.parametrize("drift", [0.05, 0.2, 0.45])
def test_a_step_under_half_an_ulp_moves_the_published_weights(drift):
    """A master drifted by `drift` ulps from bf16 weights: to nearest, not one weight moves; dithered,
    that fraction of them moves one ulp, so the published weights move by the drift on average."""
    base = grid(300_000)
    master = base + drift * ulp_up(base)
    assert torch.equal(master.bfloat16().float(), base)
    moved = dithered_bf16(master).float() - base
    assert abs(float((moved != 0).float().mean()) - drift) < 0.01
    retained = float((moved * (master - base)).sum() / ((master - base) ** 2).sum())
    assert abs(retained - 1.0) < 0.03


def test_deltas_stay_sparse_a_weight_changes_only_when_its_master_crosses_its_threshold():
    base = grid(300_000, seed=2)
    before = dithered_bf16(base + 0.30 * ulp_up(base))
    after = dithered_bf16(base + 0.32 * ulp_up(base))
    changed = float((patterns(before) != patterns(after)).mean())
    assert 0.01 < changed < 0.03  # the 2% whose thresholds lie between, not a fresh draw for every weight


def test_carried_dithers_only_into_bf16_from_wider_floats():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    assert torch.equal(carried(x, "bf16").view(torch.int16), dithered_bf16(x).view(torch.int16))
    assert torch.equal(carried(carried(x, "bf16"), "bf16").view(torch.int16), carried(x, "bf16").view(torch.int16))
    assert torch.equal(carried(x, "fp16"), x.half()) and torch.equal(carried(x, "fp32"), x)
    assert torch.equal(carried(torch.arange(5), "bf16"), torch.arange(5))
