"""A node's identity on disk: one Ed25519 seed in `<data-dir>/identity.key`, mode 0600.

Created once and loaded on every restart, so the peer id is stable. The same seed is the gossip
signing key and the libp2p host key (DESIGN.md), so there is one identity, not two.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gossip.identity import Identity
from trainer.fsutil import write_atomic

KEY_FILE = "identity.key"
_HEADER = "swarm-ed25519-seed-v1"


class KeyFileError(Exception):
    """The key file exists but cannot be used; the message says what to do."""


def key_path(data_dir: Path) -> Path:
    return Path(data_dir) / KEY_FILE


def create_identity(data_dir: Path, seed: bytes | None = None) -> Identity:
    """Write a new key file; refuses to overwrite an existing one (that would change the peer id)."""
    path = key_path(data_dir)
    if path.exists():
        raise KeyFileError(f"{path} already exists; remove it first if you really want a new peer id")
    identity = Identity(seed if seed is not None else os.urandom(32))
    Path(data_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, f"{_HEADER}\n{identity.seed.hex()}\n".encode(), mode=0o600, point="identity-key")
    return identity


def load_identity(data_dir: Path) -> Identity:
    path = key_path(data_dir)
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except FileNotFoundError:
        raise KeyFileError(f"no key file at {path}; run `swarm-node keygen --data-dir {data_dir}`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
                           f"run `chmod 600 {path}`")
    lines = text.split()
    try:
        if len(lines) != 2 or lines[0] != _HEADER:
            raise ValueError("unexpected format")
        seed = bytes.fromhex(lines[1])
        return Identity(seed)
    except ValueError as exc:
        raise KeyFileError(f"{path} is corrupt ({exc}); restore it from a backup, or move it away and run "
                           f"`swarm-node keygen --data-dir {data_dir}` for a new peer id") from None


def load_or_create_identity(data_dir: Path) -> Identity:
    return load_identity(data_dir) if key_path(data_dir).exists() else create_identity(data_dir)
