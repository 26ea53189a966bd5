"""Which prompt slices this worker has generated, kept on disk so a restarted worker skips them.

A worker commits to batch b of version v (slice b of its hash-assigned prompts); two signed
commitments for one slice are the proof of a replay (swarm/commitments.py), which gets the signer
banned. The worker's batch counter lives in the core's memory, so a crash-restarted worker would
start at slice 0 again and be banned for re-committing it (seen in the simulator's `churn`
scenario). The generate job therefore records each slice it finishes, before answering (the core
commits only after the answer), and answers a slice it finds recorded as `repeated`, without
generating: no slice is ever committed twice. A crash between the record and the commitment (the
milliseconds the answer takes to reach the core) loses that one batch: other workers' batches make up
the step, except where every worker may make one batch per version (`max_batches_per_version = 1`) and
the step needs them all, which waits for a worker to join. The simulator records a slice at the same
point, when its job finishes (docs/simulator.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainer.fsutil import discard, write_atomic

FILE = "generated.json"
KEEP_VERSIONS = 64  # versions far outside any async window are forgotten; the file stays small


def _key(worker_key: bytes, indices) -> str:
    text = f"{bytes(worker_key).hex()}:{[int(i) for i in indices]}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _load(path: Path) -> dict[int, set[str]]:
    try:
        return {int(v): set(keys) for v, keys in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError, TypeError) as exc:  # damaged (writes are atomic: not by a crash)
        discard(path, f"unreadable ({exc}); slices generated before it was damaged are not known any more")
        return {}


def seen(state_path: Path, worker_key: bytes, version: int, indices) -> bool:
    """Did this job process generate (worker, version, slice) before?"""
    return _key(worker_key, indices) in _load(Path(state_path) / FILE).get(int(version), ())


def record(state_path: Path, worker_key: bytes, version: int, indices) -> None:
    path = Path(state_path) / FILE
    done = _load(path)
    done.setdefault(int(version), set()).add(_key(worker_key, indices))
    newest = max(done)
    kept = {str(v): sorted(keys) for v, keys in sorted(done.items()) if v > newest - KEEP_VERSIONS}
    write_atomic(path, json.dumps(kept).encode(), point="generated")
