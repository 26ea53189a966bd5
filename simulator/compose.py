"""Scenarios built in code, for tests and benches that vary one (workers, checkers, cheaters, job
costs): dicts in the shape of a scenario file (docs/simulator.md), checked by the same schema
(`scenario.from_data`). One place knows a peer group's and a task's shape, where each caller used to
keep its own TOML template in step with the schema.

    from simulator import compose
    s = compose.scenario("quorum", duration=600, checks=["versions-forward"],
                         peers=[compose.trainer(), compose.workers(6), compose.group("liar", role="validator",
                                adversary="lying-validator")],
                         tasks=[compose.task(params={**compose.STEP, "check_quorum": 1})])
"""

from __future__ import annotations

from simulator.scenario import Scenario, from_data

# The links the role scenarios give each kind of peer (learning.toml and the scaling/quorum tests):
# a well-connected trainer that churn never replaces, home-broadband workers, validators in between.
TRAINER_LINK = {"up_mbps": 1000, "down_mbps": 1000, "churn": False}
WORKER_LINK = {"up_mbps": 50, "down_mbps": 100}
VALIDATOR_LINK = {"up_mbps": 200, "down_mbps": 200}

# The built-in task's step shape (node/examples/digit-sort.toml) and, for real jobs, its GRPO settings
# as learning.toml runs them.
STEP = {"group_size": 16, "prompts_per_step": 16, "prompts_per_commit": 8}
LEARNING = {**STEP, "lr": 3e-5, "clip_low": 0.2, "clip_high": 0.28, "minibatches": 2, "temperature": 1.0,
            "max_new_tokens": 10}


def group(name: str, count: int = 1, role: str | None = None, *, adversary: str = "", **fields) -> dict:
    """A [[peers]] table: `count` peers named `name` with one role (`name` unless given)."""
    table = {"name": name, "count": count, "roles": [role or name]}
    if adversary:
        table["adversary"] = adversary
    return {**table, **fields}


def trainer(count: int = 1, **fields) -> dict:
    return group("trainer", count, **{**TRAINER_LINK, **fields})


def workers(count: int, **fields) -> dict:
    return group("worker", count, **{**WORKER_LINK, **fields})


def validators(count: int = 1, **fields) -> dict:
    return group("validator", count, **{**VALIDATOR_LINK, **fields})


def task(*, at: float = 5, by: str = "trainer", params: dict | None = None, **fields) -> dict:
    """A [[tasks]] entry: the built-in task, announced by the first peer of group `by`."""
    return {"at": at, "by": by, "params": dict(params or {}), **fields}


def real_jobs(*, init: float = 20, generate: float = 1.0, train: float = 0.6, verify: float = 0.37,
              unpack: float = 0.1) -> dict:
    """A [jobs] table running the roles' jobs for real (the tiny model learns) on learning.toml's virtual
    durations: generate a batch 1.0 s, train a step 0.6 s, verify 0.37x of generating (measured)."""
    return {"init": {"mode": "real", "seconds": init},
            "generate": {"mode": "real", "seconds": generate, "jitter": 0.2},
            "train": {"mode": "real", "seconds": train, "jitter": 0.1},
            "verify": {"mode": "real", "seconds": verify, "jitter": 0.2},
            "unpack": {"mode": "real", "seconds": unpack}}


def scenario(name: str, *, duration: float, peers: list[dict], tasks: list[dict] = (), checks: list[str] = (),
             seed: int = 1, **fields) -> Scenario:
    """The scenario, checked as a file is; `fields` are any other top-level keys (settle, jobs, core, ...)."""
    return from_data({"name": name, "duration": duration, "seed": seed, "checks": list(checks),
                      "peers": list(peers), "tasks": list(tasks), **fields})
