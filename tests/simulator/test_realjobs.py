"""Real role jobs in the simulator: trainer/jobs.py trains the tiny model, real shards carry the versions,
the real checks catch cheats, crashed workers resume from their data dirs, and the trace replays exactly.

One small swarm (a trainer, a trusted validator, a trusted lying validator, two workers, a worker that
generates with another model) with tiny task params, run once for the module: about 15 s of CPU.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.run import run_scenario
from simulator.scenario import loads

pytestmark = pytest.mark.slow  # every peer runs real torch jobs

ROOT = Path(__file__).resolve().parents[2]
REAL = "".join(f'[jobs.{kind}]\nmode = "real"\nseconds = {sec}\n'
               for kind, sec in (("init", 5), ("generate", 2), ("train", 2), ("verify", 0.5), ("unpack", 0.2)))
TEXT = """
name = "real-small"
duration = 150
seed = 3
settle = 40
checks = ["tasks-learned", "honest-not-banned", "versions-forward", "training-advances", "no-bad-training",
          "adversaries-banned"]

[[peers]]
name = "trainer"
count = 1
roles = ["trainer"]
churn = false

[[peers]]
name = "validator"
count = 1
roles = ["validator"]
churn = false

[[peers]]
name = "liar"
count = 1
roles = ["validator"]
adversary = "lying-validator"
churn = false

[[peers]]
name = "worker"
count = 2
roles = ["worker"]
up_mbps = 50

[[peers]]
name = "other-model"
count = 1
roles = ["worker"]
adversary = "other-model"
churn = false
join_at = 10

[churn]
crash_rate = 40.0
downtime = 5

[[tasks]]
at = 5
by = "trainer"
validators = ["validator", "liar"]
params = { warmup_steps = 3, eval_prompts = 16, group_size = 4, prompts_per_step = 4, prompts_per_commit = 2, max_new_tokens = 10, lr = 1e-4, format_weight = 1.0 }
""" + REAL


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(result, trace records, work dir) of one run that keeps its data dirs."""
    tmp = tmp_path_factory.mktemp("real")
    trace = tmp / "trace.jsonl"
    (tmp / "real-small.toml").write_text(TEXT)
    result = run_scenario(loads(TEXT, "<real-small>"), trace_path=str(trace), workdir=str(tmp / "work"))
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    return result, records, tmp


def _peers(records, group):
    return [r["peer"] for r in records if r["ev"] == "peer" and r["f"]["group"] == group]


def test_real_jobs_train_and_every_check_holds(run):
    r, records, _ = run
    assert r.ok, (r.failed, {n: c.violations[:3] for n, c in r.checks.items() if not c.ok})
    tr = r.metrics["training"]
    assert set(tr["jobs"]) == {"init", "generate", "verify", "train", "unpack"}
    assert tr["newest_version"] >= 5 and tr["rollouts_trained"] >= 5 and tr["installs"] > 0
    assert tr["rollouts_trained_from_adversaries"] == 0
    # The real steps report real GRPO figures (the cost model has no loss); wall-clock timings are left out
    # of the trace, or it would differ run to run.
    steps = [rec["f"] for rec in records if rec["ev"] == "emit.version-published" and rec["f"]["version"] > 0]
    assert any("loss" in f and "grad_norm" in f for f in steps)
    assert not any(k.endswith("_s") for f in steps for k in f)
    assert tr["reward_first"] is not None and tr["base_heldout_greedy"] is not None


def test_real_checks_catch_the_cheats(run):
    r, records, _ = run
    # The other-model worker's rollouts fail TOPLOC against the checker's own prefill: the real proofs
    # decide, not a cost model. The lying validator is banned once a trainer's check contradicts it.
    verdicts = r.metrics["training"]["verdicts"]
    assert verdicts.get("toploc", 0) >= 1
    ids = {r2["f"]["id"]: r2["f"]["group"] for r2 in records if r2["ev"] == "peer"}
    group = {r2["peer"]: r2["f"]["group"] for r2 in records if r2["ev"] == "peer"}
    honest = {"trainer", "validator", "worker"}
    banned = {ids.get(rec["f"]["peer"]) for rec in records
              if rec["ev"] == "emit.peer-banned" and group[rec["peer"]] in honest}  # (the liar bans honest workers)
    assert banned == {"other-model", "liar"}


def test_followers_rebuild_the_trainers_exact_weights_from_real_shards(run):
    _, records, tmp = run
    published = {rec["f"]["version"]: rec["f"]["weights"] for rec in records
                 if rec["ev"] == "emit.version-published"}
    validator = _peers(records, "validator")[0]
    installed = [rec["f"]["version"] for rec in records
                 if rec["ev"] == "emit.version-installed" and rec["peer"] == validator]
    assert installed
    # The validator's own unpack job wrote this file from the shards it fetched over the simulated network.
    blob = tmp / "work" / f"peer{validator}" / "blobs" / published[installed[-1]]
    assert hashlib.blake2b(blob.read_bytes(), digest_size=32).hexdigest() == published[installed[-1]]
    assert any((tmp / "work" / f"peer{validator}" / "shards").iterdir())


def test_crashed_workers_resume_from_their_data_dirs(run):
    r, records, tmp = run
    workers = _peers(records, "worker")
    restarts = [(rec["t"], rec["peer"]) for rec in records if rec["ev"] == "restart" and rec["peer"] in workers]
    assert restarts, "the churn settings should crash a worker"
    t, peer = restarts[0]
    # A new job process after the restart (its memory gone), the same state dir: it generates again and is
    # never taken for a replayer (a slice it generated before the crash is not committed twice).
    after = [rec for rec in records if rec["ev"] == "job-done" and rec["peer"] == peer and rec["t"] > t
             and rec["f"]["kind"] == "generate"]
    assert after and all(rec["f"]["ok"] for rec in after)
    assert r.checks["honest-not-banned"].ok
    assert (tmp / "work" / f"peer{peer}" / "state").is_dir()


def test_same_trace_in_another_process(run):
    r, _, tmp = run
    env = dict(os.environ, PYTHONHASHSEED="4242")
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(tmp / "real-small.toml"), "--json",
                           "--quiet"], capture_output=True, text=True, env=env, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["trace_hash"] == r.trace_hash


def test_the_run_deletes_the_data_dirs_it_made(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run_scenario(loads(_tiny_text(), "<real-tiny>"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("swarm-sim-")]


def _tiny_text():
    return TEXT.replace("duration = 150", "duration = 20").replace("settle = 40", "settle = 10").replace(
        "at = 5\n", "at = 1\n").replace("join_at = 10", "join_at = 2")


def test_cli_work_dir_keeps_the_data_dirs(tmp_path, capsys):
    from simulator import cli

    scenario = tmp_path / "tiny.toml"
    scenario.write_text(_tiny_text())
    work = tmp_path / "work"
    assert cli.main(["run", str(scenario), "--quiet", "--json", "--work-dir", str(work)]) in (0, 1)
    trainer = work / "peer0"
    assert (trainer / "state").is_dir() and any((trainer / "blobs").iterdir()) and any((trainer / "shards").iterdir())
    capsys.readouterr()
    # Refused with what to do: a non-empty dir, or a scenario whose jobs run on the cost model.
    assert cli.main(["run", str(scenario), "--quiet", "--work-dir", str(work)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert cli.main(["run", "smoke", "--quiet", "--work-dir", str(tmp_path / "other")]) == 2
    assert "cost model" in capsys.readouterr().err
