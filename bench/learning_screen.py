"""bench/learning.py --screen: a base model's held-out accuracy on several tasks and difficulties.

Picks a task for a learning run: one where the base model is right sometimes (issue 26: between
0.05 and 0.6 greedy), so GRPO's groups have both right and wrong answers to learn from. The model is
loaded once; each setting is scored greedy on held-out prompts 0..n-1 with the same reward checker as
training (trainer/rollout.py), plus how often the reply used the answer tags (the format reward) and
finished within max_new_tokens.
"""

from __future__ import annotations

import time

# (env, its env.* params): reasoning-gym generators at settings a 135M model might sometimes solve
SETTINGS: list[tuple[str, dict]] = [
    ("reasoning-gym:basic_arithmetic", {"env.basic_arithmetic.max_terms": 2, "env.basic_arithmetic.max_digits": 1,
                                        "env.basic_arithmetic.operators": "+,-",
                                        "env.basic_arithmetic.allow_parentheses": False,
                                        "env.basic_arithmetic.allow_negation": False}),
    ("reasoning-gym:basic_arithmetic", {"env.basic_arithmetic.max_terms": 3, "env.basic_arithmetic.max_digits": 2,
                                        "env.basic_arithmetic.operators": "+,-",
                                        "env.basic_arithmetic.allow_parentheses": False,
                                        "env.basic_arithmetic.allow_negation": False}),
    ("reasoning-gym:chain_sum", {"env.chain_sum.max_terms": 2, "env.chain_sum.max_digits": 2}),
    ("reasoning-gym:products", {"env.products.max_digits": 1}),
    ("reasoning-gym:leg_counting", {"env.leg_counting.min_animals": 1, "env.leg_counting.max_animals": 2,
                                    "env.leg_counting.max_instances": 3}),
    ("reasoning-gym:base_conversion", {"env.base_conversion.max_base": 10, "env.base_conversion.max_value": 32}),
    ("reasoning-gym:propositional_logic", {}),
    ("reasoning-gym:gcd", {"env.gcd.max_value": 30}),
    ("reasoning-gym:count_bits", {"env.count_bits.max_n": 63}),
]


def screen(model: str, settings: list[tuple[str, dict]], n: int, max_new_tokens: int, threads: int,
           say=print) -> list[dict]:
    import torch

    from swarm.taskparams import env_options
    from trainer.envs import get_env
    from trainer.inference import TorchBackend
    from trainer.policy import base_model
    from trainer.rollout import generate_rollouts

    torch.set_num_threads(threads)
    net, tokenizer = base_model(model, 0)
    backend = TorchBackend(net.eval(), tokenizer.eos_token_id, tokenizer.pad_token_id, capture_hidden=False)
    rows = []
    for env_name, params in settings:
        env = get_env(env_name, env_options(params))
        t0 = time.monotonic()
        rollouts = generate_rollouts(env, tokenizer, backend, list(range(n)), samples=1,
                                     max_new_tokens=max_new_tokens, temperature=0.0, split="heldout",
                                     task_id="bench-screen")
        rewards = [env.reward(r.prompt, r.text, r.completion.finished) for r in rollouts]
        row = {"env": env_name, "params": params, "prompts": n, "max_new_tokens": max_new_tokens,
               "greedy": round(sum(rewards) / n, 4),
               "format": round(sum(env.format_reward(r.prompt, r.text, r.completion.finished)
                                   for r in rollouts) / n, 4),
               "finished": round(sum(r.completion.finished for r in rollouts) / n, 4),
               "tokens_mean": round(sum(len(r.completion.token_ids) for r in rollouts) / n, 1),
               "seconds": round(time.monotonic() - t0, 1),
               "example": {"prompt": rollouts[0].prompt.text[:300], "answer": rollouts[0].prompt.answer,
                           "reply": rollouts[0].text[:300], "reward": rewards[0]}}
        say(f"screen {env_name} {params}: greedy {row['greedy']:.3f} format {row['format']:.2f} "
            f"finished {row['finished']:.2f} tokens {row['tokens_mean']} ({row['seconds']} s)")
        rows.append(row)
    return rows
