"""The version lines `swarm-node local` prints: version 0 being built, then one line per new version.

Why a class: the lines follow whichever trainer is active, and each trainer counts completions from
its own start (a standby that takes over begins at its first step's count). The total shown is
summed from each trainer's increments, so a takeover reads as the run going on, not as a reset.
"""

from __future__ import annotations

from typing import Callable


class VersionLines:
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.shown = -1  # newest version printed
        self.completions = 0  # completions trained so far, every trainer's together
        self._seen: dict[str, int] = {}  # trainer peer id -> the running count its last record had
        self._init_shown: tuple | None = None  # the version-0 progress last printed

    def update(self, snap: dict | None, task_id: str) -> None:
        """Print what is new in the trainer's status snapshot (`None`: it did not answer)."""
        if not snap:
            return
        work = (snap.get("work") or {}).get("trainer", {}).get(task_id)
        if self.shown < 0 and not (work and work.get("history")):
            self._show_init(snap)
        if not work:
            return
        peer = str(snap.get("peer_id"))
        for record in work.get("history", []):
            if record["version"] <= self.shown:
                continue
            count = int(record.get("completions", 0))
            self.completions += max(0, count - self._seen.get(peer, 0))
            self._seen[peer] = count
            extra = "  ".join(f"{k} {record[k]}" for k in ("reward", "loss", "heldout_greedy") if k in record)
            if record.get("resumed"):
                extra = "  ".join(x for x in (extra, "resumed from the data dirs") if x)
            self.say(f"version {record['version']:4d}  completions {self.completions:7d}  {extra}")
            self.shown = record["version"]

    def _show_init(self, snap: dict) -> None:
        """The trainer's init job (model, warm-up, held-out scoring, packing) while version 0 is built."""
        current = (snap.get("jobs") or {}).get("current") or {}
        if current.get("kind") != "init":
            return
        progress = current.get("progress") or {}
        key = (progress.get("stage"), int(current.get("seconds", 0)) // 15)  # a new stage at once, else every 15 s
        if key != self._init_shown:
            self._init_shown = key
            self.say(f"building version 0 ({current.get('seconds', 0):.0f} s): {init_progress_text(progress)}")


def init_progress_text(progress: dict) -> str:
    stage = progress.get("stage")
    if stage == "model":
        return f"creating the base model {progress.get('model', '')}".rstrip()
    if stage == "warmup":
        return f"warm-up step {progress.get('step')}/{progress.get('steps')} (loss {progress.get('loss')})"
    if stage == "heldout":
        return f"scoring {progress.get('prompts')} held-out prompts with the base model"
    if stage == "pack":
        return "packing and storing the version's shards"
    if stage == "resume":
        return f"resuming version {progress.get('version')}" if "version" in progress else str(progress.get("skipped"))
    return "starting the job process (loading torch)"
