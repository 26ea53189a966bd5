"""What a real train job costs on the virtual clock (simulator/realjobs.py `train_scale`): the completions
its GRPO step computed on, in steps of the task's `prompts_per_step` prompts, never below one step, and
a third more with the decoupled objective (on by default when steps grow)."""

from types import SimpleNamespace

from simulator.realjobs import train_scale

PARAMS = {"group_size": 16, "prompts_per_step": 16, "prompts_per_commit": 8, "max_prompts_per_step": 256,
          "decoupled": False}


def _scale(completions: int, used: int, params=PARAMS) -> float:
    job = SimpleNamespace(task=SimpleNamespace(params=params))
    result = SimpleNamespace(stats={"completions": float(completions), "completions_used": float(used)})
    return train_scale(job, result)


def test_a_step_costs_the_completions_it_computes_on():
    assert _scale(64 * 16, 64 * 16) == 4.0  # 64 prompts, every group with an advantage: four base steps
    assert _scale(64 * 16, 40 * 16) == 2.5  # 24 groups scored alike: left out of the step, not paid for


def test_never_below_one_base_step():
    assert _scale(16 * 16, 11 * 16) == 1.0  # a base-size step with some flat groups
    assert _scale(64 * 16, 0) == 1.0  # nothing to learn from: the version is still packed and published


def test_the_decoupled_objectives_extra_pass_costs_a_third_more():
    grown = {k: v for k, v in PARAMS.items() if k != "decoupled"}  # growing steps: decoupled by default
    assert _scale(64 * 16, 64 * 16, grown) == 4.0 * 4 / 3
    fixed = {k: v for k, v in grown.items() if k != "max_prompts_per_step"}  # fixed steps: off by default
    assert _scale(16 * 16, 16 * 16, fixed) == 1.0
