"""Atomic file writes: a crash leaves the old file or the new one, never half of either.

In trainer/ because it is the lowest layer that writes files: the job process (blobs, shards,
trainer state) and node/ (stores, keys, records) share this one. A crash mid-write leaves a temp
file (`.<name>.<random>.tmp`) beside the target: no reader looks at dot-names, and the stores delete
them (node/blobstore.py, node/shardstore.py). A file damaged anyway (a disk, a hand) is moved aside
by `discard` with a log line, never silently used or silently deleted.
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import time
from pathlib import Path

from trainer.crashpoints import torn_write

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})  # the disk refuses writes, not a bug


def write_atomic(path: Path, data: bytes, mode: int = 0o644, point: str = "file") -> None:
    """Write `data` to a temp file beside `path` (parents created), fsync, rename over `path`;
    on any error remove the temp file and re-raise. `point`: the crash point (trainer/crashpoints.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            torn_write(out, data, point)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def is_disk_error(exc: BaseException) -> bool:
    """A write refused by the disk (full, over quota, read-only) rather than by a bug."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def discard(path: Path, reason: str) -> Path | None:
    """Move a damaged state file aside (`<name>.damaged`, kept for the operator) and say so on
    stderr (the node's log); returns where it went, None if it could not be moved."""
    path = Path(path)
    aside = path.with_name(path.name + ".damaged")
    try:
        os.replace(path, aside)
    except OSError as exc:
        aside, reason = None, f"{reason}; could not move it aside: {exc}"
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} state-file-discarded path={path} reason={reason}" + (f" moved_to={aside}" if aside else ""),
          file=sys.stderr, flush=True)
    return aside
