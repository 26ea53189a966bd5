"""The trainer-failover scenario: three trainers, two crashes and a partition; training goes on and
the swarm ends on one chain (swarm/forkchoice.py, swarm/roles/standby.py)."""

import re

import pytest

from simulator.run import run_scenario
from simulator.scenario import load
from tests.simulator.test_scenarios import PINNED


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_trainer_failover_keeps_training_and_heals_to_one_chain():
    s = load("trainer-failover")
    assert s.tasks[0].trainers == 3 and s.faults.crashes and s.faults.partitions[0].side
    r = run_scenario(s)
    assert r.trace_hash == PINNED["trainer-failover"], "trainer-failover behaves differently; see PINNED"
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    for name in ("training-advances", "one-chain", "trained-on-own-chain", "versions-forward", "honest-not-banned",
                 "no-bad-training", "delivery-complete"):
        assert r.checks[name].ok, name
    gap, bound = map(float, re.search(r"longest gap ([\d.]+) s \(bound ([\d.]+)\)",
                                      r.checks["training-advances"].detail).groups())
    assert gap <= bound <= 30.0 + 2 * 60.0  # takeover_after (3 x 10 s) plus two version periods
    healed = re.search(r"one chain \[([\d.]+)\] s after", r.checks["one-chain"].detail)
    assert healed and float(healed.group(1)) <= 30.0  # within takeover_after of the heal
    tr = r.metrics["training"]
    assert tr["rollouts_trained"] > 100 and tr["newest_version"] >= 30
    # each takeover continued from a trainer checkpoint the standby had fetched (older than the version
    # it continued from: state_every is 20 versions), never from nothing
    st = r.metrics["trainer_state"]
    assert st["checkpoints"] >= 3 and len(st["takeovers"]) == 3
    assert all(t["state_version"] is not None and t["state_version"] <= t["from_version"] for t in st["takeovers"])
    assert st["restored"] == {"moments": 3}
    assert 0 < st["wire_fraction_of_weights"] < 0.5
