"""Environments: deterministic prompts by index and deterministic reward checkers.

Prompt `i` of a split is generated from blake2b(env name, split, i), so every peer builds the same
prompt from the index alone and a validator can recompute rewards without trusting anyone.
Splits are disjoint by construction: a held-out prompt whose text also occurs in the training split
space is skipped (see `DigitSort`), so held-out accuracy measures generalisation.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

SPLITS = ("train", "heldout")


def prompt_rng(env: str, split: str, index: int) -> random.Random:
    """A private PRNG seeded from blake2b(env, split, index); never the global random."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if index < 0:
        raise ValueError(f"prompt index must be >= 0, got {index}")
    digest = hashlib.blake2b(f"{env}\x00{split}\x00{index}".encode(), digest_size=16).digest()
    return random.Random(int.from_bytes(digest, "big"))


@dataclass(frozen=True)
class Prompt:
    """One task instance. `text` is what the model sees (before any chat template)."""

    env: str
    split: str
    index: int
    text: str
    answer: str


class Environment:
    """Interface: deterministic prompts, a deterministic checker, and how to tokenise a prompt."""

    name: str = ""
    chat: bool = False  # wrap the prompt in the tokenizer's chat template
    n_prompts: int = 1 << 30  # size of the index space assignment draws from

    def prompt(self, index: int, split: str = "train") -> Prompt:
        raise NotImplementedError

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        """Task reward in [0, 1]. `finished` is False when generation stopped without eos."""
        raise NotImplementedError

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        """Optional shaping reward for well-formed output; 0 unless an environment overrides it."""
        return 0.0

    def prompt_ids(self, tokenizer, prompt: Prompt) -> list[int]:
        """Token ids fed to the model: chat template for chat models, else bos + characters."""
        if self.chat:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt.text}], add_generation_prompt=True,
                tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return list(tokenizer(prompt.text)["input_ids"])


class DigitSort(Environment):
    """Prompt: 5-8 random digits then '>'. Answer: the digits sorted ascending, then eos.

    Reward is 1.0 for an exact match that ended with eos, else 0.0. The held-out split draws from
    the same distribution but skips any digit string that could appear in training: a string is
    "training" if the blake2b of its text is even, "held-out" if odd, so the two never overlap.
    """

    name = "digit-sort"
    min_len, max_len = 5, 8

    def prompt(self, index: int, split: str = "train") -> Prompt:
        rng = prompt_rng(self.name, split, index)
        while True:
            n = rng.randint(self.min_len, self.max_len)
            digits = "".join(rng.choice("0123456789") for _ in range(n))
            if _split_of(digits) == split:
                return Prompt(self.name, split, index, digits + ">", "".join(sorted(digits)))

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        return 1.0 if finished and completion_text == prompt.answer else 0.0

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        ok = finished and len(completion_text) == len(prompt.answer) and completion_text.isdigit()
        return 1.0 if ok else 0.0


def _split_of(text: str) -> str:
    parity = hashlib.blake2b(text.encode(), digest_size=1).digest()[0] & 1
    return "train" if parity == 0 else "heldout"


class ChatArithmetic(Environment):
    """For a real chat model: "What is a + b?" with a, b in [0, 50]; reward 1.0 when the last
    integer in the reply equals a + b. The format reward asks for a reply that is just the number.
    Splits are disjoint operand pairs, decided by the hash of "a+b" as in DigitSort.
    """

    name = "chat-add"
    chat = True

    def prompt(self, index: int, split: str = "train") -> Prompt:
        rng = prompt_rng(self.name, split, index)
        while True:
            a, b = rng.randint(0, 50), rng.randint(0, 50)
            if _split_of(f"{a}+{b}") == split:
                text = f"What is {a} + {b}? Reply with only the number."
                return Prompt(self.name, split, index, text, str(a + b))

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        numbers = re.findall(r"-?\d+", completion_text)
        return 1.0 if numbers and numbers[-1] == prompt.answer else 0.0

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        return 1.0 if finished and completion_text.strip() == prompt.answer else 0.0


ENVIRONMENTS = {cls.name: cls for cls in (DigitSort, ChatArithmetic)}


def get_env(name: str) -> Environment:
    """Environment by name, e.g. 'digit-sort' or 'chat-add'."""
    try:
        return ENVIRONMENTS[name]()
    except KeyError:
        raise ValueError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)}") from None
