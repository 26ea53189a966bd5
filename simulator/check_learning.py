"""learning-continues: a takeover does not send the policy back to where it started.

For every takeover (none: nothing to judge; the scenario that is about one asserts it happened), the mean rollout reward of the first `WINDOW` versions the new trainer publishes
is compared with that of the run's first `WINDOW` versions (the base policy's rollouts): it must be
higher by at least `MARGIN`. A standby that restarted from version 0, or from weights that lost what
was learned, would be back at the base level; one that continued the chain is above it. Rewards are
what the trainer's own steps report (the rollouts they trained on), so a step's noise is averaged
over `WINDOW` steps.
"""

from __future__ import annotations

from simulator.check_base import Check, CheckResult

WINDOW = 5
MARGIN = 0.02


class LearningContinues(Check):
    name = "learning-continues"
    kinds = ("emit.version-published", "emit.trainer-takeover")

    def __init__(self, peers):
        super().__init__(peers)
        self.first: dict[str, list[float]] = {}  # task -> rewards of its first versions
        self.after: list[tuple[float, int, str, list[float]]] = []  # (t, new trainer, task, its first rewards)

    def feed(self, t, peer, kind, f):
        task = f["task_id"]
        if kind == "emit.trainer-takeover":
            self.after.append((t, peer, task, []))
            return
        reward = f.get("reward")
        if not isinstance(reward, (int, float)):
            return
        first = self.first.setdefault(task, [])
        if len(first) < WINDOW:
            first.append(float(reward))
        for _, who, of, rewards in self.after:
            if who == peer and of == task and len(rewards) < WINDOW:
                rewards.append(float(reward))

    def result(self, end, settle):
        if not self.after:
            return CheckResult(True, "no takeover")
        bad, figures = [], []
        for t, peer, task, rewards in self.after:
            base = self.first.get(task, [])
            if len(rewards) < WINDOW or len(base) < WINDOW:
                bad.append({"t": round(t, 3), "peer": peer, "versions_after": len(rewards)})
                continue
            before, now = sum(base) / len(base), sum(rewards) / len(rewards)
            figures.append(f"{before:.3f} -> {now:.3f}")
            if now < before + MARGIN:
                bad.append({"t": round(t, 3), "peer": peer, "base_reward": round(before, 4),
                            "after_reward": round(now, 4)})
        detail = (f"{len(self.after)} takeovers; mean reward of the first {WINDOW} versions, run start -> "
                  f"after each takeover: {', '.join(figures) or 'none'}")
        return CheckResult(not bad, detail, bad)
