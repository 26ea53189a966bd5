"""A peer's durable record of what it did that matters later: versions, trained rollouts, bans,
trainer takeovers (when a standby took over, from which version; a trainer standing by or stepping down).

`swarm-node local` summaries and audits ("zero rollouts of a banned peer were trained on") read
this file, not the logs. JSON lines in `<data-dir>/records.jsonl`; rotated to `.1` past `max_bytes`
so it stays bounded. Appended, not written atomically: a crash can leave a torn last line, which
readers skip, and the next append starts on a fresh line so it is not lost with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from trainer.crashpoints import torn_write

RECORDED = frozenset({"version-published", "rollout-trained", "rollout-dropped", "version-installed",
                      "rollouts-committed", "peer-banned", "job-failed", "task-learned", "shards-complete",
                      "shard-rejected", "version-mirrored", "trainer-standby", "trainer-takeover",
                      "trainer-stepped-down", "checkpoint-published", "checkpoint-fetched", "checkpoint-dropped",
                      "verdict", "quorum-short", "quorum-timeout", "check-refused", "task-refused", "stalled"})
FILE = "records.jsonl"


class Records:
    def __init__(self, data_dir: Path, max_bytes: int = 64 << 20) -> None:
        self.path = Path(data_dir) / FILE
        self.max_bytes = max_bytes
        self._torn = _ends_torn(self.path)  # a crash cut the last line: end it before the first append

    def append(self, now: float, event: str, fields: Any) -> None:
        if event not in RECORDED:
            return
        line = json.dumps({"ts": round(now, 3), "event": event, **dict(fields)}, default=str) + "\n"
        try:
            if self.path.exists() and self.path.stat().st_size > self.max_bytes:
                os.replace(self.path, self.path.with_suffix(".jsonl.1"))
            with open(self.path, "a") as out:
                if self._torn:
                    out.write("\n")
                    self._torn = False
                torn_write(out, line, "records")
        except OSError:  # records are for reading back later; never let a full disk stop the peer
            self._torn = _ends_torn(self.path)  # a line cut short by the full disk is ended first next time


def _ends_torn(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:  # missing or empty
        return False


def read_records(data_dir: Path, event: str | None = None) -> Iterator[dict]:
    path = Path(data_dir) / FILE
    for candidate in (path.with_suffix(".jsonl.1"), path):
        try:
            with open(candidate) as lines:
                for line in lines:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a torn last line after a crash
                    if event is None or record.get("event") == event:
                        yield record
        except FileNotFoundError:
            continue
