"""The roles run in the simulator: versions advance, rollouts are trained, weights swarm as shards,
and every rollout-level adversary is caught with the reason the real check gives and never trained on.

Small swarms (a trainer, a validator, a few workers) for a few simulated minutes, cost-model jobs.
"""

import json
from collections import Counter

import pytest

from simulator import compose, rolejobs
from simulator.run import run_scenario

CHECKS = ["tasks-learned", "honest-not-banned", "versions-forward", "no-bad-training"]
JOBS = {"generate": {"seconds": 10}, "train": {"seconds": 15}, "verify": {"seconds": 1}}


def scenario(name="roles", duration=300, seed=1, workers=4, adversaries=(), validators=("validator",),
             extra_checks=(), first=(), worker_fields=None, **fields):
    """A trainer, a validator, `workers` workers and `adversaries`, after the groups `first`."""
    peers = [*first, compose.trainer(), compose.validators(), compose.workers(workers, **(worker_fields or {})),
             *adversaries]
    return compose.scenario(name, duration=duration, seed=seed, settle=40, checks=CHECKS + list(extra_checks),
                            peers=peers, tasks=[compose.task(at=10, validators=list(validators))], jobs=JOBS,
                            **fields)


def adversary(name, kind, role="worker", count=1):
    return compose.group(name, count, role, adversary=kind)


