"""Strict scenario loading: every mistake is one clear line naming the key, never a traceback."""

import subprocess
import sys

import pytest

from simulator import cli
from simulator.scenario import ScenarioError, load, loads, shipped

GOOD = """
name = "x"
duration = 100
[[peers]]
name = "a"
count = 2
[[peers]]
name = "b"
count = 3
"""


def test_every_shipped_scenario_loads():
    names = shipped()
    assert {"smoke", "churn", "bandwidth", "adversarial", "scale", "learning"} <= set(names)
    for name in names:
        s = load(name)
        assert s.name == name and s.total_peers >= 10
    assert load("scale").total_peers == 1000 and load("scale").duration == 3600
    big = load("scale-10k")  # run by hand (6 to 8 minutes here): docs/benchmarks.md
    assert big.total_peers == 10000 and big.duration >= 1800 and big.churn.replace_fraction > 0
    assert "heartbeat-flood" in {g.adversary for g in big.peers}  # issue 27: the membership flood runs in it
    for scale in (big, load("scale")):  # their task's traffic reaches its members only (docs/protocol.md §5.1)
        assert all(t.params.get("member_topics") is True for t in scale.tasks)
    assert "delivery-complete" in big.checks and "delivery-complete" in load("scale").checks  # at scale too
    assert load("churn").total_peers == 100 and load("churn").churn.replace_fraction == 0.3
    assert {spec.mode for spec in load("learning").jobs.values()} == {"real"}


@pytest.mark.parametrize("patch, message", [
    (GOOD + "[[peers]]\nname = \"c\"\ncount = 0\n", "scenario.peers[2].count: must be >= 1"),
    (GOOD.replace("duration = 100", "duration = 100\nspeed = 3"), "scenario.speed: unknown key"),
    (GOOD.replace("count = 3", "count = \"three\""), "scenario.peers[1].count: must be an integer, not str"),
    (GOOD.replace("count = 3", "count = 3\nup_mbps = -1"), "scenario.peers[1].up_mbps: must be > 0"),
    (GOOD + "[network]\nloss = 1.5\n", "scenario.network.loss: must be < 1"),
    (GOOD + "[network]\nlatency_ms = [[1, 2], [3, 4]]\n", "scenario.network.latency_ms: must have 4 rows"),
    (GOOD + "checks = []\n".replace("[]", "[\"all-good\"]"), "unknown key"),  # after a table: lands in it
    (GOOD.replace("duration = 100", "duration = 100\nchecks = [\"all-good\"]"), "scenario.checks[0]: unknown check"),
    (GOOD.replace("name = \"b\"", "name = \"b\"\nadversary = \"lying-validator\""),
     "scenario.peers[1].roles: adversary 'lying-validator' needs the 'validator' role"),
    (GOOD.replace("name = \"b\"", "name = \"b\"\nadversary = \"spam\"\nadversary_params = { rate = \"x\" }"),
     "scenario.peers[1].adversary: spam: param 'rate' must be a number"),
    (GOOD + "[core]\nsweep_interval = \"fast\"\n", "scenario.core.sweep_interval: must be a number"),
    (GOOD + "[core.membership]\nbogus = 1\n", "scenario.core.membership.bogus: unknown key"),
    (GOOD + "[gossip]\nD = 20\n", "scenario.gossip: need Dlo <= D <= Dhi"),
    (GOOD + "[[tasks]]\nat = 5\nby = \"nobody\"\n", "scenario.tasks[0].by: 'nobody' is not an honest peer group"),
    (GOOD.replace("duration = 100", "duration = 100\nsettle = 200"), "scenario.settle: must be < duration"),
    (GOOD.replace("duration = 100", "duration = 100\n[jobs.generate]\nmode = \"magic\""),
     "scenario.jobs.generate.mode: must be 'cost' or 'real', not 'magic'"),
    (GOOD.replace("duration = 100", "duration = 100\n[jobs.generate]\nmode = \"real\""),
     "scenario.jobs.init.mode: the roles' jobs run for real all together"),
    (GOOD.replace("duration = 100", "duration = 100\n[jobs.train]\nmode = \"real\"\nfunction = \"x\""),
     "scenario.jobs.train.function: the roles' jobs run trainer/jobs.py"),
    (GOOD.replace("count = 3", "count = 40") + "".join(f"[jobs.{k}]\nmode = \"real\"\n"
                                                       for k in ("init", "generate", "train", "verify", "unpack")),
     "scenario.peers: real role jobs are for small scenarios"),
    (GOOD + "[[tasks]]\nat = 5\nby = \"a\"\nparams = { colour = 1 }\n", "scenario.tasks[0].params.colour: unknown key"),
    (GOOD + "[[tasks]]\nat = 5\nby = \"a\"\nparams = { group_size = 0 }\n",
     "scenario.tasks[0].params.group_size: must be > 0, got 0"),
    (GOOD + "[[tasks]]\nat = 5\nby = \"a\"\nparams = { lr = \"fast\" }\n",
     "scenario.tasks[0].params.lr: must be a number, not str 'fast'"),
    (GOOD.replace("count = 3", "count = 3\njoin_at = nan"), "scenario.peers[1].join_at: must be a finite number"),
    ("name = \"x\"\nduration = [", "not valid TOML"),
    ("name = \"x\"\n[[peers]]\nname = \"a\"\ncount = 1\n", "scenario.duration: required"),
])
def test_bad_scenarios_name_the_key(patch, message):
    with pytest.raises(ScenarioError) as err:
        loads(patch, "<test>")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_good_scenario_loads_with_defaults():
    s = loads(GOOD)
    assert s.total_peers == 5 and s.network.bootstrap == 3 and s.checks == ()


def test_cli_reports_bad_file_without_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD + "[[peers]]\nname = \"c\"\ncount = 0\n")
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "scenario.peers[2].count: must be >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_unknown_scenario_name(capsys):
    assert cli.main(["run", "no-such-scenario"]) == 2
    assert "no scenario 'no-such-scenario'" in capsys.readouterr().err


def test_cli_list_shows_shipped(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("smoke", "churn", "bandwidth", "adversarial", "scale"):
        assert name in out
    assert "BROKEN" not in out
