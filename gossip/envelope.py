"""Signed envelopes: `{v, kind, body, signer, sig}` (DESIGN.md, wire protocol).

The signature covers a domain tag, the schema version, the kind and the body bytes, so a body
signed as one kind cannot be replayed as another. A message id is the blake2b-256 of the canonical
envelope, recomputed after decoding, so re-encoding the same signed message cannot mint a new id.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import msgpack

from gossip.errors import (BAD_SIGNATURE, MALFORMED, OTHER_MAJOR, OVERSIZED, SCHEMA, UNKNOWN_KIND, Rejected,
                           UnknownKind)
from gossip.hashing import blake2b256
from gossip.identity import Identity, verify_signature
from gossip.messages import MESSAGE_KINDS, Message

VERSION = 1  # the protocol's major version (gossip/release.py)
MAX_KIND = 32  # characters in a kind's name, known or not
MAX_ENVELOPE = 900_000  # py-libp2p's publish() silently drops messages above ~1 MiB
_DOMAIN = b"swarm/envelope/1\x00"
_ENVELOPE_KEYS = {"v", "kind", "body", "signer", "sig"}


@dataclass(frozen=True)
class SignedMessage:
    """A verified message: its body, who signed it, and its id."""

    message: Message
    signer: bytes
    msg_id: bytes
    wire: bytes  # the canonical envelope, to forward or store verbatim

    @property
    def kind(self) -> str:
        return self.message.KIND


def _refuse_ext(code: int, data: bytes) -> None:
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


def _unpack(data: bytes) -> object:
    """Strict msgpack decode: no extension types, str keys only; nesting and lengths are bounded by
    msgpack itself from the input size (its max_*_len defaults derive from len(data))."""
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True, ext_hook=_refuse_ext)


def signed_bytes(version: int, kind: str, body: bytes) -> bytes:
    return _DOMAIN + msgpack.packb([version, kind, body], use_bin_type=True)


def pack_envelope(version: int, kind: str, body: bytes, signer: bytes, sig: bytes) -> bytes:
    return msgpack.packb({"v": version, "kind": kind, "body": body, "signer": signer, "sig": sig},
                         use_bin_type=True)


def seal(identity: Identity, message: Message) -> SignedMessage:
    """Sign `message` as `identity`."""
    body = message.body_bytes()
    if len(body) > message.MAX_BODY:
        raise ValueError(f"{message.KIND} body is {len(body)} bytes, at most {message.MAX_BODY}")
    sig = identity.sign(signed_bytes(VERSION, message.KIND, body))
    wire = pack_envelope(VERSION, message.KIND, body, identity.public_key, sig)
    return SignedMessage(message, identity.public_key, blake2b256(wire), wire)


def open_envelope(data: bytes, max_size: int = MAX_ENVELOPE,
                  kinds: Mapping[str, type[Message]] = MESSAGE_KINDS) -> SignedMessage:
    """Decode and verify an envelope from the network, or raise `Rejected` with the reason. `kinds`:
    the message kinds this release decodes. A kind outside it, in an envelope that is otherwise good
    and signed, raises `UnknownKind` naming the signer (its announcements decide the penalty)."""
    if not isinstance(data, (bytes, bytearray)):
        raise Rejected(MALFORMED, "envelope is not bytes")
    if len(data) > max_size:
        raise Rejected(OVERSIZED, f"envelope is {len(data)} bytes, at most {max_size}")
    try:
        obj = _unpack(bytes(data))
    except Exception as exc:  # msgpack raises a zoo of types on garbage; all mean the same here
        raise Rejected(MALFORMED, f"not msgpack: {type(exc).__name__}") from None
    if not isinstance(obj, dict) or set(obj) != _ENVELOPE_KEYS:
        raise Rejected(MALFORMED, "not an envelope map {v, kind, body, signer, sig}")
    version, kind, body, signer, sig = obj["v"], obj["kind"], obj["body"], obj["signer"], obj["sig"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise Rejected(MALFORMED, "envelope v is not an integer")
    if version != VERSION:
        # Another major is another protocol (its topics are swarm/<major>/...): nothing more is read.
        raise Rejected(OTHER_MAJOR, f"protocol major {version}, this peer speaks {VERSION}")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_KIND:
        raise Rejected(UNKNOWN_KIND, f"unknown message kind {str(kind)[:MAX_KIND]!r}")
    if not (isinstance(body, bytes) and isinstance(signer, bytes) and isinstance(sig, bytes)):
        raise Rejected(MALFORMED, "body, signer and sig must be bytes")
    if len(signer) != 32 or len(sig) != 64:
        raise Rejected(MALFORMED, "signer is 32 bytes and sig 64 bytes")
    cls = kinds.get(kind)
    if cls is None:
        if not verify_signature(signer, signed_bytes(version, kind, body), sig):
            raise Rejected(BAD_SIGNATURE, f"{kind[:MAX_KIND]!r} signature does not verify")
        raise UnknownKind(kind, signer)
    if len(body) > cls.MAX_BODY:
        raise Rejected(OVERSIZED, f"{kind} body is {len(body)} bytes, at most {cls.MAX_BODY}")
    if not verify_signature(signer, signed_bytes(version, kind, body), sig):
        raise Rejected(BAD_SIGNATURE, f"{kind} signature does not verify")
    message = decode_body(cls, body)
    wire = pack_envelope(version, kind, body, signer, sig)
    return SignedMessage(message, signer, blake2b256(wire), wire)


def decode_body(cls: type[Message], body: bytes) -> Message:
    """The body as `cls`, written by this release or by any other minor release of this major (fields
    it does not carry take their defaults, unknown trailing fields are ignored: docs/protocol.md §10)."""
    try:
        obj = _unpack(body)
    except Exception as exc:
        raise Rejected(MALFORMED, f"{cls.KIND} body is not msgpack: {type(exc).__name__}") from None
    message, carried, extras = cls.from_wire_tolerant(obj)
    if not extras:
        canonical = message.body_bytes() == body
        if canonical:  # the same bytes: kept, so encoding it again (a task's id, a relay) is free
            object.__setattr__(message, "_wire_body", body)
    else:  # the fields we know as their sender carried them, then the ones it knows and we do not
        canonical = msgpack.packb({**message.wire_of(carried), **extras}, use_bin_type=True) == body
        object.__setattr__(message, "_wire_body", body)
    if not canonical:
        # Only the canonical encoding is accepted: one message, one byte string, one id.
        raise Rejected(SCHEMA, f"{cls.KIND} body is not in canonical form")
    return message


class EnvelopeMemo:
    """Remembers what `open_envelope` said about exact byte strings, valid or not.

    Decoding and signature checks are pure functions of the bytes, so many peers in one process
    (the simulator) can share one memo and verify each message once instead of once per peer.
    Keyed by the bytes themselves (a bytes object caches its hash, so the 1,000th delivery of one
    message costs a dict lookup). Bounded by `capacity` entries and `max_bytes` of keys: least
    recently used entries are dropped.
    """

    def __init__(self, capacity: int = 65536, max_bytes: int = 64 << 20,
                 kinds: Mapping[str, type[Message]] = MESSAGE_KINDS) -> None:
        self.kinds = kinds  # what `open_envelope` says depends on the kinds it knows: one memo per release
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, SignedMessage | Rejected] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def open(self, data: bytes, max_size: int = MAX_ENVELOPE) -> SignedMessage:
        if not isinstance(data, (bytes, bytearray)) or len(data) > max_size:
            return open_envelope(data, max_size, self.kinds)
        key = data if type(data) is bytes else bytes(data)
        entries = self._entries
        entry = entries.get(key)
        if entry is None:
            try:
                entry = open_envelope(key, max_size, self.kinds)
            except Rejected as rej:
                entry = rej
            entries[key] = entry
            self._bytes += len(key)
            while len(entries) > self.capacity or (self._bytes > self.max_bytes and len(entries) > 1):
                old, _ = entries.popitem(last=False)
                self._bytes -= len(old)
        else:
            self.hits += 1
            entries.move_to_end(key)
        if isinstance(entry, Rejected):
            raise entry.again()
        return entry
