"""Metrics over the trace that no check asserts on: version spread, how busy training was, bytes.

They describe a run (the `metrics` of a result) so tests and benchmarks can insist the invariants
were not vacuous; kept apart from the checks, which only say pass or fail.
"""

from __future__ import annotations

from collections import deque

from simulator.check_base import PeerTable
from swarm.stats import percentile

REWARD_WINDOW = 10  # steps averaged for the first and the latest mean rollout reward


class VersionSpread:
    """Time for each weight version to reach 95% of the honest peers that follow the weights (workers
    and validators) up at the moment it got there, from its first install."""

    kinds = ("emit.version-installed",)

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers
        self.first: dict[tuple[str, int], float] = {}
        self.holders: dict[tuple[str, int], set[int]] = {}
        self.reached: dict[tuple[str, int], float] = {}

    def feed(self, t, peer, kind, f):
        if not self.peers.honest(peer) or not self.peers.follows_weights(peer):
            return
        key = (f["task_id"], int(f["version"]))
        self.first.setdefault(key, t)
        self.holders.setdefault(key, set()).add(peer)
        if key not in self.reached:
            live = sum(1 for p in self.peers.up_since if self.peers.honest(p) and self.peers.follows_weights(p))
            if live and len(self.holders[key]) >= 0.95 * live:
                self.reached[key] = t - self.first[key]

    def metrics(self) -> dict:
        times = sorted(self.reached.values())
        return {"versions": len(self.first), "reached_95": len(times),
                "seconds_p50": percentile(times, 50), "seconds_max": times[-1] if times else None}


class Training:
    """How busy the roles were: versions published, installs, rollouts trained, verify outcomes."""

    kinds = ("emit.version-published", "emit.version-installed", "emit.rollout-trained", "emit.verdict",
             "emit.rollout-dropped", "emit.shard-rejected", "job-done")

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers
        self.newest = -1
        self.published = 0
        self.installs = 0
        self.trained = 0
        self.trained_forged = 0  # trained rollouts whose worker is an adversary (no-bad-training says why)
        self.verdicts: dict[str, int] = {}  # reason -> count
        self.dropped: dict[str, int] = {}
        self.shard_blame: dict[str, int] = {}
        self.jobs: dict[str, int] = {}  # kind -> finished ok
        self.jobs_failed: dict[str, int] = {}
        self.forged_jobs = 0
        # the mean rollout reward of the first and the latest REWARD_WINDOW steps, and version 0's held-out
        # greedy accuracy (real jobs measure it): does the policy get better?
        self.rewards_first: list[float] = []
        self.rewards_last: deque[float] = deque(maxlen=REWARD_WINDOW)
        self.base_accuracy: float | None = None

    def feed(self, t, peer, kind, f):
        if kind == "emit.version-published":
            self.published += 1
            self.newest = max(self.newest, int(f.get("version", -1)))
            reward = f.get("reward")
            if isinstance(reward, (int, float)):  # the mean reward of the rollouts a step trained on
                if len(self.rewards_first) < REWARD_WINDOW:
                    self.rewards_first.append(float(reward))
                self.rewards_last.append(float(reward))
            if f.get("version") == 0 and isinstance(f.get("heldout_greedy"), (int, float)):
                self.base_accuracy = float(f["heldout_greedy"])
        elif kind == "emit.version-installed":
            self.installs += 1
        elif kind == "emit.rollout-trained":
            self.trained += 1
            worker = self.peers.index.get(f.get("worker"))
            if worker is not None and self.peers.adversary.get(worker):
                self.trained_forged += 1
        elif kind == "emit.verdict":
            reason = "ok" if f.get("passed") else str(f.get("reason"))
            self.verdicts[reason] = self.verdicts.get(reason, 0) + 1
        elif kind == "emit.rollout-dropped":
            reason = str(f.get("reason"))[:40]
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
        elif kind == "emit.shard-rejected":
            reason = str(f.get("reason"))
            self.shard_blame[reason] = self.shard_blame.get(reason, 0) + 1
        else:
            table = self.jobs if f.get("ok") else self.jobs_failed
            table[f.get("kind")] = table.get(f.get("kind"), 0) + 1
            if f.get("honest") is False:
                self.forged_jobs += 1

    def metrics(self) -> dict:
        return {"newest_version": self.newest, "versions_published": self.published, "installs": self.installs,
                "rollouts_trained": self.trained, "rollouts_trained_from_adversaries": self.trained_forged,
                "verdicts": dict(sorted(self.verdicts.items())), "dropped": dict(sorted(self.dropped.items())),
                "shard_blame": dict(sorted(self.shard_blame.items())), "jobs": dict(sorted(self.jobs.items())),
                "jobs_failed": dict(sorted(self.jobs_failed.items())), "forged_jobs": self.forged_jobs,
                "reward_first": _mean(self.rewards_first), "reward_last": _mean(self.rewards_last),
                "base_heldout_greedy": self.base_accuracy}


def _mean(values) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


class Bytes:
    kinds = ("bytes",)

    def __init__(self, peers: PeerTable) -> None:
        self.peers = peers
        self.per_peer: dict[int, tuple[int, int]] = {}

    def feed(self, t, peer, kind, f):
        self.per_peer[peer] = (f["in"], f["out"])

    def metrics(self, duration: float) -> dict:
        totals = [a + b for a, b in self.per_peer.values()]
        return {"peers": len(totals), "total": sum(totals),
                "per_peer_mean": round(sum(totals) / len(totals)) if totals else None,
                "per_peer_p50": percentile(totals, 50), "per_peer_p99": percentile(totals, 99),
                "per_peer_max": max(totals) if totals else None,
                "per_peer_mean_Bps": round(sum(totals) / len(totals) / duration, 1) if totals else None}
