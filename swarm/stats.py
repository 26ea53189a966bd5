"""Counters an operator reads: messages per topic, rejections by reason, delivery latency."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter, deque


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]): the smallest value with at least q% of the values at
    or below it; None for no data. The one copy: node/, simulator/ and bench/ use it too."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


# Upper bounds (seconds) of the latency histograms operators scrape (node/metrics.py).
DELIVERY_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
REQUEST_BOUNDS = DELIVERY_BOUNDS + (60.0,)  # requests time out at most after a minute
JOB_BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)  # a model load to a train step


class Buckets:
    """A cumulative histogram: counts per upper bound plus sum and count, as Prometheus histograms are.
    Fixed size whatever is observed, and plain data so a snapshot can carry it (no client library here)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)  # non-cumulative per bucket; +Inf is `count`
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        value = value if value > 0.0 else 0.0
        self.count += 1
        self.sum += value
        i = bisect_left(self.bounds, value)  # the first bound >= value (every gossip delivery comes here)
        if i < len(self.counts):
            self.counts[i] += 1

    def snapshot(self) -> dict:
        """{"buckets": [[bound, cumulative count], ...], "sum": s, "count": n}."""
        running, out = 0, []
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append([bound, running])
        return {"buckets": out, "sum": round(self.sum, 6), "count": self.count}


class GossipStats:
    def __init__(self, latency_samples: int = 4096) -> None:
        self.accepted: Counter = Counter()  # by topic
        self.rejected: Counter = Counter()  # by topic
        self.bytes_in: Counter = Counter()  # by topic
        self.published: Counter = Counter()  # by topic
        self.bytes_out: Counter = Counter()  # by topic
        self.delivered_by_kind: Counter = Counter()
        self._latency: dict[str, deque[float]] = {}
        self._latency_samples = latency_samples
        self._latency_hist: dict[str, Buckets] = {}  # by kind: the few kinds the core measures

    def on_received(self, topic: str, size: int, accepted: bool) -> None:
        (self.accepted if accepted else self.rejected)[topic] += 1
        self.bytes_in[topic] += size

    def on_published(self, topic: str, size: int) -> None:
        self.published[topic] += 1
        self.bytes_out[topic] += size

    def on_delivered(self, kind: str, latency: float | None) -> None:
        self.delivered_by_kind[kind] += 1
        if latency is not None:
            samples = self._latency.get(kind)
            if samples is None:
                samples = self._latency[kind] = deque(maxlen=self._latency_samples)
            samples.append(latency if latency > 0.0 else 0.0)
            hist = self._latency_hist.get(kind)
            if hist is None:
                hist = self._latency_hist[kind] = Buckets(DELIVERY_BOUNDS)
            hist.observe(latency)

    def latency_samples(self) -> dict[str, list[float]]:
        return {kind: list(values) for kind, values in sorted(self._latency.items())}

    def latency_summary(self) -> dict[str, dict]:
        out = {}
        for kind in sorted(self._latency):
            values = list(self._latency[kind])
            out[kind] = {"n": len(values),
                         "p50_ms": round(percentile(values, 50) * 1000, 3),
                         "p99_ms": round(percentile(values, 99) * 1000, 3)}
        return out

    def snapshot(self) -> dict:
        topics = sorted(set(self.accepted) | set(self.rejected) | set(self.published))
        return {
            "topics": {t: {"accepted": self.accepted[t], "rejected": self.rejected[t], "bytes_in": self.bytes_in[t],
                           "published": self.published[t], "bytes_out": self.bytes_out[t]} for t in topics},
            "delivered": dict(sorted(self.delivered_by_kind.items())),
            "latency": self.latency_summary(),
            "latency_histogram": {kind: h.snapshot() for kind, h in sorted(self._latency_hist.items())},
        }
