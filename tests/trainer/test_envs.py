import pytest

from trainer.envs import ChatArithmetic, DigitSort, get_env, prompt_rng


def test_digit_sort_prompts_are_deterministic_and_well_formed():
    env = DigitSort()
    for i in range(200):
        p = env.prompt(i)
        assert p == DigitSort().prompt(i)
        digits = p.text[:-1]
        assert p.text.endswith(">") and digits.isdigit() and 5 <= len(digits) <= 8
        assert p.answer == "".join(sorted(digits))
    assert len({env.prompt(i).text for i in range(200)}) > 190


def test_splits_are_disjoint():
    env = DigitSort()
    train = {env.prompt(i, "train").text for i in range(3000)}
    held = {env.prompt(i, "heldout").text for i in range(3000)}
    assert not train & held
    with pytest.raises(ValueError):
        env.prompt(0, "test")


def test_digit_sort_reward_is_exact_and_needs_eos():
    env = DigitSort()
    p = env.prompt(0)
    assert env.reward(p, p.answer) == 1.0
    assert env.reward(p, p.answer, finished=False) == 0.0
    assert env.reward(p, p.answer + "0") == 0.0
    assert env.reward(p, p.answer[::-1] if p.answer != p.answer[::-1] else "x") == 0.0
    assert env.format_reward(p, "9" * len(p.answer)) == 1.0
    assert env.format_reward(p, "9") == 0.0


def test_digit_sort_prompt_ids_are_bos_plus_characters():
    from trainer.tokenizer import CharTokenizer

    t = CharTokenizer()
    p = DigitSort().prompt(5)
    assert DigitSort().prompt_ids(t.to_hf(), p) == t.encode(p.text)


def test_chat_arithmetic_checker():
    env = ChatArithmetic()
    p = env.prompt(3)
    a, b = (int(x) for x in p.text.removeprefix("What is ").split("?")[0].split(" + "))
    assert p.answer == str(a + b)
    assert env.reward(p, f"The answer is {a + b}.") == 1.0
    assert env.reward(p, f"{a + b + 1}") == 0.0
    assert env.reward(p, "no idea") == 0.0
    assert env.format_reward(p, f" {a + b}\n") == 1.0
    assert env.format_reward(p, f"It is {a + b}") == 0.0
    assert {env.prompt(i, "heldout").text for i in range(300)}.isdisjoint(
        {env.prompt(i, "train").text for i in range(300)})


def test_prompt_rng_is_private_and_validates():
    import random

    random.seed(1)
    x = prompt_rng("e", "train", 1).random()
    random.seed(2)
    assert prompt_rng("e", "train", 1).random() == x
    with pytest.raises(ValueError):
        prompt_rng("e", "train", -1)
    with pytest.raises(ValueError, match="unknown environment"):
        get_env("nope")