def run(s, tmp_path):
    path = tmp_path / f"{s.name}.jsonl"
    result = run_scenario(s, trace_path=str(path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return result, records


def ids_of(records, group):
    return {r["f"]["id"] for r in records if r["ev"] == "peer" and r["f"]["group"] == group}


def test_roles_train_and_versions_reach_every_follower(tmp_path):
    r, records = run(scenario(), tmp_path)
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    tr = r.metrics["training"]
    assert tr["newest_version"] >= 3 and tr["rollouts_trained"] > 0 and tr["installs"] > 0
    assert tr["jobs_failed"] == {} and tr["forged_jobs"] == 0
    assert set(tr["jobs"]) == {"init", "generate", "verify", "train", "unpack"}
    spread = r.metrics["version_spread"]
    assert spread["reached_95"] >= 3 and spread["seconds_p50"] > 0
    # Shards travel on the flow model: a download cannot beat the follower's 100 Mbit/s downlink.
    done = [rec["f"] for rec in records if rec["ev"] == "emit.shards-complete"]
    assert done and all(f["seconds"] >= f["bytes_in"] * 8 / 100e6 for f in done)
    assert any(f["bytes_in"] >= 4 << 20 for f in done)  # the full version 0 (4 MB) went to every follower
    served = [rec["f"]["size"] for rec in records if rec["ev"] == "respond" and rec["f"]["size"] >= 256 << 10]
    assert served  # 256 KiB piece answers (of 1 MiB shards) went over the wire
    # Every honest check passed; nothing was refused as a missing blob or shard.
    assert set(tr["verdicts"]) == {"ok"}


@pytest.mark.parametrize("kind,alias,reason", [("other-model", "different-model", "toploc"),
                                               ("inflated-reward", "inflated-rewards", "reward"),
                                               ("cherry-pick", "cherry-picked-prompts", "assignment")])
def test_rollout_cheat_is_caught_with_its_reason_and_never_trained_on(tmp_path, kind, alias, reason):
    s = scenario(name=kind, adversaries=[adversary("cheat", alias)], extra_checks=("adversaries-banned",))
    r, records = run(s, tmp_path)
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    cheat = ids_of(records, "cheat")
    (cheat_index,) = [rec["peer"] for rec in records if rec["ev"] == "peer" and rec["f"]["group"] == "cheat"]
    forged = [rec for rec in records if rec["ev"] == "job-done" and rec["peer"] == cheat_index
              and rec["f"]["kind"] == "generate"]
    assert forged and all(rec["f"]["honest"] is False for rec in forged)
    verdicts = Counter((rec["f"]["worker"] in cheat, rec["f"]["passed"], rec["f"]["reason"])
                       for rec in records if rec["ev"] == "emit.verdict")
    assert verdicts[(True, False, reason)] >= 1, verdicts
    assert not any(is_cheat and passed for is_cheat, passed, _ in verdicts)  # never passed by an honest check
    assert not any(not is_cheat and not passed for is_cheat, passed, _ in verdicts)  # no honest batch failed
    trained = [rec["f"]["worker"] for rec in records if rec["ev"] == "emit.rollout-trained"]
    assert trained and not cheat & set(trained)  # non-vacuous: honest rollouts were trained, forged ones never
    assert r.metrics["training"]["rollouts_trained_from_adversaries"] == 0
    banned_by = {rec["peer"] for rec in records if rec["ev"] == "emit.peer-banned" and rec["f"]["peer"] in cheat}
    assert banned_by  # at least one honest peer banned it (adversaries-banned above says the same)


def test_lying_validator_loses_trust_and_honest_workers_stay(tmp_path):
    s = scenario(name="liar", workers=4, adversaries=[adversary("liar", "lying-validator", role="validator"),
                                                   adversary("cheat", "other-model")],
                 validators=("validator", "liar"),
                 extra_checks=("adversaries-banned",))
    r, records = run(s, tmp_path)
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    liar = ids_of(records, "liar")
    trainer = {rec["peer"] for rec in records if rec["ev"] == "peer" and rec["f"]["group"] == "trainer"}
    bans = [rec for rec in records if rec["ev"] == "emit.peer-banned" and rec["f"]["peer"] in liar]
    assert any(rec["peer"] in trainer for rec in bans)  # its own check contradicted the liar
    assert any("wrong verdict" in rec["f"]["reason"] for rec in records
               if rec["ev"] == "emit.peer-banned" and rec["f"]["peer"] in liar)
    lies = [rec for rec in records if rec["ev"] == "emit.verdict" and rec["peer"] in
            {p["peer"] for p in records if p["ev"] == "peer" and p["f"]["group"] == "liar"}]
    assert lies and r.metrics["training"]["rollouts_trained_from_adversaries"] == 0
    assert r.metrics["training"]["rollouts_trained"] > 0


@pytest.mark.parametrize("kind,blame", [("corrupted-shards", "bad-shard"), ("withheld-shards", "withheld")])
def test_shard_adversaries_are_blamed_and_versions_still_spread(tmp_path, kind, blame):
    # They follow the weights as (untrusted) validators: their rollouts, had they made any as workers,
    # would be honest, yet no-bad-training counts every adversary's rollouts as bad.
    s = scenario(name=kind, workers=3, adversaries=[adversary("bad", kind, role="validator", count=2)])
    r, records = run(s, tmp_path)
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    bad = ids_of(records, "bad")
    blamed = Counter(rec["f"]["reason"] for rec in records
                     if rec["ev"] == "emit.shard-rejected" and rec["f"]["peer"] in bad)
    assert blamed[blame] >= 1, blamed
    honest_blamed = [rec for rec in records if rec["ev"] == "emit.shard-rejected" and rec["f"]["peer"] not in bad
                     and rec["f"]["reason"] == "bad-shard"]
    assert not honest_blamed
    spread = r.metrics["version_spread"]
    assert spread["versions"] >= 3
    assert spread["reached_95"] >= spread["versions"] - 1  # the newest may still be on its way at the end


def test_no_bad_training_fails_when_a_forged_rollout_is_trained(tmp_path, monkeypatch):
    """The checker is not vacuous: with a blind check (every batch passes) the trainer trains on a
    cheater's rollouts, and no-bad-training must fail naming it."""
    monkeypatch.setattr(rolejobs, "check", lambda batch, job, store: "ok")
    s = scenario(name="blind", workers=2, adversaries=[adversary("cheat", "inflated-reward", count=2)])
    r, records = run(s, tmp_path)
    check = r.checks["no-bad-training"]
    assert not check.ok and "no-bad-training" in r.failed
    cheat = ids_of(records, "cheat")
    assert check.violations and all(v["worker"] in cheat for v in check.violations)
    assert r.metrics["training"]["rollouts_trained_from_adversaries"] > 0


def test_role_runs_are_deterministic(tmp_path):
    s = scenario(name="det", duration=200, adversaries=[adversary("cheat", "cherry-pick")])
    a = run_scenario(s)
    b = run_scenario(s)
    c = run_scenario(scenario(name="det", duration=200, seed=2, adversaries=[adversary("cheat", "cherry-pick")]))
    assert a.trace_hash == b.trace_hash != c.trace_hash
    assert a.metrics["training"]["rollouts_trained"] > 0


def test_scenario_refuses_a_cheat_without_its_role():
    from simulator.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="needs the 'worker' role"):
        scenario(adversaries=[{"name": "x", "count": 1, "adversary": "other-model"}])
    with pytest.raises(ScenarioError, match="validators: 'nobody' is not a peer group"):
        scenario(validators=("nobody",))


def test_restarted_trainer_resumes_from_its_last_version():
    """Like trainer/jobs.py: a crashed trainer's init job republishes its last version (as a full one)
    from its data dir, so versions keep moving forward."""
    from simulator.run import prepare
    from simulator.trace import Trace

    trace = Trace()
    published = []
    trace.observe("emit.version-published", lambda t, peer, kind, f: published.append((t, peer, f["version"])))
    sim, _ = prepare(scenario(name="resume", duration=400, workers=3), trace)
    sim.loop.run(150.0)
    before = max(v for _, _, v in published)
    assert before >= 2
    sim.stop_peer(0, "crash")
    sim.start_peer(0)
    sim.loop.run(400.0)
    after = [v for t, _, v in published if t > 150.0]
    assert after[0] == before and max(after) > before  # resumed, then trained on


def sparse(name="sparse", relays=40):
    """The roles joining after `relays` relays, each peer joining through one peer and keeping 2 links:
    followers are rarely linked to a holder."""
    return scenario(name=name, duration=150, seed=3, workers=3, first=[compose.group("relay", relays, churn=False)],
                    worker_fields={"join_spread": 5}, network={"bootstrap": 1},  # workers after the relays
                    core={"membership": {"target_connections": 2}})


def test_followers_dial_a_holder_when_no_link_holds_their_version(tmp_path):
    """CORE_CHANGES item 9: the exchange asks only linked peers, so with few random links a follower
    must dial a holder it learnt of (manifest signer, ShardHave, heartbeat), or it never gets a shard."""
    r, records = run(sparse(), tmp_path)
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    followers = ids_of(records, "worker") | ids_of(records, "validator")
    index = {rec["peer"]: rec["f"]["id"] for rec in records if rec["ev"] == "peer"}
    installed = {index[rec["peer"]] for rec in records if rec["ev"] == "emit.version-installed"}
    assert installed == followers  # every follower installed a version
    tr = r.metrics["training"]
    assert tr["newest_version"] >= 1 and tr["rollouts_trained"] > 0


def test_without_holder_dials_sparse_followers_starve(tmp_path, monkeypatch):
    """The scenario above needs the dials: with no holder links allowed, some follower installs nothing."""
    from swarm.roles import shards
    monkeypatch.setattr(shards, "HOLDER_LINKS", 0)
    r, records = run(sparse(name="starved"), tmp_path)
    followers = ids_of(records, "worker") | ids_of(records, "validator")
    index = {rec["peer"]: rec["f"]["id"] for rec in records if rec["ev"] == "peer"}
    installed = {index[rec["peer"]] for rec in records if rec["ev"] == "emit.version-installed"}
    assert installed < followers, (len(installed), len(followers))


@pytest.mark.parametrize("job_remembers", [True, False])
def test_crash_restarted_worker_is_not_banned_as_a_replayer(monkeypatch, job_remembers):
    """A restarted worker starts its batch counter at 0 again; its job process remembers the slices
    it generated (trainer/generated.py, simulator/content.py), so it never commits one twice. Without
    that memory the same crashes get it banned for a replay (the churn scenario did, before)."""
    from simulator.content import NodeStore
    from simulator.run import prepare
    from simulator.trace import Trace

    if not job_remembers:
        monkeypatch.setattr(NodeStore, "record_generated", lambda self, key: None)
    trace = Trace()
    banned, skipped, committed = [], [], []
    worker = 2  # trainer, validator, then the workers
    trace.observe("emit.peer-banned", lambda t, peer, kind, f: banned.append((peer, f.get("reason", ""))))
    trace.observe("emit.rollouts-skipped", lambda t, peer, kind, f: skipped.append((t, peer)))
    trace.observe("emit.rollouts-committed", lambda t, peer, kind, f: committed.append(t) if peer == worker else None)
    sim, _ = prepare(scenario(name="restarts", duration=400, workers=3), trace)
    at, crashes = 60.0, 0
    while at < 330 and crashes < 8:  # each crash comes right after a commitment, within its version
        sim.loop.run(at)
        at += 1.0
        if committed and committed[-1] > at - 2.0:
            sim.stop_peer(worker, "crash")
            sim.loop.run(at + 2.0)
            sim.start_peer(worker)
            crashes, at = crashes + 1, at + 2.0
    sim.loop.run(400.0)
    if job_remembers:
        assert not banned and skipped and {p for _, p in skipped} == {worker}
    else:
        assert banned and {r for _, r in banned} == {"cheated"} and not skipped


def test_worker_crashed_while_generating_generates_the_slice_again():
    """A crash while a generate job runs leaves no record of its slice (trainer/generated.py records a
    slice just before answering), so the restarted worker generates and commits it. Recorded when the job
    started, the slice was skipped as `repeated`, and with one batch per worker per version the worker
    made nothing more for that version (scale-10k trained nothing once its workers churned)."""
    from simulator.run import prepare
    from simulator.trace import Trace

    trace = Trace()
    worker, queued, committed, skipped, banned = 2, [], [], [], []
    trace.observe("job-queued", lambda t, peer, kind, f: queued.append(t) if peer == worker and f["kind"] == "generate"
                  else None)
    trace.observe("emit.rollouts-committed", lambda t, peer, kind, f: committed.append((t, f["version"]))
                  if peer == worker else None)
    trace.observe("emit.rollouts-skipped", lambda t, peer, kind, f: skipped.append((t, peer, f["version"])))
    trace.observe("emit.peer-banned", lambda t, peer, kind, f: banned.append(f))
    s = scenario(name="mid-job-crashes", duration=400, workers=4)  # 4 batches of 4 prompts: every one a step
    task = s.tasks[0].model_copy(update={"params": {**s.tasks[0].params, "max_batches_per_version": 1}})
    sim, _ = prepare(s.model_copy(update={"tasks": (task,)}), trace)
    at, crashes = 40.0, 0
    while at < 300 and crashes < 5:  # each crash comes 4 s into a generate job (10 s long)
        sim.loop.run(at)
        at += 1.0
        if queued and at - 5.0 <= queued[-1] < at - 4.0:
            sim.stop_peer(worker, "crash")
            sim.loop.run(at + 2.0)
            sim.start_peer(worker)
            crashes, at = crashes + 1, at + 2.0
            restarted, before = at, len(committed)
            sim.loop.run(at + 25.0)  # the install, then the job again: committed within its 10 s
            assert len(committed) > before, f"crash {crashes} at {restarted - 2.0}: nothing committed after it"
            at += 25.0
    sim.loop.run(400.0)
    assert crashes >= 3 and not banned, (crashes, banned)
    assert {v for _, _, v in skipped} <= {v for _, v in committed}, "only slices committed before are skipped"
