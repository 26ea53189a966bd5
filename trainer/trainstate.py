"""The trainer's durable state per task: optimizer moments tied to the version they belong to.

Layout of `state_dir/<task>/`:
    trainer.json                     {"version", "weights" (hex), "term"}: the last version trained and
                                     the term it was signed in, written just before it is published
    trainer.backup.json              the same record, written right after it: what a damaged
                                     trainer.json is replaced by (losing it could make the trainer sign
                                     a version number twice, which peers punish as equivocation)
    optimizer-<hash16>.safetensors   Adam state tensors ("state.<param>.<name>"), param groups in metadata
    optimizer.json                   {"version", "weights", "optimizer" (file name), "optimizer_hash"}
Every file is written atomically. `trainer.json` is written before a version is published (`save_version`);
the moments may be written a moment later (`save`: the job process does it after answering, off the
trainer's critical path), optimizer file first and `optimizer.json` last, so a crash at any point leaves
either the previous consistent pair or the new one. Optimizer state is only loaded for the exact
(version, weights) it was saved with: moments of another version would be wrong, not stale, so a crash
between publishing a version and saving its moments costs the resumed trainer its moments, never its
version. A file damaged anyway (a disk, a hand) is moved aside (`<name>.damaged`, trainer/fsutil.py
`discard`) with a log line: a damaged trainer.json gives way to its backup, damaged moments to fresh
ones. Safetensors rather than torch.save: loading never unpickles anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import torch

from gossip.hashing import blake2b256
from trainer.fsutil import discard, write_atomic

STATE_FILE = "trainer.json"
BACKUP_FILE = "trainer.backup.json"
OPTIMIZER_FILE = "optimizer.json"


class StateError(RuntimeError):
    """The saved trainer state is unreadable; the message says which file to remove."""


def safe_name(task_id: str) -> str:
    """A directory name for a task id: the id itself when harmless, else its hash."""
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}", task_id):
        return task_id
    return "task-" + hashlib.blake2b(task_id.encode(), digest_size=16).hexdigest()


def save_version(directory: Path, version: int, weights: bytes, term: int = 0) -> None:
    """Record the version about to be published (what a restarted trainer resumes from) and its term
    (a trainer must never sign a lower term than it signed before: swarm/forkchoice.py), then its backup."""
    data = json.dumps({"version": version, "weights": bytes(weights).hex(), "term": int(term)}).encode()
    write_atomic(Path(directory) / STATE_FILE, data, point="trainer-json")
    write_atomic(Path(directory) / BACKUP_FILE, data, point="trainer-json")


def save(directory: Path, optimizer: torch.optim.Optimizer, version: int, weights: bytes) -> None:
    from safetensors.torch import save as st_save

    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, entries in sd["state"].items():
        for name, value in entries.items():
            if torch.is_tensor(value):
                tensors[f"state.{pid}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{name}"] = value
    meta = {"param_groups": json.dumps(sd["param_groups"]), "scalars": json.dumps(scalars)}
    data = st_save(tensors, metadata=meta)
    digest = blake2b256(data).hex()
    name = f"optimizer-{digest[:16]}.safetensors"
    directory = Path(directory)
    write_atomic(directory / name, data, point="optimizer")
    record = {"version": version, "weights": bytes(weights).hex(), "optimizer": name, "optimizer_hash": digest}
    write_atomic(directory / OPTIMIZER_FILE, json.dumps(record).encode(), point="optimizer-json")
    for old in directory.glob("optimizer-*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def saved(directory: Path) -> dict | None:
    """The last published version's record ({"version", "weights", "term"}), or None. A damaged
    trainer.json is discarded for its backup; with both damaged the trainer starts at version 0."""
    directory = Path(directory)
    try:
        return _record(directory / STATE_FILE, STATE_KEYS)
    except StateError as exc:
        discard(directory / STATE_FILE, str(exc))
    try:
        record = _record(directory / BACKUP_FILE, STATE_KEYS)
    except StateError as exc:
        discard(directory / BACKUP_FILE, f"{exc}; the trainer starts this task again from version 0")
        return None
    if record is None:
        print(f"state-file-missing path={directory / BACKUP_FILE}: the trainer starts this task again from version 0",
              file=sys.stderr, flush=True)
    return record


STATE_KEYS = {"version": int, "weights": str}
OPTIMIZER_KEYS = {"version": int, "weights": str, "optimizer": str, "optimizer_hash": str}


def _record(path: Path, keys: dict[str, type]) -> dict | None:
    """The JSON record at `path`, None if there is none; StateError if it is damaged."""
    try:
        record = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateError(f"{path} is unreadable ({exc})") from None
    if not isinstance(record, dict) or any(not isinstance(record.get(k), t) for k, t in keys.items()):
        raise StateError(f"{path} is not a trainer state file (fields {sorted(keys)} expected)")
    if not re.fullmatch(r"[0-9a-f]{64}", record["weights"]):
        raise StateError(f"{path} names no weights hash")
    return record


def load_if_matching(directory: Path, optimizer: torch.optim.Optimizer, version: int, weights: bytes) -> bool:
    """Load the saved optimizer state into `optimizer` if it was saved for exactly this version and
    weights; returns whether it did."""
    from safetensors.torch import load as st_load

    directory = Path(directory)
    try:
        record = _record(directory / OPTIMIZER_FILE, OPTIMIZER_KEYS)
    except StateError as exc:
        discard(directory / OPTIMIZER_FILE, f"{exc}; the trainer goes on with fresh optimizer moments")
        return False
    if record is None or record["version"] != version or record["weights"] != bytes(weights).hex():
        return False
    path = directory / Path(record["optimizer"]).name
    try:
        data = path.read_bytes()
        if blake2b256(data).hex() != record["optimizer_hash"]:
            raise StateError(f"{path} is corrupt (hash mismatch)")
        tensors = st_load(data)
        meta = _metadata(data)
        groups = json.loads(meta["param_groups"])
        scalars = json.loads(meta["scalars"])
    except Exception as exc:  # missing, or safetensors and json raise several types on garbage
        _discard_moments(directory, path, str(exc))
        return False
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        _, pid, name = key.split(".", 2)
        state.setdefault(int(pid), {})[name] = value
    for key, value in scalars.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as exc:
        _discard_moments(directory, path, f"does not fit this model's optimizer ({exc})")
        return False
    return True


def _discard_moments(directory: Path, path: Path, reason: str) -> None:
    """Unusable saved moments: both files aside, and the trainer goes on with fresh ones."""
    if path.exists():
        discard(path, f"{reason}; the trainer goes on with fresh optimizer moments")
    discard(directory / OPTIMIZER_FILE, f"its moments file {path.name} is unusable ({reason})")


def _metadata(data: bytes) -> dict:
    """The `__metadata__` of a safetensors buffer (8-byte little-endian header length, JSON header)."""
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n])["__metadata__"]
