"""The bytes of `/swarm/shard/2`, both directions: a piece request, and its answer.

One module owns the framing so the core (which builds requests and reads answers), the runtime
(node/driver.py, which writes answers on a stream) and the simulator (which serves pieces from its
virtual store) cannot drift apart. A request is the manifest root then the piece index as 4
big-endian bytes. An answer is PIECE_OK then the piece, or PIECE_ERROR then a reason: in band, so
"busy" and "not-found" reach the asker (a stream reset says nothing). The core sees the piece as
`ResponseReceived.data` and the reason as `.error`.
"""

from __future__ import annotations

from typing import Callable

from gossip import errors
from swarm.io import RespondShard

ROOT = 32
REQUEST_SIZE = ROOT + 4  # root, then the piece index as 4 big-endian bytes
PIECE_OK = b"\x00"
PIECE_ERROR = b"\x01"
MAX_REASON = 64  # bytes of an error reason kept on the wire
NOT_FOUND = "not-found"


def encode_request(root: bytes, index: int) -> bytes:
    return bytes(root) + index.to_bytes(4, "big")


def decode_request(data: bytes) -> tuple[bytes, int]:
    """(root, piece index); raises Rejected(MALFORMED) for anything but exactly 36 bytes."""
    if len(data) != REQUEST_SIZE:
        raise errors.Rejected(errors.MALFORMED, f"piece request of {len(data)} bytes, expected {REQUEST_SIZE}")
    return bytes(data[:ROOT]), int.from_bytes(data[ROOT:], "big")


def encode_error(why: str) -> bytes:
    return PIECE_ERROR + why.encode()[:MAX_REASON]


def encode_answer(data: bytes, error: str | None) -> bytes:
    """The answer's bytes: the piece, or (`error` set) the reason it is not sent."""
    return encode_error(error) if error is not None else PIECE_OK + data


def decode_answer(data: bytes) -> tuple[bytes, str | None]:
    """(piece bytes, None) or (b"", the server's reason); anything else is a malformed answer."""
    if data[:1] == PIECE_OK:
        return data[1:], None
    if data[:1] == PIECE_ERROR:
        return b"", data[1:1 + MAX_REASON].decode("ascii", "replace") or "error"
    return b"", "malformed answer"


PieceReader = Callable[[bytes, int, int, bytes], "bytes | None"]
"""read(shard, offset, length, piece digest): the stored piece, re-hashed on read; None when missing
or rotten."""


def piece_answer(effect: RespondShard, read: PieceReader) -> tuple[bytes, str | None]:
    """What a runtime sends for `effect`: the piece the core handed over (of a shard still being
    fetched, checked when it came), else the piece read from the shard store, else "not-found"."""
    data = effect.data
    if data is None:
        data = read(effect.shard, effect.offset, effect.length, effect.digest)
    return (b"", NOT_FOUND) if data is None else (data, None)
