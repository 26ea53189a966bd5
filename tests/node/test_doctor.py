"""`swarm-node --version` and `swarm-node doctor`: fast and light where they must be, each check's
ok/warn/fail with a next step, non-zero exit on a failure, and a running node asked for its peers."""

import socket
import subprocess
import sys
from collections import namedtuple

import pytest
import trio

from node import doctor
from node.config import NodeConfig
from node.runtime import run_node

HEAVY = ("torch", "trio", "libp2p", "transformers", "numpy", "textual")


def test_version_is_fast_and_imports_nothing_heavy():
    code = ("import sys\nfrom node.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit as e:\n"
            f"    print('exit', e.code)\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("swarm-node 0.") and "gossip protocol 1.0" in lines[0], out
    assert lines[1:] == ["exit 0", "[]"], out


def test_doctor_import_path_is_light():
    code = (f"import sys; import node.doctor; print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "[]", out


@pytest.mark.slow  # imports torch and toploc: seconds on a loaded machine
def test_machine_checks():
    assert doctor.check_python().level == doctor.OK  # the project's venv is 3.11
    torch_check = doctor.check_torch()
    assert torch_check.level == doctor.OK and "torch 2." in torch_check.found
    assert doctor.check_toploc().level in (doctor.OK, doctor.WARN)  # warn: not installed (an optional extra)


Usage = namedtuple("Usage", "total used free")
PLENTY = Usage(0, 0, 50 << 30)  # the CI machine's own free space must not decide these tests


def test_data_dir_checks(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: PLENTY)
    ok = doctor.check_data_dir(tmp_path / "new" / "node")
    assert ok.level == doctor.OK and "not made yet" in ok.found and not (tmp_path / "new").exists()
    bad = doctor.check_data_dir(__import__("pathlib").Path("/proc/self/swarm"))  # procfs takes no files
    assert bad.level == doctor.FAIL and "not writable" in bad.found and bad.next_step
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: Usage(0, 0, 3 << 30))
    assert doctor.check_data_dir(tmp_path).level == doctor.WARN
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: Usage(0, 0, 100 << 20))
    full = doctor.check_data_dir(tmp_path)
    assert full.level == doctor.FAIL and "0.1 GiB free" in full.found


def test_port_checks(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cfg = NodeConfig(data_dir=tmp_path, port=port, metrics_port=port)
        p2p, metrics = doctor.check_ports(cfg, None)
        assert p2p.level == metrics.level == doctor.FAIL and "cannot listen" in p2p.found and "ss -ltnp" in p2p.next_step
        assert all(c.level == doctor.OK and "running node" in c.found for c in doctor.check_ports(cfg, {"pid": 7}))
    assert [c.level for c in doctor.check_ports(NodeConfig(data_dir=tmp_path), None)] == [doctor.OK]  # port 0


def test_clock_skew_from_heartbeat_delays():
    def snap(*offsets_ms, out_of_window=0):
        return {"peers": [{"peer_id": f"peer{i}" * 4, "state": "alive", "clock_offset_ms": o}
                          for i, o in enumerate(offsets_ms)],
                "messages": {"rejected": {"out-of-window": out_of_window} if out_of_window else {}}}
    assert doctor.check_peers(None) == []
    assert doctor.check_peers(snap(3.0, 12.5))[0].level == doctor.OK
    ahead = doctor.check_peers(snap(3.0, -4000.0))[0]
    assert ahead.level == doctor.WARN and "-4000 ms" in ahead.found and "timedatectl" in ahead.next_step
    assert doctor.check_peers(snap(2500.0))[0].level == doctor.WARN
    assert doctor.check_peers(snap(out_of_window=3))[0].level == doctor.WARN


def test_a_node_that_stalled_is_told_its_machine_is_too_busy_not_its_clock():
    stalled = {"peers": [{"peer_id": "peer" * 4, "state": "alive", "clock_offset_ms": 4.0}],
               "messages": {"rejected": {"out-of-window": 40}}, "stalls": {"stalls": 2, "longest_s": 41.7}}
    clock, stalls = doctor.check_peers(stalled)
    assert clock.level == doctor.OK, "its late backlog is no sign of a skewed clock"
    assert stalls.level == doctor.WARN and "2 time(s)" in stalls.found and "42 s" in stalls.found
    assert "overloaded" in stalls.next_step
    assert [c.name for c in doctor.check_peers({**stalled, "stalls": {"stalls": 0}})] == ["clock"]


def test_main_exits_non_zero_on_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(doctor, "check_torch", lambda: doctor.Check("torch", doctor.OK, "torch (test)"))
    monkeypatch.setattr(doctor, "check_toploc", lambda: doctor.Check("toploc", doctor.OK, "toploc (test)"))
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: PLENTY)
    assert doctor.main(NodeConfig(data_dir=tmp_path)) == 0
    out = capsys.readouterr().out
    assert "not running" in out and out.strip().endswith("0 failed, 0 warnings, 6 ok")
    monkeypatch.setattr(doctor, "check_data_dir", lambda d: doctor.Check("data dir", doctor.FAIL, "x", "fix it"))
    assert doctor.main(NodeConfig(data_dir=tmp_path)) == 1
    assert "FAIL  data dir" in capsys.readouterr().out


async def test_doctor_asks_a_running_node(tmp_path):
    async with trio.open_nursery() as nursery:
        await nursery.start(run_node, NodeConfig(data_dir=tmp_path / "n0", heartbeat_interval=0.5, gone_after=3.0))
        snap, why = await trio.to_thread.run_sync(doctor.running_status, tmp_path / "n0")
        assert snap is not None and why == ""
        node = doctor.check_node(snap, why)
        assert node.level == doctor.WARN and "running (pid" in node.found and "--join" in node.next_step
        ports = doctor.check_ports(NodeConfig(data_dir=tmp_path / "n0", port=4001), snap)
        assert "belongs to the running node" in ports[0].found
        nursery.cancel_scope.cancel()
    assert doctor.running_status(tmp_path / "n0")[1] == "not running"
