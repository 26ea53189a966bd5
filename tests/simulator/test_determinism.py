"""One seed, one trace: same scenario + seed gives the same trace, byte for byte, in any process; another
seed gives another trace. The traces compared are busy ones (thousands of deliveries, the roles at
work), so equal hashes say the whole run repeated, not that two near-empty runs agreed."""

import collections
import hashlib
import json
import os
import subprocess
import sys

from simulator.run import run_scenario
from simulator.scenario import load, with_seed

from tests.simulator.helpers import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_same_seed_same_hash_different_seed_different_hash():
    s = tiny(duration=90, extra="[workload]\nprobe_rate = 2.0\n[churn]\ncrash_rate = 6.0\ndowntime = 5\n")
    a, b = run_scenario(s), run_scenario(s)
    c = run_scenario(with_seed(s, 2))
    assert a.trace_hash == b.trace_hash
    assert a.trace_hash != c.trace_hash
    clock = {"cpu_s", "wall_s", "events_per_s", "sim_s_per_wall_s"}  # the only stats that may differ
    assert {k: v for k, v in a.stats.items() if k not in clock} == {k: v for k, v in b.stats.items() if k not in clock}
    assert a.stats["events"] > 1000 and a.stats["gossip_deliveries"] > 500  # a busy run, crash-restarts included


def test_writing_a_trace_file_does_not_change_the_hash(tmp_path):
    s = tiny(duration=60, extra="[workload]\nprobe_rate = 1.0\n")
    path = tmp_path / "trace.jsonl"
    with_file = run_scenario(s, trace_path=str(path))
    assert with_file.trace_hash == run_scenario(s).trace_hash
    lines = path.read_text().splitlines()
    assert len(lines) == with_file.stats["trace_lines"] > 100
    first = json.loads(lines[0])
    assert first["ev"] == "scenario" and first["f"]["seed"] == 1
    assert {json.loads(line)["ev"] for line in lines} >= {"peer", "start", "publish", "deliver", "connect", "emit.peer-alive"}


def _run_in_subprocess(hashseed: str, seed: int, trace) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "smoke", "--seed", str(seed), "--json",
                           "--quiet", "--trace", str(trace)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["trace_hash"]


# Smoke at seed 7 makes about 24,500 trace lines: ~19,500 deliveries, ~2,200 publishes, ~560 shard
# requests, a version installed ~60 times. The floors sit well under that: the point is that the
# runs compared did real work of every kind, not their exact amounts (test_scenarios.py pins those).
BUSY = {"deliver": 5000, "publish": 500, "request": 100, "response": 100, "job-done": 50, "connect": 20,
        "start": 10, "emit.task-learned": 10, "emit.version-installed": 20, "emit.rollout-trained": 5}


def test_two_processes_write_byte_identical_traces_and_another_seed_does_not(tmp_path):
    """Separate interpreters with different PYTHONHASHSEEDs (so set and dict-of-str orders differ) write
    the same trace file byte for byte; the hash they print is the in-process run's; seed 8 differs."""
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    hash_a = _run_in_subprocess("1", 7, a)
    hash_b = _run_in_subprocess("4242", 7, b)
    assert hash_a == hash_b
    data = a.read_bytes()
    assert hashlib.blake2b(data).digest() == hashlib.blake2b(b.read_bytes()).digest()
    in_process = run_scenario(with_seed(load("smoke"), 7), trace_path=str(c))
    assert in_process.trace_hash == hash_a and c.read_bytes() == data
    other = run_scenario(with_seed(load("smoke"), 8))
    assert other.trace_hash != hash_a
    kinds = collections.Counter(json.loads(line)["ev"] for line in data.decode().splitlines())
    assert sum(kinds.values()) == in_process.stats["trace_lines"]
    short = {k: (kinds[k], floor) for k, floor in BUSY.items() if kinds[k] < floor}
    assert not short, short


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
