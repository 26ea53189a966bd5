"""Verify a peer's signed peer record once, not on every gossip RPC.

py-libp2p 0.8.1 attaches the sender's signed peer record to every published or forwarded RPC and
verifies it (an Ed25519 check plus a peerstore update) on every receipt, twice: in
`Pubsub.continuously_read_stream` and again in `GossipSub.handle_rpc`. Profiled on a 6-process
swarm at 100 msg/s this was the largest single avoidable cost. The record a peer sends does not
change while its addresses do not, so a record already verified for that peer is accepted from a
small per-host memo; a new or changed record is verified as before. The module-level names are
patched because both call sites import the function by name.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import libp2p.pubsub.gossipsub as _gossipsub_module
import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.pubsub.utils import maybe_consume_signed_record as _verify_and_store

MEMO_SIZE = 1024


def consume_signed_record_once(msg: Any, host: Any, peer_id: Any) -> bool:
    if not msg.HasField("senderRecord"):
        return True
    memo: OrderedDict | None = getattr(host, "_swarm_verified_records", None)
    if memo is None:
        memo = OrderedDict()
        host._swarm_verified_records = memo
    key = (peer_id.to_bytes(), hashlib.blake2b(msg.senderRecord, digest_size=16).digest())
    if key in memo:
        memo.move_to_end(key)
        return True
    ok = _verify_and_store(msg, host, peer_id)
    if ok:
        memo[key] = True
        while len(memo) > MEMO_SIZE:
            memo.popitem(last=False)
    return ok


def install() -> None:
    """Idempotent: route both of py-libp2p's call sites through the memo."""
    _pubsub_module.maybe_consume_signed_record = consume_signed_record_once
    _gossipsub_module.maybe_consume_signed_record = consume_signed_record_once
