"""bench/learning.py's verdicts for a run of the swarm alone (`--no-singles`): its gain over its own
version 0, and the comparisons that need the single runs reported as not run."""

from bench.learning import swarm_only_verdicts


def _swarm(*greedy):
    return {"points": [{"version": v, "wall_s": 60.0 * v, "greedy": g} for v, g in enumerate(greedy)]}


def test_the_swarm_alone_is_judged_on_its_gain_over_its_version_0():
    judged = swarm_only_verdicts(_swarm(0.094, 0.413, 0.576, 0.514))
    assert judged["base_greedy"] == 0.094
    assert judged["best_greedy"] == {"swarm": 0.576}
    assert judged["gain_over_base"] == {"swarm": 0.482}
    assert judged["gain_target"]["result"] == {"swarm": "met"}
    assert judged["time_to_single_best"]["result"].startswith("not run")


def test_a_swarm_that_gained_less_than_the_target_missed_it():
    assert swarm_only_verdicts(_swarm(0.30, 0.35, 0.33))["gain_target"]["result"] == {"swarm": "missed"}


def test_a_swarm_without_a_scored_version_0_is_not_measurable():
    run = {"points": [{"version": 3, "wall_s": 0.0, "greedy": 0.5}]}
    assert swarm_only_verdicts(run)["gain_target"]["result"] == {"swarm": "not measurable"}
