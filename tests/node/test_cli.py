import json
import subprocess
import sys
import time

import pytest

from node.cli import main


def run_cli(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args", [["--help"], ["start", "--help"], ["local", "--help"], ["task", "announce", "--help"],
                                  ["doctor", "--help"]])
def test_help_is_fast(args):
    started = time.monotonic()
    out = run_cli(*args)
    elapsed = time.monotonic() - started
    assert out.returncode == 0 and "usage: swarm-node" in out.stdout
    # Generous on purpose: a few tenths of a second unloaded (pydantic builds the settings models), but
    # a loaded 2-core CI machine stretches that; importing torch would take several seconds more.
    # Which modules --help imports is checked exactly by the next test.
    assert elapsed < 10.0, f"--help took {elapsed:.2f} s"


def test_help_imports_no_heavy_modules():
    code = ("import sys; from node.cli import build_parser; build_parser(); print(sorted(m for m in "
            "('torch','trio','libp2p','transformers','numpy','safetensors','textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "[]"


def test_keygen_and_id(tmp_path, capsys):
    assert main(["keygen", "--data-dir", str(tmp_path)]) == 0
    peer_id = capsys.readouterr().out.strip()
    assert peer_id.startswith("12D3KooW")
    assert main(["id", "--data-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peer_id"] == peer_id
    assert main(["keygen", "--data-dir", str(tmp_path)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_clear_errors(tmp_path, capsys):
    assert main(["id", "--data-dir", str(tmp_path / "none")]) == 1
    assert "swarm-node keygen" in capsys.readouterr().err
    assert main(["start", "--data-dir", str(tmp_path)]) == 2
    assert "--bootstrap" in capsys.readouterr().err
    assert main(["status", "--data-dir", str(tmp_path)]) == 1
    assert "no node is running" in capsys.readouterr().err
    assert main(["start", "--bootstrap", "--roles", "wizard", "--data-dir", str(tmp_path)]) == 2
    assert "unknown role" in capsys.readouterr().err
    (tmp_path / "identity.key").write_text("junk")
    (tmp_path / "identity.key").chmod(0o600)
    assert main(["start", "--bootstrap", "--data-dir", str(tmp_path)]) == 1
    assert "corrupt" in capsys.readouterr().err


@pytest.mark.parametrize("trainers", [0, 3])
def test_local_refuses_a_trainer_count_that_leaves_no_worker(tmp_path, capsys, monkeypatch, trainers):
    import node.local

    def never(**kwargs):
        raise AssertionError("no peer may start")
    monkeypatch.setattr(node.local, "run_local", never)
    base = tmp_path / "swarm"
    assert main(["local", "--peers", "3", "--trainers", str(trainers), "--base-dir", str(base)]) == 2
    err = capsys.readouterr().err
    assert f"--trainers {trainers}" in err and "1 to 2 trainers" in err and "at least one peer must be a worker" in err
    assert not base.exists()


def test_local_passes_the_trainer_count_on(tmp_path, monkeypatch):
    import node.local
    seen = {}
    monkeypatch.setattr(node.local, "run_local", lambda **kwargs: seen.update(kwargs) or 0)
    assert main(["local", "--peers", "3", "--trainers", "2", "--base-dir", str(tmp_path)]) == 0
    assert seen["trainers"] == 2 and seen["peers"] == 3
    assert main(["local", "--peers", "3", "--base-dir", str(tmp_path)]) == 0
    assert seen["trainers"] == 1


def test_local_gives_each_peer_a_metrics_port(tmp_path, monkeypatch, capsys):
    """`local --metrics-port BASE`: peer i is started with --metrics-port BASE+i (stopped at once here:
    the fake start of the last peer is a Ctrl-C)."""
    import node.local
    started = []

    class Done:
        pid, returncode, stdout = 1, 0, None

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    def fake_start(args, log_path, nice=0):
        started.append(args)
        if len(started) == 3:
            raise KeyboardInterrupt
        return Done(), "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWfake"
    monkeypatch.setattr(node.local, "start_peer", fake_start)
    assert main(["local", "--peers", "3", "--metrics-port", "9500", "--base-dir", str(tmp_path)]) == 0
    assert [a[a.index("--metrics-port") + 1] for a in started] == ["9500", "9501", "9502"]
    assert main(["local", "--peers", "3", "--metrics-port", "65535", "--base-dir", str(tmp_path)]) == 2
    assert "--metrics-port 65535: give a port from 1 to 65533" in capsys.readouterr().err
