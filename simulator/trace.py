"""The run's record: one canonical line per event, hashed into `trace_hash`, optionally written as JSONL.

The hash is computed over canonical lines (time in microseconds, peer index, kind, then fields as
sorted compact JSON), whether or not a file is written, so `--trace` never changes the hash. Lines
are hashed in batches (blake2b is fast in C; building the lines is the cost). Observers (checkers,
metrics) subscribe to record kinds and see each record as it is made: they are fed the same data the
file holds, and can equally be fed from a file afterwards (`checkers.read_trace`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable, TextIO

_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode


def canonical_fields(fields: dict) -> str:
    return _dumps(fields)


class Trace:
    """Records are (t, peer, kind, fields): t in simulated seconds, peer an index or -1 for the world."""

    def __init__(self, path: str | None = None, batch: int = 4096) -> None:
        self._hasher = hashlib.blake2b(digest_size=32)
        self._buf: list[str] = []
        self._batch = batch
        self._file: TextIO | None = open(path, "w", encoding="utf-8") if path else None
        self._observers: dict[str, list[Callable]] = {}
        self.lines = 0

    def observe(self, kind: str, fn: Callable[[float, int, str, dict], None]) -> None:
        self._observers.setdefault(kind, []).append(fn)

    def record(self, t: float, peer: int, kind: str, fields: dict) -> None:
        self.record_raw(t, peer, kind, _dumps(fields), fields)

    def record_raw(self, t: float, peer: int, kind: str, body: str, fields: dict | None) -> None:
        """`body` must be the canonical JSON of `fields`; `fields` may be None if nobody observes `kind`."""
        self._buf.append(f"{round(t * 1e6)} {peer} {kind} {body}\n")
        self.lines += 1
        if len(self._buf) >= self._batch:
            self._flush()
        observers = self._observers.get(kind)
        if observers:
            if fields is None:
                fields = json.loads(body)
            for fn in observers:
                fn(t, peer, kind, fields)

    def line(self, t: float, peer: int, kind: str, body: str) -> None:
        """`record_raw` for a kind nobody observes (the caller checked `observed`): the same line, hashed
        and written alike, without the observer lookup. The hot records (deliver, peer-alive) come here."""
        buf = self._buf
        buf.append(f"{round(t * 1e6)} {peer} {kind} {body}\n")
        self.lines += 1
        if len(buf) >= self._batch:
            self._flush()

    def observed(self, kind: str) -> bool:
        return kind in self._observers

    def _flush(self) -> None:
        chunk = "".join(self._buf)
        self._buf.clear()
        self._hasher.update(chunk.encode())
        if self._file is not None:
            for line in chunk.splitlines():
                us, peer, kind, body = line.split(" ", 3)
                self._file.write(f'{{"t":{int(us) / 1e6:.6f},"peer":{peer},"ev":"{kind}","f":{body}}}\n')

    def hexdigest(self) -> str:
        self._flush()
        return self._hasher.hexdigest()

    def close(self) -> None:
        self._flush()
        if self._file is not None:
            self._file.close()
            self._file = None
