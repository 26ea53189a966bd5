"""Pure speed-ups for many cores in one process; none changes what any core computes.

`PeerCore._signer_id` caches peer ids per core, so in a 1,000-peer simulation each of the 1,000 cores
base58-encodes each of the 1,000 signers' keys once: a million big-integer divisions loops, about a
tenth of a large run. The function is pure, so the simulator swaps in a memoised copy under the name
`swarm.core` looks it up by. CORE_CHANGES.md asks for the same cache in `gossip.identity` itself,
after which this module can go.
"""

from __future__ import annotations

import functools

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import swarm.core
    from gossip.identity import peer_id_from_public_key
    original = getattr(swarm.core, "peer_id_from_public_key", None)
    if original is peer_id_from_public_key:
        swarm.core.peer_id_from_public_key = functools.lru_cache(maxsize=1 << 16)(peer_id_from_public_key)
    _installed = True
