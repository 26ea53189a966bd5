"""The gossip delivery invariant: every measured message reaches every live honest peer, and how fast.

The one check that also yields metrics (delivery ratio and latency), apart from the role invariants
because it follows messages, not roles.
"""

from __future__ import annotations

import math

from simulator.check_base import GLOBAL_TOPICS, JOIN_SETTLE, Check, CheckResult
from gossip.errors import KEPT
from swarm.stats import percentile


class Delivery(Check):
    """Gossip delivery to live honest peers, and latency, for messages honest peers publish.

    A receiver is live for a message if it is honest, its incarnation started JOIN_SETTLE s before
    the publish and it stays up until `grace` after it; the publisher must have been up that long
    too (a peer's first heartbeat is published before it has any connection, so it reaches nobody,
    in gossipsub as here). Messages on the global topics are measured
    (every subscribed peer must get them); status heartbeats are sampled by id in big swarms to bound
    memory. Messages published within `grace` of the end, while a partition is in force, or within
    JOIN_SETTLE of its heal are not measured (links across it were cut, and until the two sides have
    dialled each other again a message reaches only its own side, as a joining peer's first does); nor
    is a heartbeat an honest peer kept (took, but did not relay by rule: its signer neither vouched for
    nor shown to work on a task it names, swarm/evidence.py), whose reach is partial by design; those
    are counted (`kept`).
    """

    name = "delivery-complete"
    kinds = ("publish", "deliver", "reject", "partition", "heal")

    def __init__(self, peers, grace: float = 30.0, status_sample: int = 1):
        super().__init__(peers)
        self.grace = grace
        self.status_sample = max(1, status_sample)
        self.msgs: dict[str, list] = {}  # hex -> [t, publisher, topic, {peer: t}]
        self.partitions: list[list[float]] = []
        self.kept: set[str] = set()  # messages an honest peer took but did not relay

    def feed(self, t, peer, kind, f):
        if kind == "publish":
            topic = f["topic"]
            if topic in GLOBAL_TOPICS and self.peers.honest(peer) and f["m"] not in self.msgs:
                if topic == "swarm/1/status" and int(f["m"][:8], 16) % self.status_sample:
                    return
                self.msgs[f["m"]] = [t, peer, topic, {}]
        elif kind in ("deliver", "reject"):
            rec = self.msgs.get(f["m"])
            if rec is not None and peer not in rec[3]:
                rec[3][peer] = t
                if kind == "reject" and f.get("why") == KEPT and self.peers.honest(peer):
                    self.kept.add(f["m"])
        elif kind == "partition":
            self.partitions.append([t, math.inf])
        elif kind == "heal" and self.partitions:
            self.partitions[-1][1] = t

    def _measure(self, end: float) -> tuple[dict, list]:
        latencies: list[float] = []
        by_topic: dict[str, list[int]] = {}
        misses: list[dict] = []
        honest = [p for p in sorted(self.peers.ids) if self.peers.honest(p)]
        measured = 0
        for mid, (t0, publisher, topic, got) in sorted(self.msgs.items(), key=lambda kv: (kv[1][0], kv[0])):
            if t0 + self.grace > end or any(a - self.grace <= t0 <= b + JOIN_SETTLE for a, b in self.partitions) \
                    or mid in self.kept:
                continue
            if not self.peers.up_throughout(publisher, t0 - JOIN_SETTLE, t0):
                continue  # a peer's first heartbeat goes out before it has any link: nobody can get it
            counts = by_topic.setdefault(topic, [0, 0])
            measured += 1
            for p in honest:
                if p == publisher or not self.peers.up_throughout(p, t0 - JOIN_SETTLE, t0 + self.grace):
                    continue
                counts[1] += 1
                at = got.get(p)
                if at is not None and at - t0 <= self.grace:
                    counts[0] += 1
                    latencies.append(at - t0)
                elif len(misses) < 50:
                    misses.append({"m": mid, "topic": topic, "published": round(t0, 3), "peer": p})
        delivered = sum(c[0] for c in by_topic.values())
        expected = sum(c[1] for c in by_topic.values())
        metrics = {
            "messages": measured, "kept": len(self.kept), "expected": expected, "delivered": delivered,
            "ratio": (delivered / expected) if expected else None,
            "by_topic": {t: {"delivered": c[0], "expected": c[1], "ratio": round(c[0] / c[1], 6) if c[1] else None}
                         for t, c in sorted(by_topic.items())},
            "latency_ms": {q: (round(v * 1000, 3) if (v := percentile(latencies, q)) is not None else None)
                           for q in (50, 90, 99, 100)},
        }
        return metrics, misses

    def result(self, end, settle):
        metrics, misses = self._measure(end)
        ratio = metrics["ratio"]
        return CheckResult(ratio is not None and ratio >= 1.0,
                           f"{metrics['delivered']}/{metrics['expected']} deliveries to live honest peers", misses)

    def metrics(self, end: float) -> dict:
        return self._measure(end)[0]
