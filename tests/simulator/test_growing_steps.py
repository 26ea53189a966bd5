"""Growing steps (the task's `max_prompts_per_step`) with a swarm that generates faster than its trainer
trains: the workers generate a full step's worth of each version between them, the trainer waits for a
batch of the policy before its newest (swarm/roles/steps.py) instead of stepping on the
first prompts_per_step checked, so its steps grow, it trains nearly all the time and nothing ages out.
Cost-model jobs at the real-jobs durations (generate a batch 1.0 s, verify 0.37 s, train 0.33 s per
prompts_per_step: SmolLM2's train/generate ratio on an H100), 16 workers, a minute and a half."""

from simulator import compose
from simulator.run import run_scenario

DURATIONS = {"init": 20.0, "generate": 1.0, "train": 0.33, "verify": 0.37, "unpack": 0.1}


def test_a_swarm_faster_than_its_trainer_keeps_it_training_and_wastes_nothing():
    params = {**compose.STEP, "check_quorum": 1, "spot_check": 0.1, "max_prompts_per_step": 256}
    task = compose.task(async_level=4, validators=["validator"], params=params)
    jobs = {kind: {"mode": "cost", "seconds": seconds, "jitter": 0.2 if kind in ("generate", "verify") else 0.0}
            for kind, seconds in DURATIONS.items()}
    s = compose.scenario("growing-steps", duration=90, seed=1, settle=60, jobs=jobs, tasks=[task],
                         checks=["honest-not-banned", "versions-forward"],
                         peers=[compose.trainer(), compose.workers(16), compose.validators(7)])
    r = run_scenario(s)
    assert r.ok, r.failed
    tp, tr = r.metrics["throughput"], r.metrics["training"]
    # Sized from the last step, steps stayed at their minimum (16 prompts, a version a second), the
    # trainer was idle 61% of the time and 157 of 530 batches aged out before they were checked.
    assert not tr["dropped"], tr["dropped"]
    assert tp["trainer_train_fraction"] >= 0.8, tp
    mean_step = tp["completions_trained_per_hour"] / max(1.0, tp["versions_per_hour"]) / params["group_size"]
    assert mean_step >= 4 * params["prompts_per_step"], (mean_step, tp)
