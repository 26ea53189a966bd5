import os
import stat

import pytest

from gossip.identity import Identity, peer_id_from_public_key, public_key_from_peer_id, verify_signature
from gossip.reputation import ReputationLedger
from gossip.seen import SeenCache


def test_peer_id_matches_libp2p():
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID
    for seed in (bytes(32), bytes(range(32)), os.urandom(32)):
        ident = Identity(seed)
        kp = create_new_key_pair(seed)
        assert kp.public_key.to_bytes() == ident.public_key
        assert ID.from_pubkey(kp.public_key).to_base58() == ident.peer_id
        assert public_key_from_peer_id(ident.peer_id) == ident.public_key
        assert kp.private_key.sign(b"m") == ident.sign(b"m")


def test_peer_id_parse_errors():
    with pytest.raises(ValueError):
        public_key_from_peer_id("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N")  # an RSA-style id
    with pytest.raises(ValueError):
        public_key_from_peer_id("0OIl")
    with pytest.raises(ValueError):
        peer_id_from_public_key(b"short")


def test_signatures():
    ident = Identity(bytes(32))
    sig = ident.sign(b"hello")
    assert verify_signature(ident.public_key, b"hello", sig)
    assert not verify_signature(ident.public_key, b"hellp", sig)
    assert not verify_signature(b"\x00" * 32, b"hello", sig)
    assert "seed" not in repr(ident) and ident.peer_id in repr(ident)


def test_seen_cache_ttl_and_capacity():
    seen = SeenCache(capacity=3, ttl=10)
    assert seen.add(b"a", 0) and not seen.add(b"a", 5)
    assert seen.add(b"a", 10.5)  # expired, so new again
    for i, key in enumerate([b"b", b"c", b"d"]):
        seen.add(key, 11 + i)
    assert len(seen) == 3 and b"a" not in seen


def test_ledger_bans_after_enough_garbage():
    ledger = ReputationLedger(ban_below=-50)
    for i in range(4):
        assert not ledger.reject("p", "malformed", i)
    assert ledger.reject("p", "malformed", 5)  # -50: banned now
    assert ledger.is_banned("p")
    assert not ledger.reject("p", "malformed", 6)  # already banned: no second ban event
    snap = ledger.snapshot()
    assert snap["peers"]["p"]["rejected"] == {"malformed": 6} and snap["rejected"] == {"malformed": 6}


def test_ledger_small_faults_do_not_ban_a_good_peer():
    ledger = ReputationLedger()
    for i in range(200):
        ledger.accept("p", i)
    for i in range(10):
        ledger.reject("p", "out-of-window", 200 + i)
    assert not ledger.is_banned("p")


def test_ledger_is_bounded_and_keeps_bans():
    ledger = ReputationLedger(capacity=10)
    ledger.ban("villain", "proven", 0)
    for i in range(50):
        ledger.accept(f"p{i}", i + 1)
    assert ledger.is_banned("villain") and len(ledger.snapshot()["peers"]) <= 10
