"""reasoning-gym environments: prompts as a pure function of (task, split, index), disjoint splits,
answer extraction, rewards, options, and the version pin a peer checks before working on a task."""

import json
import os
import subprocess
import sys

import pytest

from trainer import envs_rg
from trainer.envs import EnvError, get_env
from trainer.envs_rg import extract_answer

# (the job-side imports are inside the tests: the cross-process test's child imports only this module
# and trainer.envs, not torch)

EASY = {"basic_arithmetic.max_terms": 2, "basic_arithmetic.max_digits": 1}
# RL Swarm's mix (arc_1d ... propositional_logic) and two more: prompts, answers and scores must be the
# same in every process
MIX_TASKS = ("arc_1d", "basic_arithmetic", "base_conversion", "bf", "binary_matrix", "calendar_arithmetic",
             "decimal_arithmetic", "fraction_simplification", "propositional_logic", "chain_sum", "leg_counting")
MIX = {f"{t}.weight": 1 for t in MIX_TASKS}
VERSION = f"reasoning-gym=={envs_rg.installed_version()}"


def _digest(env_name: str, options: dict, n: int = 40) -> list:
    env = get_env(env_name, options)
    return [(p.text, p.answer, env.reward(p, f"<answer>{p.answer}</answer>"), env.reward(p, "<answer>1</answer>"))
            for p in (env.prompt(i, s) for s in ("train", "heldout") for i in range(n))]


def test_prompts_are_the_same_in_any_process():
    """Every peer rebuilds prompt i from (task, split, i) alone: another process, with another
    string-hash seed (set iteration order), makes the same prompts and answers."""
    code = ("import json, sys; from tests.trainer.test_envs_rg import _digest, MIX; "
            "print('\\n' + json.dumps(_digest('reasoning-gym:mix', MIX)))")  # bf prints progress dots
    here = _digest("reasoning-gym:mix", MIX)
    for seed in ("1",):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120).stdout
        assert [tuple(x) for x in json.loads(out.splitlines()[-1])] == here
    assert len({t for t, *_ in here}) > 70  # 80 prompts, hardly any repeated
    assert {p.data[0] for p in map(get_env("reasoning-gym:mix", MIX).prompt, range(120))} == set(MIX_TASKS)


def test_splits_are_disjoint_and_mixed_by_weight():
    env = get_env("reasoning-gym:mix", {"chain_sum.weight": 3, "leg_counting.weight": 1})
    train = [env.prompt(i, "train") for i in range(400)]
    held = {env.prompt(i, "heldout").text for i in range(400)}
    assert not {p.text for p in train} & held
    share = sum(p.data[0] == "chain_sum" for p in train) / len(train)
    assert 0.65 < share < 0.85  # weight 3 of 4
    assert env.prompt(7) == get_env("reasoning-gym:mix", {"chain_sum.weight": 3, "leg_counting.weight": 1}).prompt(7)


def test_options_reach_the_generator():
    easy = get_env("reasoning-gym:basic_arithmetic", {**EASY, "basic_arithmetic.operators": "+"})
    for i in range(30):
        p = easy.prompt(i)
        expr = p.data[1]["metadata"]["expression"]
        assert "*" not in expr and "/" not in expr and p.data[1]["metadata"]["num_terms"] <= 2
    hard = get_env("reasoning-gym:basic_arithmetic", {})
    assert max(hard.prompt(i).data[1]["metadata"]["num_terms"] for i in range(30)) > 2


