"""An environment plugin for swarm: "digit-reverse", reverse 4-8 digits (the built-in model's alphabet).

swarm finds it through the `swarm.environments` entry point in pyproject.toml: the entry point's name
is the environment family a task names (`env = "digit-reverse"` or `"digit-reverse:<spec>"`), its
value a factory called as `make(spec, options)` with the part after ':' and the task's `env.*` params
(prefix removed), returning a `trainer.envs.Environment`.

The rules every environment keeps, because every peer rebuilds prompts and recomputes rewards:
  - prompt(i, split) is a pure function of (environment name, options, split, i): seed from
    `prompt_rng`, never the global random, the clock or a set's iteration order;
  - the two splits never share a prompt (here: by `split_of` on the digits);
  - reward and format_reward are deterministic functions of the prompt and the completion text.
The package's version is pinned in the task (`env_version = "swarm-env-example==0.1.0"`, filled in by
`swarm-node task announce`): bump it whenever prompts or rewards change.
"""

from trainer.envs import EnvError, Environment, Prompt, prompt_rng, split_of


class DigitReverse(Environment):
    chat = False  # the built-in model reads characters; a chat model would get its chat template

    def __init__(self, min_len: int = 4, max_len: int = 8) -> None:
        self.min_len, self.max_len = min_len, max_len

    def prompt(self, index: int, split: str = "train") -> Prompt:
        rng = prompt_rng(self.name, split, index)
        while True:
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(self.min_len, self.max_len)))
            if split_of(digits) == split:
                return Prompt(self.name, split, index, digits + ">", digits[::-1])

    def reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        return 1.0 if finished and completion_text == prompt.answer else 0.0

    def format_reward(self, prompt: Prompt, completion_text: str, finished: bool = True) -> float:
        ok = finished and len(completion_text) == len(prompt.answer) and completion_text.isdigit()
        return 1.0 if ok else 0.0


def make(spec: str, options: dict) -> Environment:
    """The entry point: `spec` is what follows "digit-reverse:" (unused here), `options` the task's
    env.* params: env.min_len and env.max_len."""
    if spec:
        raise EnvError(f"digit-reverse takes no spec, got {spec!r}")
    unknown = sorted(set(options) - {"min_len", "max_len"})
    if unknown:
        raise EnvError(f"digit-reverse has no option env.{unknown[0]} (options: env.min_len, env.max_len)")
    lo, hi = options.get("min_len", 4), options.get("max_len", 8)
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi <= 12):
        raise EnvError("digit-reverse: env.min_len and env.max_len must be integers with 1 <= min_len <= max_len <= 12")
    return DigitReverse(lo, hi)
