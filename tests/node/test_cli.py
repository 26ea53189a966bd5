import json
import subprocess
import sys
import time

import pytest

from node.cli import main


def run_cli(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args", [["--help"], ["start", "--help"], ["local", "--help"], ["task", "announce", "--help"]])
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
