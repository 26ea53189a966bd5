"""A weight version spreading over real peer processes on 127.0.0.1 (node/shardbench.py): a seed
publishes it, two mirrors fetch it through the shard exchange, every stored shard matches its name,
every process is stopped by PID (exit code 0) in bounded time, and each node's CPU per MB moved is
reported."""

from __future__ import annotations

import json

import pytest

from node.shardbench import run_localhost

pytestmark = pytest.mark.slow


def test_a_version_reaches_every_mirror_and_mirrors_serve_each_other(tmp_path):
    result = run_localhost(2, 6, "swarm", tmp_path / "swarm", timeout=120)
    assert set(result["per_peer_s"]) == {"peer0", "peer1"}
    assert result["reach_all_s"] < 60
    assert json.loads((tmp_path / "swarm" / "exit-codes.json").read_text()) == [0, 0, 0]
    cpu = result["cpu_per_peer"]  # each node's CPU while the version spread, against the MB it moved
    assert set(cpu) == {"seed", "peer0", "peer1"} and all(row["cpu_s"] > 0 for row in cpu.values())
    assert cpu["seed"]["served_mb"] > 0 and cpu["seed"]["fetched_mb"] == 0
    assert all(cpu[p]["fetched_mb"] == 6.0 for p in ("peer0", "peer1"))
    assert result["cpu_s_per_mb_moved"] > 0
    for peer in ("peer0", "peer1"):
        assert len([f for f in (tmp_path / "swarm" / peer / "shards").iterdir() if not f.name.startswith(".")]) == 6
