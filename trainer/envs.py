"""Environments: deterministic prompts by index and deterministic reward checkers.

Prompt `i` of a split is generated from blake2b(env name, split, i), so every peer builds the same
prompt from the index alone and a validator can recompute rewards without trusting anyone.
Splits are disjoint by construction: a held-out prompt whose text also occurs in the training split
space is skipped (see `DigitSort`), so held-out accuracy measures generalisation.

Where an environment comes from, by its name (`get_env`):
  - built in: "digit-sort", "chat-add" (below);
  - "reasoning-gym:<task>[,<task>...]" or "reasoning-gym:mix": reasoning-gym's generators
    (trainer/envs_rg.py);
  - "<family>[:<spec>]": a plugin, i.e. an entry point named <family> in the `swarm.environments`
    group of any installed package (docs/operating.md has a worked example).
An environment built from a package carries `pin`, "<distribution>==<version>" of the package whose
code makes its prompts and rewards: a signed task names it (task param `env_version`) and a peer
with another version refuses the task (trainer/pins.py), since honest peers that generate or score
differently would fail each other's checks.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "heldout")
PLUGIN_GROUP = "swarm.environments"  # entry points: name = environment family, value = factory(spec, options)


class EnvError(ValueError):
    """An environment cannot be built on this peer (unknown name, a package missing, a bad option);
    the message says what to install or change."""


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
    data: Any = field(default=None, compare=False, repr=False)  # the generator's own record, for its scorer


class Environment:
    """Interface: deterministic prompts, a deterministic checker, and how to tokenise a prompt."""

    name: str = ""
    chat: bool = False  # wrap the prompt in the tokenizer's chat template
    n_prompts: int = 1 << 30  # size of the index space assignment draws from
    pin: str | None = None  # "<distribution>==<version>" whose code makes prompts and rewards; None: built in

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
            if split_of(digits) == split:
                return Prompt(self.name, split, index, digits + ">", "".join(sorted(digits)))

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        return 1.0 if finished and completion_text == prompt.answer else 0.0

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        ok = finished and len(completion_text) == len(prompt.answer) and completion_text.isdigit()
        return 1.0 if ok else 0.0


def split_of(text: str) -> str:
    """'train' or 'heldout' by the parity of the text's blake2b: the two splits never share a text."""
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
            if split_of(f"{a}+{b}") == split:
                text = f"What is {a} + {b}? Reply with only the number."
                return Prompt(self.name, split, index, text, str(a + b))

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        numbers = re.findall(r"-?\d+", completion_text)
        return 1.0 if numbers and numbers[-1] == prompt.answer else 0.0

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        return 1.0 if finished and completion_text.strip() == prompt.answer else 0.0


ENVIRONMENTS = {cls.name: cls for cls in (DigitSort, ChatArithmetic)}  # built in: no pin, no options


def get_env(name: str, options: dict | None = None) -> Environment:
    """Environment by name, e.g. 'digit-sort', 'reasoning-gym:basic_arithmetic' or a plugin's name;
    `options` are the task's `env.*` params without the prefix. EnvError says what is missing."""
    options = dict(options or {})
    if name in ENVIRONMENTS:
        if options:
            raise EnvError(f"environment {name!r} takes no options, got env.{sorted(options)[0]}")
        return ENVIRONMENTS[name]()
    family, _, spec = name.partition(":")
    if family == "reasoning-gym":
        from trainer.envs_rg import make_reasoning_gym

        return make_reasoning_gym(name, spec, options)
    entry = plugins().get(family)
    if entry is None:
        raise EnvError(f"unknown environment {name!r}: not built in ({', '.join(sorted(ENVIRONMENTS))}, "
                       f"reasoning-gym:<task>) and no installed package registers {family!r} in the "
                       f"{PLUGIN_GROUP!r} entry-point group (installed: {sorted(plugins()) or 'none'}); "
                       "install the package that provides it")
    return _from_plugin(name, spec, options, entry)


def plugins() -> dict:
    """Installed environment plugins: family name -> its importlib.metadata EntryPoint."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def _from_plugin(name: str, spec: str, options: dict, entry) -> Environment:
    dist = getattr(entry, "dist", None)
    where = f"{entry.value} (package {dist.name if dist else '?'})"
    try:
        factory = entry.load()
    except Exception as exc:  # a broken plugin is its package's failure, never ours
        raise EnvError(f"environment {name!r}: loading {where} failed: {type(exc).__name__}: {exc}; "
                       "reinstall that package") from None
    try:
        env = factory(spec, options)
    except EnvError:
        raise
    except Exception as exc:
        raise EnvError(f"environment {name!r}: {where} refused spec {spec!r} and options "
                       f"{sorted(options)}: {type(exc).__name__}: {exc}") from None
    if not isinstance(env, Environment):
        raise EnvError(f"environment {name!r}: {where} returned {type(env).__name__}, not a "
                       "trainer.envs.Environment")
    if env.pin is None:
        if dist is None:
            raise EnvError(f"environment {name!r}: cannot tell which package provides {entry.value}")
        env.pin = f"{dist.name}=={dist.version}"
    env.name = name
    return env
