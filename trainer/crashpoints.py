"""Fault injection for the crash tests: `SWARM_CRASH_AT=<point>[:<nth>]` kills this process with
SIGKILL the nth time (default: the first) it reaches `<point>`, leaving whatever it was writing
half-written, as a power cut or an OOM kill would.

Read once from the environment when this module is imported (the node and its job process both
import it), so an unset variable costs one `is None` test per point; nothing on the network can
arm it. A job process armed this way takes its node with it (`take_along`): a machine's crash
kills both, and the test restarts the node on the same data dir. The points (docs/operating.md,
"Crash safety") name what was being written:

    blob, shard               a blob or weight shard, half its bytes in the temp file (trainer/blobdir.py,
                              node/blobstore.py, node/shardstore.py)
    version-pack              between the shards of a version being packed (trainer/versions.py)
    checkpoint-pack           between the shards of a trainer checkpoint (trainer/checkpoint.py)
    trainer-json, optimizer, optimizer-json, master-weights
                              the trainer's state files, half written (trainer/trainstate.py, versions.py)
    records                   half a line of records.jsonl appended (node/records.py)
    identity-key, peers-json, control-json, generated, task-record
                              the node's other state files, half written
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "SWARM_CRASH_AT"
POINTS = frozenset({"blob", "shard", "version-pack", "checkpoint-pack", "trainer-json", "optimizer",
                    "optimizer-json", "master-weights", "records", "identity-key", "peers-json", "control-json",
                    "generated", "task-record"})

_plan: tuple[str, int] | None = None  # (point, nth)
_hits = 0
_take_along: int | None = None  # a pid killed first (the job process's node)


def arm(spec: str | None) -> None:
    """Arm `point[:nth]` (None or "" disarms); ValueError for a point that does not exist."""
    global _plan, _hits
    _hits = 0
    if not spec:
        _plan = None
        return
    point, _, nth = spec.partition(":")
    if point not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: no crash point {point!r} (points: {', '.join(sorted(POINTS))})")
    if nth and (not nth.isdigit() or int(nth) < 1):
        raise ValueError(f"{ENV}={spec!r}: nth must be a positive integer")
    _plan = (point, int(nth or 1))


def armed() -> bool:
    return _plan is not None


def take_along(pid: int) -> None:
    """A crash in this process kills `pid` too (the job process's node)."""
    global _take_along
    _take_along = pid


def crash_point(name: str) -> None:
    """Die here if `name` is the armed point and this is its nth hit."""
    if _plan is None:
        return
    _reached(name)


def torn_write(out, data, name: str) -> None:
    """`out.write(data)`; at the armed point, only the first half is written (and flushed) before dying."""
    if _plan is None or _plan[0] != name:
        out.write(data)
        return
    half = len(data) // 2
    out.write(data[:half])
    out.flush()
    _reached(name)
    out.write(data[half:])


def _reached(name: str) -> None:
    global _hits
    if _plan[0] != name:
        return
    _hits += 1
    if _hits != _plan[1]:
        return
    print(f"crash-point point={name} hit={_hits} pid={os.getpid()}: killing this process", file=sys.stderr,
          flush=True)
    if _take_along is not None:
        try:
            os.kill(_take_along, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


arm(os.environ.get(ENV))
