"""Manifest fields <-> JSON text, for the shard store's on-disk root records.

Manifest fields carry raw bytes (hashes), which JSON cannot; the store writes them as hex under the
same keys. Only the known byte-valued fields are converted, so the mapping is exact both ways and
`parse_manifest` re-checks the root on the way back in.
"""

from __future__ import annotations

import json
from typing import Any


def manifest_to_json(fields: dict[str, Any]) -> str:
    """JSON text for manifest fields (bytes as lowercase hex)."""
    out = dict(fields)
    for key in ("parent_root", "root"):
        if out.get(key) is not None:
            out[key] = bytes(out[key]).hex()
    out["shard_hashes"] = [bytes(h).hex() for h in fields["shard_hashes"]]
    out["piece_hashes"] = [bytes(h).hex() for h in fields["piece_hashes"]]
    out["tensors"] = [{**t, "hash": bytes(t["hash"]).hex()} for t in fields["tensors"]]
    return json.dumps(out, sort_keys=True)


def manifest_from_json(text: str) -> dict[str, Any]:
    """Inverse of `manifest_to_json` (not validated: pass the result to `parse_manifest`)."""
    out = json.loads(text)
    for key in ("parent_root", "root"):
        if out.get(key) is not None:
            out[key] = bytes.fromhex(out[key])
    out["shard_hashes"] = [bytes.fromhex(h) for h in out["shard_hashes"]]
    out["piece_hashes"] = [bytes.fromhex(h) for h in out.get("piece_hashes", ())]
    out["tensors"] = [{**t, "hash": bytes.fromhex(t["hash"])} for t in out["tensors"]]
    return out
