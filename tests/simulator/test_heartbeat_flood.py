"""Issue 27's attack 1 in the simulator: a peer floods heartbeats signed by keys it mints, 18 a second,
each declaring an hour's interval. Nothing vouches for a fresh key, so the flooder's neighbours take a
bounded number of them and relay none (swarm/core.py `_on_heartbeat`): the fakes reach no peer beyond its
neighbours, no honest interval stretches, and training goes on. Fakes that name the task are no
different: naming it is free, and nothing shows their signers work on it (swarm/evidence.py)."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict

import pytest

from simulator.run import run_scenario
from simulator.scenario import loads
from swarm.membership import MembershipConfig

SCENARIO = """
name = "heartbeat-flood"
duration = 400
seed = 3
settle = 60
checks = ["tasks-learned", "honest-not-banned", "versions-forward", "no-bad-training", "delivery-complete"]

[[peers]]
name = "trainer"
count = 1
roles = ["trainer"]
up_mbps = 1000
down_mbps = 1000

[[peers]]
name = "worker"
count = 5
roles = ["worker"]
up_mbps = 50
down_mbps = 100
join_spread = 5

[[peers]]
name = "relay"
count = 24
roles = ["relay"]
up_mbps = 50
down_mbps = 100
join_spread = 5

[[peers]]
name = "flooder"
count = 1
roles = ["relay"]
up_mbps = 50
down_mbps = 100
adversary = "heartbeat-flood"
adversary_params = {{ rate = 18.0, name_task = {name_task} }}

[[tasks]]
at = 20
by = "trainer"
"""


pytestmark = pytest.mark.slow  # eleven runs of 400 simulated seconds of 31 peers: about a minute


SEEDS = (3, 4, 5)


def scenario(name_task: int, seed: int = 3, rate: float = 18.0) -> str:
    return SCENARIO.format(name_task=name_task).replace("seed = 3", f"seed = {seed}").replace(
        "rate = 18.0", f"rate = {rate}")


def trained(name_task: int, seed: int, rate: float = 18.0) -> int:
    r = run_scenario(loads(scenario(name_task, seed, rate), "<heartbeat-flood>"))
    assert r.ok, r.failed
    return r.metrics["training"]["rollouts_trained"]


@functools.lru_cache(maxsize=None)
def unflooded_training(seed: int) -> int:
    """Rollouts the same swarm trains with the flooder all but idle (one fake in 100 s)."""
    return trained(0, seed, rate=0.01)


def flood(name_task: int):
    """The run, every record about a fake heartbeat, and each peer's final status."""
    events: list = []
    final: dict = {}

    def keep(t, peer, kind, fields):
        events.append((t, peer, kind, fields))

    def status(sim):
        for node in sim.nodes:
            if node.up:
                final[node.index] = (node.behaviour is not None, node.core.snapshot(node.core.next_deadline() or 0.0))

    r = run_scenario(loads(scenario(name_task), "<heartbeat-flood>"),
                     observers={k: keep for k in ("attack", "deliver", "reject")}, on_end=status)
    return r, events, final


@pytest.mark.parametrize("name_task", [0, 1])
def test_fresh_key_heartbeats_are_contained_and_stretch_no_honest_interval(name_task):
    r, events, final = flood(name_task)
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    fakes = {f["m"] for _, _, kind, f in events if kind == "attack"}
    assert len(fakes) > 0.9 * 18 * (400 - 60)  # the flood ran from the settle time on
    honest = {i for i, (adversary, _) in final.items() if not adversary}
    reached: dict[str, set] = defaultdict(set)
    why: Counter = Counter()
    for _, peer, kind, f in events:
        if kind != "attack" and f["m"] in fakes and peer in honest:
            reached[f["m"]].add(peer)
            why[f.get("why", "taken")] += 1
    widest = max(len(p) for p in reached.values())
    budget = MembershipConfig()
    # whether or not the fakes name the task: no peer relays one (a relayed one is recorded `deliver`:
    # taken), since nothing shows their signers work on it (swarm/evidence.py); each reached only the
    # peers the flooder pushed it to, its neighbours, which kept it (a bounded number with an entry)
    assert why["taken"] == 0 and why["kept"] > 0, why
    assert widest < len(honest) / 2, (widest, len(honest))
    # every honest peer's interval stays where the honest swarm puts it (31 peers: the 2 s base, up to
    # twice that with newcomers counted) and the newcomers it holds alive stay within the budget
    for i, (adversary, snap) in final.items():
        if i in honest:
            assert snap["membership"]["interval"] <= 2 * 3.1, (i, snap["membership"])
            assert snap["membership"]["newcomers_alive"] <= budget.newcomers, (i, snap["membership"])
    print(f"name_task={name_task}: {len(fakes)} fakes, widest reach {widest} peers, {dict(why)}")


@pytest.mark.parametrize("name_task", [0, 1])
def test_training_goes_on_under_the_flood(name_task):
    """A worker splits a step among the workers vouched for or committing to the task, and newcomers
    claiming the role up to as many (swarm/context.py workers_of), so fakes at most double the count.
    Counted up to the vouched peers' number, they had left 28-40 of 44 rollouts trained on seeds 1-6
    (24-28 under the flood naming the task; 16 with no bound); now 40-44 (40). One seed is a batch or two
    either way, so the bound is on the mean of three."""
    flooded = [trained(name_task, seed) for seed in SEEDS]
    unflooded = [unflooded_training(seed) for seed in SEEDS]
    print(f"name_task={name_task}: trained {flooded} (unflooded {unflooded})")
    assert sum(flooded) >= 0.85 * sum(unflooded)
