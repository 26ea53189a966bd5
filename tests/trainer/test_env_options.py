"""A task's env.* options reach the places that build its environment outside the job processes:
`python -m trainer.single --task FILE` and trainer/evaluate.py (bench/learning.py scores every
checkpoint with it). Without them a reasoning-gym task would be trained or scored at the generator's
default difficulty, not the task's."""

import pytest

from swarm.taskparams import env_options
from trainer.envs import EnvError, get_env
from trainer.single import task_table
from trainer.taskconfig import grpo_config

TASK = """
[task]
name = "rg-arith"
model = "smollm2-135m"
env = "reasoning-gym:basic_arithmetic"

[task.params]
max_new_tokens = 32
[task.params.env.basic_arithmetic]
max_terms = 2
operators = "+,-"
"""


def test_a_task_files_options_configure_the_generator(tmp_path):
    path = tmp_path / "task.toml"
    path.write_text(TASK)
    task = task_table(str(path))
    assert task["params"] == {"max_new_tokens": 32, "env.basic_arithmetic.max_terms": 2,
                              "env.basic_arithmetic.operators": "+,-"}
    env = get_env(task["env"], env_options(task["params"]))
    config = env.datasets["basic_arithmetic"].config
    assert config.max_terms == 2 and tuple(config.operators) == ("+", "-")
    assert grpo_config(task["params"]).max_new_tokens == 32


def test_evaluate_weights_builds_the_environment_with_the_task_options(monkeypatch):
    import trainer.evaluate
    from trainer.model import create_builtin_model

    seen = []

    def get_env_seen(name, options=None):
        seen.append((name, options))
        raise EnvError("stop: the options are what this test is about")

    monkeypatch.setattr(trainer.evaluate, "get_env", get_env_seen)
    net, _ = create_builtin_model(0)
    with pytest.raises(EnvError, match="stop"):
        trainer.evaluate.evaluate_weights(net.state_dict(), "builtin:digit-sort-tiny", "reasoning-gym:basic_arithmetic",
                                          params={"lr": 1e-5, "env.basic_arithmetic.max_terms": 2})
    assert seen == [("reasoning-gym:basic_arithmetic", {"basic_arithmetic.max_terms": 2})]


def test_held_out_scores_count_full_marks_apart_from_partial_credit():
    """reasoning-gym gives 0.5 for a wrong number that contains the right one: the mean reward alone
    would read that as half an answer right, so the score also says how many replies got full marks."""
    from trainer.envs import DigitSort
    from trainer.evaluate import evaluate_weights
    from trainer.model import create_builtin_model

    class HalfMarks(DigitSort):
        def reward(self, prompt, completion_text, finished=True):
            return 1.0 if prompt.index % 4 == 0 else 0.5

    net, _ = create_builtin_model(0)
    scores = evaluate_weights(net.state_dict(), env=HalfMarks(), n_heldout=16, sampled=False)
    assert scores["greedy"] == (4 * 1.0 + 12 * 0.5) / 16
    assert scores["greedy_exact"] == 4 / 16
