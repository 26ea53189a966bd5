"""One seed, one trace: same scenario + seed gives the same trace_hash, in any process."""

import json
import os
import subprocess
import sys

from simulator.run import run_scenario
from simulator.scenario import load, with_seed

from tests.simulator.helpers import tiny


def test_same_seed_same_hash_different_seed_different_hash():
    s = tiny(duration=90, extra="[workload]\nprobe_rate = 1.0\n[churn]\ncrash_rate = 6.0\ndowntime = 5\n")
    a, b = run_scenario(s), run_scenario(s)
    c = run_scenario(with_seed(s, 2))
    assert a.trace_hash == b.trace_hash
    assert a.trace_hash != c.trace_hash
    assert a.stats["events"] == b.stats["events"]


def test_writing_a_trace_file_does_not_change_the_hash(tmp_path):
    s = tiny(duration=60, extra="[workload]\nprobe_rate = 1.0\n")
    path = tmp_path / "trace.jsonl"
    with_file = run_scenario(s, trace_path=str(path))
    assert with_file.trace_hash == run_scenario(s).trace_hash
    lines = path.read_text().splitlines()
    assert len(lines) == with_file.stats["trace_lines"] + 0 or len(lines) > 100
    first = json.loads(lines[0])
    assert first["ev"] == "scenario" and first["f"]["seed"] == 1
    assert {json.loads(line)["ev"] for line in lines} >= {"peer", "start", "publish", "deliver", "connect", "emit.peer-alive"}


def _hash_in_subprocess(hashseed: str, seed: int) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "smoke", "--seed", str(seed), "--json",
                           "--quiet"], capture_output=True, text=True, env=env, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["trace_hash"]


def test_hash_is_independent_of_pythonhashseed_across_processes():
    a = _hash_in_subprocess("1", 7)
    b = _hash_in_subprocess("4242", 7)
    assert a == b
    assert a == run_scenario(with_seed(load("smoke"), 7)).trace_hash


def test_seed_and_faults_are_printed_first(tmp_path):
    s = tmp_path / "f.toml"
    s.write_text(open(os.path.join(os.path.dirname(__file__), "..", "..", "simulator", "scenarios", "smoke.toml")).read()
                 .replace("duration = 300", "duration = 80").replace("settle = 60", "settle = 20")
                 + "\n[faults]\nrandom = true\nloss_max = 0.05\npartitions_max = 0\n")
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(s), "--seed", "99", "--quiet"],
                          capture_output=True, text=True, timeout=120)
    first, second = proc.stderr.splitlines()[:2]
    assert "seed 99" in first and "--seed 99" in first
    faults = json.loads(second.split("faults ", 1)[1])
    assert 0 < faults["loss"] <= 0.05 and faults["slow"]
