"""Length-prefixed frames (unsigned LEB128 varint + payload) on a libp2p stream, with hard size caps.

Why our own reader: the length must be checked *before* any payload is buffered, otherwise a peer that
announces a 2^63-byte frame makes us allocate or wait forever. The varint is limited to 10 bytes and the
announced length to ``max_bytes``; the caller puts a deadline around the whole read (slowloris).
"""

from __future__ import annotations

from typing import Protocol

MAX_VARINT_BYTES = 10  # enough for any uint64; longer prefixes are garbage by definition


class FrameError(Exception):
    """The peer sent a malformed, oversized, or truncated frame."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


class ReadableStream(Protocol):
    async def read(self, n: int | None = None) -> bytes: ...


class WritableStream(Protocol):
    async def write(self, data: bytes) -> None: ...


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_frame(payload: bytes) -> bytes:
    return encode_uvarint(len(payload)) + payload


async def _read_exact(stream: ReadableStream, n: int, mid_frame: bool) -> bytes:
    """Read exactly n bytes. Running out is 'eof' before a frame starts, 'truncated' inside one."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        try:
            chunk = await stream.read(n - got)
        except Exception as exc:  # libp2p raises StreamEOF/StreamReset/StreamError subclasses
            chunk = b""
            cause: BaseException | None = exc
        else:
            cause = None
        if not chunk:
            reason = "truncated" if (got or mid_frame) else "eof"
            raise FrameError(reason, f"got {got} of {n} bytes" + (f" ({type(cause).__name__})" if cause else "")) from cause
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


async def read_uvarint(stream: ReadableStream) -> int:
    value = 0
    for i in range(MAX_VARINT_BYTES):
        byte = (await _read_exact(stream, 1, mid_frame=i > 0))[0]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value
    raise FrameError("bad_varint", f"length prefix longer than {MAX_VARINT_BYTES} bytes")


async def read_frame(stream: ReadableStream, max_bytes: int) -> bytes:
    """Read one frame; raise FrameError('too_large') before buffering anything above ``max_bytes``."""
    length = await read_uvarint(stream)
    if length > max_bytes:
        raise FrameError("too_large", f"frame of {length} bytes exceeds cap {max_bytes}")
    if length == 0:
        return b""
    return await _read_exact(stream, length, mid_frame=True)


async def read_payload(stream: ReadableStream, length: int) -> bytes:
    """The body of a frame whose length prefix was already read (and checked) with read_uvarint."""
    return await _read_exact(stream, length, mid_frame=True) if length else b""


async def write_frame(stream: WritableStream, payload: bytes) -> int:
    """Write one frame; returns bytes put on the wire."""
    frame = encode_frame(payload)
    await stream.write(frame)
    return len(frame)
