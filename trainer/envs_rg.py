"""reasoning-gym's generators as environments: `reasoning-gym:<task>`, a list, or a weighted mix.

    env = "reasoning-gym:basic_arithmetic"           # one generator
    env = "reasoning-gym:basic_arithmetic,chain_sum" # several, equal weights
    env = "reasoning-gym:mix"                        # the tasks named by env.<task>.weight params

Task params `env.<task>.<option>` are the generator's own config fields
(`reasoning_gym.create_dataset(<task>, **options)`); `env.<task>.weight` (default 1) is the task's
share of the mix. A config field whose default is a list or tuple takes a comma-separated string
(`"env.basic_arithmetic.operators" = "+,-"`). `seed` defaults to 0, never to reasoning-gym's random one.

Prompt `i` of a split is a pure function of (env name, options, split, i): a private PRNG seeded from
blake2b(env name, split, i) picks the task (by weight) and an item index `j`, and the prompt is item
`j` of that task's dataset, which reasoning-gym generates from `Random(seed + j)` alone. A question
whose blake2b parity (with its task's name) marks it as the other split's is skipped, so training
and held-out questions never overlap.

The format asked for: the question, then a line asking for the final answer between `<answer>` and
`</answer>`. The answer scored is the last `<answer>...</answer>` in the reply; a reply without the
tags is scored on its last number when the expected answer is a number, else on its last non-empty
line. The reward is the generator's own `score_answer(answer, entry)` (in [0, 1]; some tasks give
partial credit). The format reward is 1 for a finished reply with exactly one non-empty tag pair and
nothing after it.

The pin is `reasoning-gym==<installed version>` (from the package metadata: reasoning_gym.__version__
says 0.1.19 in 0.1.25).
"""

from __future__ import annotations

import dataclasses
import re

from trainer.envs import EnvError, Environment, Prompt, split_of, prompt_rng

DIST = "reasoning-gym"
INSTRUCTION = "\n\nGive your final answer between <answer> and </answer>, for example <answer>7</answer>."
ITEM_SPACE = 1 << 40  # item indices j drawn per prompt
MAX_DRAWS = 256  # items tried per prompt before giving up on a generator that makes too few distinct questions

_TAGS = re.compile(r"<answer>(.*?)</answer>", re.S)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DIST)
    except PackageNotFoundError:
        return None


def make_reasoning_gym(name: str, spec: str, options: dict) -> "ReasoningGym":
    """The environment `name` ("reasoning-gym:<spec>") with the task's env.* options."""
    have = installed_version()
    if have is None:
        raise EnvError(f"environment {name!r} needs the reasoning-gym package, which is not installed: "
                       f"pip install {DIST}")
    try:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS
    except Exception as exc:  # an installed but broken package
        raise EnvError(f"environment {name!r}: importing reasoning_gym failed ({type(exc).__name__}: {exc}); "
                       f"reinstall {DIST}=={have}") from None
    per_task: dict[str, dict] = {}
    for key, value in options.items():
        task, dot, option = key.partition(".")
        if not dot or not task or not option:
            raise EnvError(f"environment {name!r}: option env.{key} must be env.<task>.<option>")
        per_task.setdefault(task, {})[option] = value
    if spec == "mix":
        tasks = sorted(t for t, opts in per_task.items() if "weight" in opts)
        if not tasks:
            raise EnvError(f"environment {name!r} names its tasks by env.<task>.weight params; the task has none")
    else:
        tasks = [t.strip() for t in spec.split(",")] if spec else []
        if not tasks or not all(tasks) or len(set(tasks)) != len(tasks):
            raise EnvError(f"environment {name!r}: name reasoning-gym:<task>[,<task>...] or reasoning-gym:mix")
    for task in list(tasks) + sorted(per_task):
        if task not in DATASETS:
            close = sorted(t for t in DATASETS if task[:4] in t)[:5]
            raise EnvError(f"environment {name!r}: reasoning-gym {have} has no task {task!r}"
                           + (f" (did you mean {close}?)" if close else ""))
        if task not in tasks:
            raise EnvError(f"environment {name!r}: options name task {task!r}, which it does not include")
    parts = []
    for task in tasks:
        opts = dict(per_task.get(task, {}))
        weight = opts.pop("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise EnvError(f"environment {name!r}: env.{task}.weight must be a number > 0, got {weight!r}")
        config = _config(name, task, DATASETS[task][1], opts)
        try:
            dataset = reasoning_gym.create_dataset(task, **config)
        except Exception as exc:  # the generator's own validation (asserts, TypeErrors)
            raise EnvError(f"environment {name!r}: reasoning-gym refused the options of {task!r} "
                           f"({type(exc).__name__}: {exc})") from None
        parts.append((task, float(weight), dataset))
    return ReasoningGym(name, parts, f"{DIST}=={have}")


def _config(name: str, task: str, config_cls, options: dict) -> dict:
    """The task's options as its config dataclass wants them; unknown fields refused by name."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    out = {"seed": 0}
    for option, value in options.items():
        f = fields.get(option)
        if f is None:
            raise EnvError(f"environment {name!r}: env.{task}.{option} is not a config field of "
                           f"{task} (fields: {sorted(k for k in fields if k != 'size')})")
        default = f.default if f.default is not dataclasses.MISSING else None
        if isinstance(default, (list, tuple)) and isinstance(value, str):
            value = type(default)(v.strip() for v in value.split(","))
        out[option] = value
    return out


class ReasoningGym(Environment):
    chat = True

    def __init__(self, name: str, parts: list, pin: str) -> None:
        self.name, self.parts, self.pin = name, parts, pin
        self.total = sum(w for _, w, _ in parts)
        self.datasets = {task: dataset for task, _, dataset in parts}

    def prompt(self, index: int, split: str = "train") -> Prompt:
        rng = prompt_rng(self.name, split, index)
        for _ in range(MAX_DRAWS):
            task, dataset = self._pick(rng.random() * self.total)
            entry = dataset[rng.randrange(ITEM_SPACE)]
            question = str(entry["question"])
            if split_of(f"{task}\x00{question}") == split:
                return Prompt(self.name, split, index, question + INSTRUCTION, str(entry["answer"]),
                              data=(task, entry))
        raise EnvError(f"environment {self.name!r}: no {split} question in {MAX_DRAWS} draws for prompt "
                       f"{index}; its generators make too few distinct questions (raise their difficulty)")

    def _pick(self, x: float):
        for task, weight, dataset in self.parts:
            if x < weight:
                return task, dataset
            x -= weight
        return self.parts[-1][0], self.parts[-1][2]

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        task, entry = prompt.data
        answer = extract_answer(completion_text, prompt.answer)
        if answer is None:
            return 0.0
        score = float(self.datasets[task].score_answer(answer=answer, entry=entry))
        return min(1.0, max(0.0, score)) if score == score else 0.0

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        tags = _TAGS.findall(completion_text)
        ok = (finished and len(tags) == 1 and tags[0].strip() != ""
              and completion_text.rsplit("</answer>", 1)[1].strip() == "")
        return 1.0 if ok else 0.0


def extract_answer(text: str, expected: str) -> str | None:
    """The answer a reply gives: its last <answer>...</answer>; without tags, its last number when
    `expected` is a number, else its last non-empty line; None when it gives none."""
    tags = _TAGS.findall(text)
    if tags:
        return tags[-1].strip()
    if _NUMBER.fullmatch(expected.strip()):
        numbers = _NUMBER.findall(text)
        return numbers[-1] if numbers else None
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None
