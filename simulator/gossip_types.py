"""The gossip model's values: its parameters, one message in flight, the message id and wire sizes.

Split from simulator/gossip_model.py so the router's parts (mesh, eager push, lazy gossip) share them
without importing the router.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

PHASES = 10
IHAVE_ID_BYTES = 34  # one message id in an IHAVE/IWANT control entry
CONTROL_BYTES = 40  # a GRAFT or PRUNE entry (topic, backoff)


@dataclass(frozen=True)
class GossipConfig:
    D: int = 6
    Dlo: int = 4
    Dhi: int = 12
    Dlazy: int = 6
    gossip_factor: float = 0.25
    heartbeat: float = 1.0
    history_length: int = 5
    history_gossip: int = 3
    seen_ttl: float = 120.0
    fanout_ttl: float = 60.0
    prune_backoff: float = 60.0
    flood_publish: bool = True
    max_ihave_length: int = 5000


class Msg:
    """One distinct message (by id) while any seen-cache may still hold it."""

    __slots__ = ("mid", "hex", "topic", "data", "size", "origin", "t0", "seen", "best")

    def __init__(self, mid: bytes, topic: str, data: bytes, origin: int, t0: float) -> None:
        self.mid, self.hex, self.topic, self.data = mid, mid[:10].hex(), topic, data
        self.size = len(data)
        self.origin, self.t0 = origin, t0
        self.seen: set[int] = set()
        self.best: dict[int, float] = {}  # peer -> earliest arrival among copies in flight


def message_id(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=20).digest()

