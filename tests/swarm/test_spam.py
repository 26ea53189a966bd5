"""Issue 20, items 7 and 8 (core side): spam costs the spammer.

A victim core, an honest peer and an attacker wired by MemoryNet; the attacker's traffic is injected
as if its link delivered it, the way a hostile libp2p client would.
"""

from __future__ import annotations

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import Probe
from swarm.core import CoreConfig, PeerCore
from swarm.io import Ban, MessageVerdict
from tests.samples import T0
from tests.swarm.harness import MemoryNet


def wired(n: int = 3, **config) -> tuple[MemoryNet, list[PeerCore]]:
    cores = [PeerCore(Identity(bytes([i + 1]) * 32), CoreConfig(**config), seed=i) for i in range(n)]
    net = MemoryNet(cores, T0)
    net.start()
    for other in cores[1:]:
        net.connect(cores[0].peer_id, other.peer_id)
    return net, cores


def probe(key: Identity, seq: int, now: float) -> bytes:
    return seal(key, Probe(seq=seq, sent_at=now, payload=b"")).wire


def verdict(effects: list) -> MessageVerdict:
    return next(e for e in effects if isinstance(e, MessageVerdict))


def test_self_minted_traffic_does_not_launder_garbage():
    """40 malformed messages (8x the ban threshold) among 4,000 valid ones signed by the attacker's own
    throwaway keys: the valid ones earn the forwarder nothing, so the 5th malformed one bans it."""
    net, (victim, _honest, attacker) = wired()
    keys = [Identity(b"minted-%02d" % i + bytes(23)) for i in range(20)]
    sent_bad = banned_after = 0
    for i in range(4040):
        net.now += 0.01  # ~100 messages/s, as the attacker
        if i % 101 == 100:
            sent_bad += 1
            effects = net.inject(victim.peer_id, topics.STATUS, b"\x93garbage", attacker.peer_id)
            if any(isinstance(e, Ban) and e.peer == attacker.peer_id for e in effects):
                banned_after = sent_bad
        else:
            effects = net.inject(victim.peer_id, topics.PROBE, probe(keys[i % 20], i, net.now), attacker.peer_id)
        if victim.is_banned(attacker.peer_id):
            break
    assert banned_after == 5, f"banned after {banned_after} malformed messages (never, before the fix)"
    assert victim.ledger.get(attacker.peer_id).accepted == 0  # no relay credit for its own keys
    assert "malformed" in victim.ledger.get(attacker.peer_id).ban_reason


def test_an_honest_relay_earns_credit_for_content_others_also_deliver():
    """A signer whose messages reach us directly and through a relay: the relay is credited."""
    net, (victim, relay, signer) = wired()
    signer_key = signer.identity
    net.inject(victim.peer_id, topics.PROBE, probe(signer_key, 1, net.now), signer.peer_id)
    assert verdict(net.inject(victim.peer_id, topics.PROBE, probe(signer_key, 2, net.now), relay.peer_id)).accepted
    assert victim.ledger.get(relay.peer_id).accepted == 1
    assert victim.ledger.score(relay.peer_id) > 0
    # Each message is counted once in the totals, not once for the signer and once for the relay.
    assert victim.snapshot(net.now)["messages"]["accepted"] == victim.ledger.get(signer.peer_id).accepted
