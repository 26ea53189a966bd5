"""A weight version spreading through the lab (netlab/shardbench.py, the path of bench/weights.py
--netlab): a public seed and three mirrors on 20 Mbit/s tbf uplinks, one mirror behind NAT. Every
peer ends with every shard (run_localhost checks each stored shard against its hash), and the NATed
mirror serves pieces to others over the links it dialled out."""

from __future__ import annotations

import pytest

from netlab.shardbench import run_netlab
from tests.netlab.conftest import nat_or_skip

pytestmark = pytest.mark.slow


def test_natted_mirror_fetches_and_serves_pieces(lab_unavailable, tmp_path):
    if lab_unavailable:
        pytest.skip(lab_unavailable)
    with nat_or_skip():
        result = run_netlab(peers=3, natted=1, size_mb=4, up_mbps=20, workdir=tmp_path / "run", timeout=120)
    assert result["natted"] == ["peer2"]
    assert set(result["per_peer_s"]) == {"peer0", "peer1", "peer2"}
    assert result["pieces_served_by_natted"] > 0, result["pieces_served_per_peer"]
