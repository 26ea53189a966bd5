"""node/shardbench.py's weight-spreading run with every peer in its own lab namespace (bench/weights.py
--netlab): the seed and the mirrors on `tc tbf` uplinks (and downlinks, when given), `natted` of the
mirrors each behind a NAT router of its own, so they can dial out but nobody can dial them, and the
NATed ones cannot reach each other.

    result = run_netlab(peers=8, natted=2, size_mb=50, up_mbps=10, workdir=Path("runs/netlab"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netlab.lab import Lab, Peer
from netlab.nodes import node_call, start_node
from node.shardbench import run_localhost


class LabLauncher:
    """Places `seed`, `peer0`, ... on the lab's peers of the same names (node.shardbench.Launcher)."""

    def __init__(self, lab: Lab, placed: dict[str, Peer]) -> None:
        self.lab, self.placed = lab, placed

    def start(self, name: str, args: list[str], log_path: Path) -> tuple[Any, str]:
        return start_node(self.lab, self.placed[name], args, log_path)

    def call(self, data_dir: Path, cmd: str, args: dict | None = None) -> Any:
        return node_call(self.lab, self.placed[Path(data_dir).name], data_dir, cmd, args)


def run_netlab(peers: int, natted: int, size_mb: float, up_mbps: float, workdir: Path, mode: str = "swarm",
               down_mbps: float | None = None, timeout: float = 900.0) -> dict:
    """One run in a fresh lab; run_localhost's result plus which peers were NATed and their figures."""
    if not 0 <= natted <= peers:
        raise ValueError("natted is between 0 and peers")
    with Lab() as lab:
        placed = {"seed": lab.add_peer("seed", up_mbps=up_mbps, down_mbps=down_mbps)}
        behind = {f"peer{i}" for i in range(peers - natted, peers)}  # the last `natted` mirrors
        for i in range(peers):
            name = f"peer{i}"
            if name in behind:
                lab.add_nat(f"nat{i}")
            placed[name] = lab.add_peer(name, up_mbps=up_mbps, down_mbps=down_mbps,
                                        nat=f"nat{i}" if name in behind else None)
        result = run_localhost(peers, size_mb, mode, workdir, timeout=timeout, launcher=LabLauncher(lab, placed))
    result.update({"link": "tc tbf in network namespaces", "up_mbps": up_mbps, "down_mbps": down_mbps,
                   "natted": sorted(behind), "single_transfer_bound_s": round(size_mb * 8 / up_mbps, 2)})
    result["ratio_to_bound"] = round(result["reach_all_s"] / result["single_transfer_bound_s"], 3)
    served = result.get("pieces_served_per_peer", {})
    result["pieces_served_by_natted"] = sum(served.get(name, 0) for name in behind)
    return result
