"""Which roles still use which blobs, so a blob is deleted once the last of them lets go.

Weights blobs are the big ones (5 MB per version of the built-in model, 270 MB for SmolLM2, stored
in bf16) and every version makes one on every peer: without this a 900 s `swarm-node local` run
kept 5.6 GB of old versions per worker. A worker's and a validator's followers in one peer hold the
same versions, so a blob goes only when no owner holds it (`DropBlobs`).
"""

from __future__ import annotations

from swarm.io import DropBlobs


class BlobRefs:
    def __init__(self) -> None:
        self._owners: dict[bytes, set[int]] = {}

    def hold(self, owner, digest: bytes) -> None:
        self._owners.setdefault(bytes(digest), set()).add(id(owner))

    def release(self, owner, digests) -> list:
        """Let go of `digests` for `owner`; a DropBlobs effect for those nobody holds now."""
        gone = []
        for digest in sorted({bytes(d) for d in digests}):
            users = self._owners.get(digest)
            if users is None or id(owner) not in users:
                continue
            users.discard(id(owner))
            if not users:
                del self._owners[digest]
                gone.append(digest)
        return [DropBlobs(tuple(gone))] if gone else []

    def held(self) -> frozenset[bytes]:
        return frozenset(self._owners)
