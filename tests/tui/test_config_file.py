"""Config file: defaults < file < flags, clear errors naming the key, `config show` round trip."""

import json
from pathlib import Path

import pytest

from node.cli import main
from node.config_file import ConfigError, load_file, node_config, resolve


def write(tmp_path, text, name="node.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_file_then_flags_override(tmp_path):
    cfg = write(tmp_path, 'data_dir = "d0"\nport = 4001\nroles = ["trainer"]\nbootstrap = true\n'
                          'heartbeat_interval = 1\nlog_format = "json"\nmetrics_port = 9464\njob_threads = 2\n')
    s = resolve({"config": cfg}, Path("/default"))
    assert s["data_dir"] == tmp_path / "d0"  # relative to the file, not the working directory
    assert (s["port"], s["roles"], s["bootstrap"], s["heartbeat_interval"], s["metrics_port"]) == (4001, ("trainer",), True, 1.0, 9464)
    s = resolve({"config": cfg, "port": 5000, "roles": "worker,relay", "join": ["/ip4/1.2.3.4/tcp/1"]}, Path("/d"))
    assert s["port"] == 5000 and s["roles"] == ("worker", "relay")
    assert s["join"] == ("/ip4/1.2.3.4/tcp/1",) and s["bootstrap"] is False  # --join replaces the file's bootstrap
    assert s["log_format"] == "json" and s["gone_after"] == 10.0  # untouched: file, then default
    n = node_config(s)
    assert n.roles == ("worker", "relay") and n.metrics_port == 9464 and n.heartbeat_interval == 1.0
    assert n.job_threads == 2 and node_config(resolve({}, Path("/d"))).job_threads == 1
    assert resolve({}, Path("/d"))["data_dir"] == Path("/d")


@pytest.mark.parametrize("text, words", [
    ("prot = 1", ["unknown key 'prot'", "did you mean 'port'"]),
    ('port = "4001"', ["key 'port' must be an integer", "str '4001'"]),
    ("port = 70000", ["key 'port' must be <= 65535, got 70000"]),
    ("bootstrap = 1", ["key 'bootstrap' must be true or false"]),
    ("join = [1, 2]", ["key 'join[0]' must be a string, not int 1"]),
    ('log_format = "xml"', ["key 'log_format'", "'text' or 'json'"]),
    ("heartbeat_interval = -1", ["key 'heartbeat_interval' must be > 0, got -1"]),
    ("heartbeat = 2", ["unknown key 'heartbeat'", "did you mean 'heartbeat_interval'"]),
    ("upload_mbps = inf", ["key 'upload_mbps' must be a finite number"]),
    ('roles = ["worker", "wizard"]', ["key 'roles' unknown role 'wizard'"]),
    ('job_device = "gpu"', ["key 'job_device' must be \"cpu\", \"cuda\" or \"cuda:N\""]),
    ("metrics_port = true", ["key 'metrics_port' must be an integer"]),
    ("job_threads = 0", ["key 'job_threads' must be >= 1, got 0"]),
    ("job_threads = 1.5", ["key 'job_threads' must be an integer"]),
    ('bootstrap = true\njoin = ["/ip4/1.1.1.1/tcp/1"]', ["'bootstrap' and 'join' exclude each other"]),
    ("port = ", ["not valid TOML"]),
])
def test_bad_files_name_the_key(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_file(path)
    assert str(path) in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_config_show_round_trips_and_start_fails_early(tmp_path, capsys):
    cfg = write(tmp_path, 'data_dir = "d1"\nroles = "worker"\njoin = "/ip4/127.0.0.1/tcp/9/p2p/x"\n')
    assert main(["config", "show", "--config", str(cfg), "--port", "4100", "--metrics-port", "9100"]) == 0
    shown = capsys.readouterr().out
    again = write(tmp_path, shown, "shown.toml")
    expected = resolve({"config": cfg, "port": 4100, "metrics_port": 9100}, Path("/unused"))
    assert resolve({"config": again}, Path("/unused")) == expected  # what show prints loads back the same
    assert expected["join"] == ("/ip4/127.0.0.1/tcp/9/p2p/x",) and expected["roles"] == ("worker",)
    assert main(["config", "show", "--config", str(cfg), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["data_dir"] == str(tmp_path / "d1")
    bad = write(tmp_path, "roles = ['wizard']", "bad.toml")
    assert main(["start", "--config", str(bad)]) == 2
    assert "unknown role 'wizard'" in capsys.readouterr().err
    assert main(["start", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "no such config file" in capsys.readouterr().err
    assert main(["config", "show", "--heartbeat-interval", "5", "--gone-after", "2"]) == 2
    assert "heartbeat_interval (5 s) must be below gone_after (2 s)" in capsys.readouterr().err
    assert main(["config", "show", "--port", "70000"]) == 2
    assert "--port: must be <= 65535, got 70000" in capsys.readouterr().err
