"""Whether the data dir can take writes: free space and write errors, for status, logs and the driver.

A full or read-only disk must not crash a node or leave it half-working without a word. The watch
checks the free space every `CHECK_EVERY` seconds (statvfs: cheap) and hears of every write the
node's disk refused (`refused`); below `min_free` bytes, or after such an error, it is `full` (or
`read-only`), and the node takes no work that writes (the driver answers jobs with a `disk full`
error at once, so roles retry later, and stores no fetched blobs or shards) while still serving
what it holds. It is `ok` again once the space is back and a probe write succeeds.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from trainer.fsutil import write_atomic

CHECK_EVERY = 2.0  # seconds
PROBE = ".disk-probe"
OK, FULL, READ_ONLY = "ok", "full", "read-only"


class DiskWatch:
    def __init__(self, data_dir: Path, min_free: int) -> None:
        self.data_dir = Path(data_dir)
        self.min_free = min_free
        self.state = OK
        self.reason = ""
        self.free: int | None = None
        self.refused_writes = 0

    @property
    def ok(self) -> bool:
        return self.state == OK

    def refused(self, exc: OSError) -> str | None:
        """A write the disk refused; the new state if it changed (the caller logs it)."""
        self.refused_writes += 1
        state = READ_ONLY if exc.errno == errno.EROFS else FULL
        return self._set(state, f"a write failed: {exc.strerror or exc}")

    def check(self) -> str | None:
        """Look at the disk again; the new state if it changed."""
        try:
            self.free = shutil.disk_usage(self.data_dir).free
        except OSError as exc:
            return self._set(FULL, f"cannot stat the data dir: {exc.strerror or exc}")
        if self.free < self.min_free:
            return self._set(FULL, f"{self.free >> 20} MiB free, below the {self.min_free >> 20} MiB minimum")
        if self.state == OK:
            return None
        try:  # the space is back; so is writing?
            write_atomic(self.data_dir / PROBE, b"probe", point="file")
            os.unlink(self.data_dir / PROBE)
        except OSError as exc:
            return self._set(READ_ONLY if exc.errno == errno.EROFS else FULL,
                             f"a probe write failed: {exc.strerror or exc}")
        return self._set(OK, "")

    def _set(self, state: str, reason: str) -> str | None:
        changed = state != self.state
        self.state, self.reason = state, reason
        return state if changed else None

    def snapshot(self) -> dict:
        return {"state": self.state, "reason": self.reason, "free_bytes": self.free, "min_free_bytes": self.min_free,
                "refused_writes": self.refused_writes}
