"""Models by Hugging Face name, `hf:ORG/NAME@REVISION`, through huggingface_hub's cache; content hashes.

The revision must be a full 40-hex commit id, so the name alone pins one set of files. Resolving
looks in huggingface_hub's cache first (`HF_HUB_CACHE`, `HF_HOME`, default ~/.cache/huggingface/hub),
downloads the snapshot when it is missing and the peer may go online (`HF_HUB_OFFLINE` unset), and
otherwise fails with the command that fetches it. Only the files a model needs are fetched:
`MODEL_FILES` (config, tokenizer, safetensors; never pickled weights).

`content_hash(directory)` is what a task's `model_hash` param pins: blake2b-192 (48 hex characters,
what a task param string holds) over every `MODEL_FILES` file at the top of the directory, each as
its name and the blake2b-256 of its bytes, sorted by name. The same function serves `dir:` models.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from trainer.model import ModelLoadError

PREFIX = "hf:"
MODEL_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja")
HASH_HEX = 48
_NAME = re.compile(r"hf:([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)@([0-9a-f]{40})")


@dataclass(frozen=True)
class HFName:
    repo_id: str
    revision: str

    @property
    def fetch_command(self) -> str:
        patterns = " ".join(f"'{p}'" for p in MODEL_FILES)
        return f"hf download {self.repo_id} --revision {self.revision} --include {patterns}"


def parse(name: str) -> HFName:
    """`hf:ORG/NAME@<40-hex commit>` -> HFName; ModelLoadError saying the form otherwise."""
    m = _NAME.fullmatch(name)
    if m is None:
        raise ModelLoadError(f"model {name!r}: write hf:ORG/NAME@REVISION with REVISION the full 40-hex "
                             "commit id (the 'Files' tab's history on the hub, or `hf download` prints it), "
                             "so every peer loads the same files")
    return HFName(m.group(1), m.group(2))


def snapshot_dir(name: str) -> Path:
    """The local snapshot directory of `name`, downloading it when it is not cached and the peer
    may go online; ModelLoadError with the command to run when neither works."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    ref, cache = parse(name), hub_cache()
    try:
        return Path(snapshot_download(ref.repo_id, revision=ref.revision, allow_patterns=list(MODEL_FILES),
                                      cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:  # not there, or partly (an interrupted download)
        pass
    except Exception as exc:  # a damaged cache entry
        raise ModelLoadError(f"model {name!r}: the Hugging Face cache entry in {cache} is unusable "
                             f"({type(exc).__name__}: {exc}); delete it and run `{ref.fetch_command}`") from None
    where = f"not in the Hugging Face cache ({cache})"
    if offline():
        raise ModelLoadError(f"model {name!r} is {where} and HF_HUB_OFFLINE is set: run `{ref.fetch_command}` "
                             "where the hub is reachable (with this HF_HUB_CACHE, or copy the cache here), or "
                             "unset HF_HUB_OFFLINE to let this peer download it")
    try:
        return Path(snapshot_download(ref.repo_id, revision=ref.revision, allow_patterns=list(MODEL_FILES),
                                      cache_dir=cache))
    except Exception as exc:  # network down, repo or revision unknown, gated repo: all need the operator
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ModelLoadError(f"model {name!r} is {where} and downloading it failed ({type(exc).__name__}: "
                             f"{first}); run `{ref.fetch_command}` where the hub is reachable (log in "
                             "with `hf auth login` for a gated model) and copy the cache here") from None


def hub_cache() -> str:
    """huggingface_hub's cache folder as the environment says now (it reads it once, at import)."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return constants.HF_HUB_CACHE


def offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, at call time (tests and operators set it late)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def model_files(directory: Path) -> list[Path]:
    """The files a model is loaded from: the `MODEL_FILES` at the top of `directory`, sorted by name.
    Sub-folders (a repo's onnx/, runs/, ...) are not read by the loader, and peers that fetched more or
    less of them must still agree on the hash."""
    return sorted((p for p in Path(directory).iterdir()
                   if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in MODEL_FILES)), key=lambda p: p.name)


_hashes: dict[tuple, str] = {}  # (directory, each file's (path, size, mtime)) -> its content hash


def content_hash(directory: str | os.PathLike) -> str:
    """blake2b-192 hex over (relative path, blake2b-256 of the bytes) of each model file, by path;
    remembered per process while no file's size or mtime changes."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelLoadError(f"model directory {str(directory)!r} does not exist")
    files = model_files(directory)
    if not files:
        raise ModelLoadError(f"{str(directory)!r} holds no model files ({', '.join(MODEL_FILES)})")
    key = (str(directory.resolve()),) + tuple(
        (p.relative_to(directory).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _hashes:
        total = hashlib.blake2b(digest_size=HASH_HEX // 2)
        for path in files:
            digest = hashlib.blake2b(digest_size=32)
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            total.update(path.relative_to(directory).as_posix().encode() + b"\x00" + digest.digest())
        _hashes[key] = total.hexdigest()
    return _hashes[key]
