"""Trainer-chain invariants (swarm/forkchoice.py): after a healed partition every live honest peer
follows one chain, and no trainer trains on rollouts of a version outside its own chain.

* one-chain: for each heal, every honest peer up from the heal to `heal + bound` has, at that time,
  the same head chain (term, rank) for each task (a trainer's head is its own chain once it takes
  over or publishes). The bound is the task's `takeover_after` (three
  re-announcement periods by default): the winner re-announces within one period, and one gossip
  round later every peer that hears it has switched. The figure reported is how long after the heal
  the last of them switched.
* trained-on-own-chain: every "rollout-trained" names a (version, term) that its trainer published or
  installed on the chain it was on then (reset when it starts, switches chains or steps down).
"""

from __future__ import annotations

from simulator.check_base import Check, CheckResult

DEFAULT_BOUND = 30.0  # takeover_after of a task whose trainers said nothing


class OneChain(Check):
    name = "one-chain"
    kinds = ("emit.chain-switched", "emit.trainer-takeover", "emit.version-published", "emit.trainer-starting",
             "emit.trainer-standby", "heal", "start")

    def __init__(self, peers):
        super().__init__(peers)
        self.switches: dict[tuple[int, str], list[tuple[float, tuple[int, int]]]] = {}  # (peer, task) -> [(t, head)]
        self.bound: dict[str, float] = {}
        self.heals: list[float] = []
        self.starts: dict[int, float] = {}
        self.keys_of: dict[int, list] = {}  # peer -> its keys of `switches`, in insertion order

    def feed(self, t, peer, kind, f):
        if kind == "heal":
            self.heals.append(t)
        elif kind == "start":
            self.starts[peer] = t
            for key in self.keys_of.get(peer, ()):
                self.switches[key].append((t, None))  # a new incarnation knows no head yet
        elif kind in ("emit.chain-switched", "emit.trainer-takeover", "emit.version-published"):
            # a trainer's own chain is its head: it hears no manifest of its own
            key = (peer, f["task_id"])
            if key not in self.switches:
                self.keys_of.setdefault(peer, []).append(key)
            seen, head = self.switches.setdefault(key, []), (int(f.get("term", 0)), int(f.get("rank", 0)))
            if not seen or seen[-1][1] != head:
                seen.append((t, head))
        else:
            self.bound[f["task_id"]] = float(f.get("takeover_after", DEFAULT_BOUND))

    def _head_at(self, key, at):
        head, since = None, None
        for t, h in self.switches.get(key, ()):
            if t > at:
                break
            head, since = h, t
        return head, since

    def result(self, end, settle):
        bad, figures = [], []
        for heal in self.heals:
            for task in sorted(self.bound):
                at = heal + self.bound[task]
                if at > end:
                    continue
                heads, last = {}, heal
                for (peer, t_id) in sorted(self.switches):
                    if t_id != task or not self.peers.honest(peer) or not self.peers.up_throughout(peer, heal, at):
                        continue
                    head, since = self._head_at((peer, task), at)
                    if head is not None:
                        heads.setdefault(head, []).append(peer)
                        last = max(last, since)
                if len(heads) > 1:
                    bad.append({"heal": round(heal, 3), "task": task, "at": round(at, 3),
                                "heads": {f"{k[0]}/{k[1]}": len(v) for k, v in sorted(heads.items())}})
                else:
                    figures.append(round(last - heal, 3))
        return CheckResult(not bad, f"{len(self.heals)} heals; one chain {figures} s after each; "
                                    f"{len(bad)} still forked at the bound", bad)


class TrainedOnOwnChain(Check):
    name = "trained-on-own-chain"
    kinds = ("emit.rollout-trained", "emit.version-published", "emit.version-installed", "emit.chain-followed",
             "emit.trainer-stepped-down", "start")

    def __init__(self, peers):
        super().__init__(peers)
        self.chain: dict[tuple[int, str], set[tuple[int, int]]] = {}
        self.bad: list[dict] = []
        self.trained = 0

    def feed(self, t, peer, kind, f):
        if kind == "start":
            for key in [k for k in self.chain if k[0] == peer]:
                del self.chain[key]
            return
        key = (peer, f["task_id"])
        if kind in ("emit.chain-followed", "emit.trainer-stepped-down"):
            self.chain.pop(key, None)
        elif kind in ("emit.version-published", "emit.version-installed"):
            self.chain.setdefault(key, set()).add((int(f["version"]), int(f.get("term", 0))))
        elif "policy_version" in f:
            self.trained += 1
            named = (int(f["policy_version"]), int(f.get("policy_term", 0)))
            if named not in self.chain.get(key, ()):
                self.bad.append({"t": round(t, 3), "trainer": peer, "version": named[0], "term": named[1]})

    def result(self, end, settle):
        return CheckResult(not self.bad, f"{self.trained} rollouts trained, {len(self.bad)} from another chain",
                           self.bad)


class TrainerState:
    """Trainer checkpoints (swarm/roles/trainerstate.py): what they cost on the wire against the weights,
    and what each takeover continued from."""

    kinds = ("emit.checkpoint-published", "emit.shards-complete", "emit.version-published", "emit.trainer-takeover")

    def __init__(self, peers) -> None:
        self.peers = peers
        self.published = self.published_bytes = self.raw_bytes = self.versions = 0
        self.fetched_bytes = self.weights_bytes = 0
        self.takeovers: list[dict] = []
        self.restored: dict[str, int] = {}

    def feed(self, t, peer, kind, f):
        if kind == "emit.checkpoint-published":
            self.published += 1
            self.published_bytes += int(f.get("bytes", 0))
            self.raw_bytes += int(f.get("raw_bytes", 0))
        elif kind == "emit.shards-complete":
            if f.get("state"):
                self.fetched_bytes += int(f.get("bytes_in", 0))
            else:
                self.weights_bytes += int(f.get("bytes_in", 0))
        elif kind == "emit.version-published":
            self.versions += 1
            if "state_restored" in f:
                key = {2: "exact", 1: "moments", -1: "unreadable"}.get(int(f["state_restored"]), "other")
                self.restored[key] = self.restored.get(key, 0) + 1
        else:
            self.takeovers.append({"t": round(t, 3), "from_version": f.get("from_version"),
                                   "state_version": f.get("state_version")})

    def metrics(self) -> dict:
        per_version = self.published_bytes / self.versions if self.versions else None
        return {"checkpoints": self.published, "bytes_per_checkpoint": (round(self.published_bytes / self.published)
                                                                        if self.published else None),
                "compression": round(self.published_bytes / self.raw_bytes, 4) if self.raw_bytes else None,
                "bytes_per_version": round(per_version) if per_version is not None else None,
                "fetched_bytes": self.fetched_bytes, "weights_bytes": self.weights_bytes,
                "wire_fraction_of_weights": (round(self.fetched_bytes / self.weights_bytes, 4)
                                             if self.weights_bytes else None),
                "takeovers": self.takeovers, "restored": dict(sorted(self.restored.items()))}
