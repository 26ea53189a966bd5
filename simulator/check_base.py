"""The checkers' common ground: who each peer is and when it was up, and the shape of a check.

Split from simulator/checkers.py so that each family of checks (role invariants, gossip delivery,
metrics) sits in its own file over one shared `PeerTable`, the only view of the run a check gets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GLOBAL_TOPICS = ("swarm/1/status", "swarm/1/tasks", "swarm/1/probe")
JOIN_SETTLE = 10.0  # a peer counts as live for delivery once its incarnation is this old


@dataclass
class CheckResult:
    ok: bool
    detail: str = ""
    violations: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "detail": self.detail, "violations": self.violations[:10]}


class PeerTable:
    """Who each peer index is (id, adversary kind) and when each incarnation was up."""

    kinds = ("peer", "start", "leave", "crash")

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}
        self.index: dict[str, int] = {}
        self.adversary: dict[int, str] = {}
        self.detectable: dict[int, bool] = {}
        self.roles: dict[int, tuple[str, ...]] = {}
        self.up_since: dict[int, float] = {}  # current incarnation start, for peers up now
        self.incarnation: dict[int, int] = {}
        self.intervals: dict[int, list[list[float]]] = {}  # [start, end or inf]

    def feed(self, t: float, peer: int, kind: str, f: dict) -> None:
        if kind == "peer":
            self.ids[peer] = f["id"]
            self.index[f["id"]] = peer
            self.adversary[peer] = f.get("adversary", "")
            self.detectable[peer] = bool(f.get("detectable", False))
            self.roles[peer] = tuple(f.get("roles", ()))
        elif kind == "start":
            self.up_since[peer] = t
            self.incarnation[peer] = f.get("incarnation", 1)
            self.intervals.setdefault(peer, []).append([t, math.inf])
        else:
            self.up_since.pop(peer, None)
            if self.intervals.get(peer):
                self.intervals[peer][-1][1] = t

    def honest(self, peer: int) -> bool:
        return peer in self.ids and not self.adversary.get(peer)

    def follows_weights(self, peer: int) -> bool:
        """Workers and validators install every version (trainers make them; relays hold none)."""
        return bool({"worker", "validator"} & set(self.roles.get(peer, ())))

    def up_throughout(self, peer: int, a: float, b: float) -> bool:
        for start, end in self.intervals.get(peer, ()):
            if start <= a and end >= b:
                return True
        return False


class Check:
    name = ""
    kinds: tuple[str, ...] = ()

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers

    def feed(self, t: float, peer: int, kind: str, f: dict) -> None:
        raise NotImplementedError

    def result(self, end: float, settle: float) -> CheckResult:
        raise NotImplementedError