def test_answer_extraction_reward_and_format():
    env = get_env("reasoning-gym:basic_arithmetic", EASY)
    p = env.prompt(3)
    assert "<answer>" in p.text and p.text.startswith(p.data[1]["question"])
    right, wrong = p.answer, str(int(p.answer) + 1)
    assert env.reward(p, f"Let me see. <answer>{right}</answer>") == 1.0
    assert env.reward(p, f"<answer>{wrong}</answer> no, <answer>{right}</answer>") == 1.0  # the last tag
    assert env.reward(p, f"<answer>{wrong}</answer>") == 0.0
    assert env.reward(p, f"It is {wrong}, or rather {right}") == 1.0  # no tags: the last number
    assert env.reward(p, "no idea") == 0.0
    assert env.format_reward(p, f"<answer>{wrong}</answer>") == 1.0
    assert env.format_reward(p, f"<answer>{right}</answer>", finished=False) == 0.0
    assert env.format_reward(p, f"<answer>{right}</answer> because") == 0.0
    assert env.format_reward(p, f"<answer>1</answer><answer>{right}</answer>") == 0.0
    assert env.format_reward(p, right) == 0.0
    assert extract_answer("first\nTrue\n", "True") == "True" and extract_answer("", "x") is None


def test_bad_names_and_options_say_what_is_wrong():
    cases = [("reasoning-gym:no_such_task", {}, "has no task 'no_such_task'"),
             ("reasoning-gym:basic_arithmetic", {"basic_arithmetic.nope": 1}, "not a config field"),
             ("reasoning-gym:basic_arithmetic", {"chain_sum.max_terms": 2}, "does not include"),
             ("reasoning-gym:basic_arithmetic", {"max_terms": 2}, "env.<task>.<option>"),
             ("reasoning-gym:basic_arithmetic", {"basic_arithmetic.max_terms": 0}, "refused the options"),
             ("reasoning-gym:mix", {}, "env.<task>.weight"),
             ("reasoning-gym:chain_sum", {"chain_sum.weight": -1}, "weight must be a number > 0"),
             ("digit-sort", {"x": 1}, "takes no options"),
             ("no-such-env", {}, "no installed package registers 'no-such-env'")]
    for name, options, says in cases:
        with pytest.raises(EnvError, match=says.replace("(", r"\(").replace(")", r"\)")):
            get_env(name, options)


def _spec(params, env="reasoning-gym:basic_arithmetic", task_id="rg"):
    from swarm.jobs import TaskSpec

    return TaskSpec(task_id, "builtin:digit-sort-tiny", env, params)


def test_the_generator_version_is_pinned():
    from trainer.jobenv import TaskRefused, task_env
    from trainer.pins import pins_for

    params = {f"env.{k}": v for k, v in EASY.items()}
    assert pins_for("builtin:digit-sort-tiny", "reasoning-gym:basic_arithmetic", params) == {"env_version": VERSION}
    assert pins_for("builtin:digit-sort-tiny", "digit-sort", {}) == {}
    assert task_env(_spec({**params, "env_version": VERSION})).pin == VERSION
    assert task_env(_spec({**params, "env_version": VERSION.replace("reasoning-gym", "Reasoning_Gym")},
                          task_id="spelt")).pin == VERSION  # names compare as pip compares them
    with pytest.raises(TaskRefused, match=r"needs reasoning-gym==0\.1\.24, this peer has .*pip install 'reasoning-gym==0\.1\.24'"):
        task_env(_spec({**params, "env_version": "reasoning-gym==0.1.24"}, task_id="old"))
    with pytest.raises(TaskRefused, match="does not pin its version"):
        task_env(_spec(params, task_id="unpinned"))
    with pytest.raises(TaskRefused, match="built into swarm"):
        task_env(_spec({"env_version": VERSION}, env="digit-sort", task_id="builtin-pinned"))


def test_a_missing_generator_package_refuses_with_what_to_install(monkeypatch):
    from trainer.jobenv import TaskRefused, task_env

    monkeypatch.setattr(envs_rg, "installed_version", lambda: None)
    with pytest.raises(TaskRefused, match=r"not installed.*pip install 'reasoning-gym==0\.1\.25'"):
        task_env(_spec({"env_version": "reasoning-gym==0.1.25"}, task_id="missing"))
