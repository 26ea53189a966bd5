"""`swarm-node tui` and `config show` on the command line: fast help, which nodes get watched."""

import subprocess
import sys
from pathlib import Path

import pytest

import node.tui
from node.cli import main


@pytest.mark.parametrize("args", [["tui", "--help"], ["config", "show", "--help"]])
def test_help_is_fast_and_imports_no_textual(args):
    code = ("import sys, time; t = time.monotonic(); from node.cli import main\n"
            f"try: main({args!r})\nexcept SystemExit: pass\n"
            "print('textual' in sys.modules, time.monotonic() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    imported, seconds = out.stdout.strip().splitlines()[-1].split()
    # `imported` is the exact check (textual costs the start-up time); the time bound is loose because this
    # suite shares a 2-core machine with other work, where a bare interpreter can take over a second.
    assert imported == "False" and float(seconds) < 10.0, out.stdout


def test_tui_watches_the_given_and_the_local_data_dirs(tmp_path, monkeypatch):
    seen = {}

    def fake_run(dirs, interval):
        seen.update(dirs=dirs, interval=interval)
        return 0
    monkeypatch.setattr(node.tui, "run_tui", fake_run)
    for name in ("peer1", "peer0", "other"):
        (tmp_path / name).mkdir()
    assert main(["tui", "--data-dir", "/x/a", "--base-dir", str(tmp_path), "--interval", "0.5"]) == 0
    assert seen == {"dirs": [Path("/x/a"), tmp_path / "peer0", tmp_path / "peer1"], "interval": 0.5}
    assert main(["tui", "--interval", "0"]) == 2
