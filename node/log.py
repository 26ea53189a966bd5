"""Node logs: readable lines by default, one JSON object per line with `--log-format json`.

Lines go to stderr. Where stderr is a file (`swarm-node local` gives each peer `node.log`; a service
manager may do the same), the log rotates itself: past `max_bytes` the file becomes `<name>.1` (the
older one dropped) and stderr is reopened on a new file, so a node that runs for weeks holds at most
two files. Tracebacks written to stderr follow it to the new file.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from typing import Any, TextIO


MAX_LOG_BYTES = 64 << 20
CHECK_EVERY = 256  # lines between size checks


class EventLog:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None, quiet: frozenset[str] = frozenset(),
                 max_bytes: int = MAX_LOG_BYTES) -> None:
        if fmt not in ("text", "json"):
            raise ValueError("log format is 'text' or 'json'")
        self.fmt = fmt
        self.stream = stream or sys.stderr
        self.quiet = quiet  # event names not worth a line each (the counters in `status` keep them)
        self.max_bytes = max_bytes
        self._lines = 0

    def __call__(self, event: str, **fields: Any) -> None:
        if event in self.quiet:
            return
        now = time.time()
        if self.fmt == "json":
            line = json.dumps({"ts": round(now, 3), "event": event, **fields}, default=str)
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
            parts = " ".join(f"{k}={_short(v)}" for k, v in fields.items())
            line = f"{stamp} {event} {parts}".rstrip()
        try:
            print(line, file=self.stream, flush=True)
        except (BrokenPipeError, ValueError):
            pass
        self._lines += 1
        if self._lines % CHECK_EVERY == 0:
            rotate_if_large(self.stream, self.max_bytes)


def rotate_if_large(stream: TextIO, max_bytes: int) -> bool:
    """Past `max_bytes`, move the regular file behind `stream`'s descriptor to `<path>.1` and reopen
    the descriptor on a fresh file at the path (dup2, so every writer of that fd follows). Only where
    the file's path can be read back (/proc) and still names it; False when nothing was done."""
    try:
        fd = stream.fileno()
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size <= max_bytes:
            return False
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.stat(path).st_ino != info.st_ino:  # moved or deleted under us: not ours to rotate
            return False
        os.replace(path, path + ".1")
        fresh = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fresh, fd)
        os.close(fresh)
        return True
    except (OSError, ValueError, AttributeError):  # no fd (a StringIO), no /proc, a race: keep writing
        return False


def _short(value: Any) -> str:
    text = str(value)
    if text.startswith("12D3KooW") and len(text) > 20:
        return text[:4] + ".." + text[-6:]  # peer ids: enough to tell apart
    return text if len(text) <= 120 else text[:117] + "..."
