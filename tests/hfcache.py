"""A Hugging Face hub cache built by a test, offline: a model directory written in the layout
huggingface_hub reads (models--ORG--NAME/{blobs,snapshots/<commit>,refs/main}), files stored once
under their sha256 and linked from the snapshot, as `hf download` leaves them."""

import hashlib
import os
import shutil
from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"


def add_model(cache: Path, repo_id: str, source: Path, revision: str = REVISION) -> str:
    """Put every file of `source` into `cache` as `repo_id` at `revision`; returns "hf:REPO@REVISION"."""
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(source).rglob("*")):
        if not path.is_file():
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        blob = repo / "blobs" / digest.hexdigest()
        if not blob.exists():
            try:
                os.link(path, blob)  # big weights: no copy where the file system allows
            except OSError:
                shutil.copyfile(path, blob)
        link = snapshot / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return f"hf:{repo_id}@{revision}"
