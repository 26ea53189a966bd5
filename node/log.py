"""Node logs: readable lines by default, one JSON object per line with `--log-format json`."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


class EventLog:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None, quiet: frozenset[str] = frozenset()) -> None:
        if fmt not in ("text", "json"):
            raise ValueError("log format is 'text' or 'json'")
        self.fmt = fmt
        self.stream = stream or sys.stderr
        self.quiet = quiet  # event names not worth a line each (the counters in `status` keep them)

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


def _short(value: Any) -> str:
    text = str(value)
    if text.startswith("12D3KooW") and len(text) > 20:
        return text[:4] + ".." + text[-6:]  # peer ids: enough to tell apart
    return text if len(text) <= 120 else text[:117] + "..."
