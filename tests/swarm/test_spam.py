"""Issue 20, items 7 and 8 (core side): spam costs the spammer.

A victim core, an honest peer and an attacker wired by MemoryNet; the attacker's traffic is injected
as if its link delivered it, the way a hostile libp2p client would.
"""

from __future__ import annotations

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import Probe
from swarm.io import Ban, MessageReceived, MessageVerdict
from tests.samples import T0
from tests.swarm.harness import star_net


def probe(key: Identity, seq: int, now: float) -> bytes:
    return seal(key, Probe(seq=seq, sent_at=now, payload=b"")).wire


def verdict(effects: list) -> MessageVerdict:
    return next(e for e in effects if isinstance(e, MessageVerdict))


def test_self_minted_traffic_does_not_launder_garbage():
    """40 malformed messages (8x the ban threshold) among 4,000 valid ones signed by the attacker's own
    throwaway keys: the valid ones earn the forwarder nothing, so the 5th malformed one bans it."""
    net, (victim, _honest, attacker) = star_net(3)
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
    net, (victim, relay, signer) = star_net(3)
    signer_key = signer.identity
    net.inject(victim.peer_id, topics.PROBE, probe(signer_key, 1, net.now), signer.peer_id)
    assert verdict(net.inject(victim.peer_id, topics.PROBE, probe(signer_key, 2, net.now), relay.peer_id)).accepted
    assert victim.ledger.get(relay.peer_id).accepted == 1
    assert victim.ledger.score(relay.peer_id) > 0
    # Each message is counted once in the totals, not once for the signer and once for the relay.
    assert victim.snapshot(net.now)["messages"]["accepted"] == victim.ledger.get(signer.peer_id).accepted


def test_fresh_key_flood_is_throttled_at_its_forwarder():
    """The issue's flood: 3,867 messages, each signed by a fresh key, in 30 s through one link. The per-
    signer limit never fires (one message per key); the per-forwarder limit on new signers does, and
    its penalties ban the forwarder. An honest relay's traffic is untouched meanwhile."""
    net, (victim, relay, attacker) = star_net(3)
    honest = Identity(b"honest-signer".ljust(32, b"\0"))
    accepted = throttled = 0
    banned_at = None
    for i in range(3867):
        net.now = T0 + i * 30 / 3867
        v = verdict(net.inject(victim.peer_id, topics.PROBE, probe(Identity(i.to_bytes(32, "big")), i, net.now),
                               attacker.peer_id))
        accepted += v.accepted
        throttled += v.reason == "rate-limited"
        if banned_at is None and victim.is_banned(attacker.peer_id):
            banned_at = net.now - T0
        if i % 50 == 0:  # an honest signer's messages through the honest relay, meanwhile
            assert verdict(net.inject(victim.peer_id, topics.PROBE, probe(honest, i, net.now), relay.peer_id)).accepted
    cfg = victim.config
    assert throttled >= 25 and banned_at is not None and banned_at < 3.0, (throttled, banned_at)
    assert accepted <= cfg.fresh_signer_burst + cfg.fresh_signer_rate * banned_at + 1, f"{accepted} of 3,867 accepted"
    assert "rate-limited" in victim.ledger.get(attacker.peer_id).ban_reason
    assert not victim.is_banned(relay.peer_id)
    print(f"fresh-key flood: {accepted}/3867 accepted, {throttled} throttled, forwarder banned after {banned_at:.2f}s")


def test_fresh_keys_through_many_forwarder_ids_of_one_network_share_its_budget():
    """Forwarder ids are free too: ten of them on one network, each under its own new-signer rate, get
    the network's budget together, refused `capacity` (no penalty: an honest peer may share the
    network); a forwarder on another network is untouched, and so is a runtime that cannot tell."""
    net, (victim, relay, _attacker) = star_net(3)
    forwarders = [Identity(b"sybil-fwd-%02d" % f + bytes(20)).peer_id for f in range(10)]
    cfg = victim.config
    accepted = refused = 0
    for i in range(3000):  # 100 new signers/s for 30 s, 10/s through each id: under its own 20/s
        net.now = T0 + i / 100
        wire = probe(Identity(i.to_bytes(32, "big")), i, net.now)
        v = verdict(net.deliver(victim.peer_id, MessageReceived(topics.PROBE, wire, forwarders[i % 10],
                                                                "198.51.100.0/24")))
        accepted += v.accepted
        refused += v.reason == "capacity"
        if i % 100 == 0:
            other = probe(Identity((10**6 + i).to_bytes(32, "big")), i, net.now)
            assert verdict(net.deliver(victim.peer_id, MessageReceived(topics.PROBE, other, relay.peer_id,
                                                                       "203.0.113.0/24"))).accepted
    assert accepted <= cfg.fresh_signer_burst + cfg.fresh_signer_rate * 30 + 1, accepted
    assert refused >= 3000 - accepted - 1 and refused > 1500
    assert not any(victim.is_banned(f) for f in forwarders)
    assert all(victim.ledger.score(f) >= 0 for f in forwarders)


def test_reputation_table_stays_bounded_under_a_key_per_message_flood():
    """5,000 fresh keys, spread over 30 forwarders so that none is throttled: the table stays at its
    capacity, and the records with history (peers we have heard from for a while) are all kept."""
    net, (victim, relay, _attacker) = star_net(3)
    known = [Identity(b"known-%03d" % k + bytes(23)) for k in range(40)]
    for seq in range(10):
        for key in known:
            assert verdict(net.inject(victim.peer_id, topics.PROBE, probe(key, seq, net.now), relay.peer_id)).accepted
    forwarders = [Identity(b"fwd-%02d" % f + bytes(26)).peer_id for f in range(30)]
    for i in range(5000):
        net.now += 0.01
        net.inject(victim.peer_id, topics.PROBE, probe(Identity(i.to_bytes(32, "big")), i, net.now),
                   forwarders[i % 30])
    ledger = victim.ledger
    assert len(ledger.snapshot()["peers"]) <= ledger.capacity
    assert all(ledger.get(k.peer_id) is not None and ledger.get(k.peer_id).accepted == 10 for k in known)
    assert not any(victim.is_banned(f) for f in forwarders)


def test_status_counts_each_message_once_by_verdict():
    """`messages` counts verdicts, as the host counts its validator's answers: a relayed message once
    (not for signer and forwarder both), our own echo as accepted, a replay as `duplicate`."""
    net, (victim, relay, signer) = star_net(3)
    mine = probe(victim.identity, 1, net.now)
    wires = [probe(signer.identity, 1, net.now), probe(signer.identity, 2, net.now), mine, b"\x93junk"]
    answers = [verdict(net.inject(victim.peer_id, topics.PROBE, w, relay.peer_id)) for w in wires]
    answers.append(verdict(net.inject(victim.peer_id, topics.PROBE, wires[0], signer.peer_id)))  # a replay
    counts = victim.snapshot(net.now)["messages"]
    assert counts["accepted"] == sum(v.accepted for v in answers) == 3
    assert counts["rejected"] == {"duplicate": 1, "malformed": 1}
    assert victim.snapshot(net.now)["penalties"] == {"duplicate": 1, "malformed": 1}
