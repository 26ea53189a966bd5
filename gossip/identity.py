"""One Ed25519 key is both a peer's gossip signer and its libp2p identity.

libp2p derives an Ed25519 peer id as base58btc(identity-multihash(protobuf PublicKey)), so the id
can be computed from the 32-byte public key and back, without importing libp2p here (gossip/ must
stay free of it). A test checks these against libp2p's own `ID.from_pubkey`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import nacl.exceptions
import nacl.signing

# protobuf PublicKey{Type: Ed25519 (1), Data: 32 bytes}, wrapped in an identity multihash (0x00, len 36)
_PEER_ID_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}


def _b58encode(data: bytes) -> str:
    # Hand-written: the `base58` package is a libp2p dependency, not one gossip/ may use.
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def _b58decode(text: str) -> bytes:
    n = 0
    for c in text:
        if c not in _B58_INDEX:
            raise ValueError(f"not base58: {c!r}")
        n = n * 58 + _B58_INDEX[c]
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


@lru_cache(maxsize=65536)  # many cores in one process (the simulator) name the same keys
def peer_id_from_public_key(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return _b58encode(_PEER_ID_PREFIX + public_key)


def public_key_from_peer_id(peer_id: str) -> bytes:
    """Inverse of `peer_id_from_public_key`; ValueError for ids that are not Ed25519 identity ids."""
    if len(peer_id) > 64:
        raise ValueError("peer id too long")
    raw = _b58decode(peer_id)
    if len(raw) != 38 or not raw.startswith(_PEER_ID_PREFIX):
        raise ValueError(f"not an Ed25519 libp2p peer id: {peer_id}")
    return raw[len(_PEER_ID_PREFIX):]


@dataclass(frozen=True)
class Identity:
    """A peer's signing key. The 32-byte seed is the only secret; everything else derives from it."""

    seed: bytes

    def __post_init__(self) -> None:
        if len(self.seed) != 32:
            raise ValueError("an identity seed is 32 bytes")

    @cached_property
    def _key(self) -> nacl.signing.SigningKey:
        return nacl.signing.SigningKey(self.seed)

    @cached_property
    def public_key(self) -> bytes:
        return bytes(self._key.verify_key)

    @cached_property
    def peer_id(self) -> str:
        return peer_id_from_public_key(self.public_key)

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data).signature

    def __repr__(self) -> str:  # never print the seed
        return f"Identity({self.peer_id})"


def verify_signature(public_key: bytes, data: bytes, signature: bytes) -> bool:
    try:
        nacl.signing.VerifyKey(public_key).verify(data, signature)
        return True
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, nacl.exceptions.TypeError, ValueError):
        return False
