"""Pure units: varint framing against a fake stream, token bucket timing on trio's virtual clock."""

from __future__ import annotations

import pytest
import trio

from node.p2p import HostConfig
from node.p2p.framing import FrameError, encode_frame, encode_uvarint, read_frame
from node.p2p.ratelimit import TokenBucket


class FakeStream:
    """Serves a byte string in chunks of at most ``chunk`` bytes, then EOF (b"")."""

    def __init__(self, data: bytes, chunk: int = 3) -> None:
        self.data = data
        self.chunk = chunk

    async def read(self, n: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        take = min(self.chunk, len(self.data), n if n is not None else len(self.data))
        out, self.data = self.data[:take], self.data[take:]
        return out


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63])
async def test_varint_round_trip(value):
    payload = b"p" * min(value, 50)
    framed = encode_uvarint(value) + payload
    if value <= 50:
        assert await read_frame(FakeStream(framed), max_bytes=50) == payload
    else:
        with pytest.raises(FrameError) as info:
            await read_frame(FakeStream(framed), max_bytes=50)
        assert info.value.reason == "too_large"


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"", "eof"), (b"\xff" * 11, "bad_varint"), (encode_uvarint(10) + b"abc", "truncated"), (b"\x80", "truncated")],
)
async def test_malformed_frames(data, reason):
    with pytest.raises(FrameError) as info:
        await read_frame(FakeStream(data), max_bytes=1 << 20)
    assert info.value.reason == reason


async def test_frame_spanning_many_reads():
    payload = bytes(range(256)) * 40
    assert await read_frame(FakeStream(encode_frame(payload), chunk=7), max_bytes=len(payload)) == payload


async def test_token_bucket_burst_then_rate(autojump_clock):
    bucket = TokenBucket(rate=10.0, burst=5)
    start = trio.current_time()
    for _ in range(5):
        await bucket.acquire()
    assert trio.current_time() - start == pytest.approx(0.0)
    for _ in range(20):
        await bucket.acquire()
    assert trio.current_time() - start == pytest.approx(2.0, abs=1e-6)
    assert not bucket.try_acquire()
    await trio.sleep(1.0)
    assert bucket.try_acquire()


async def test_token_bucket_serves_waiters_in_order(autojump_clock):
    bucket = TokenBucket(rate=1.0, burst=1)
    order: list[int] = []

    async def worker(i: int) -> None:
        await bucket.acquire()
        order.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(worker, i)
            await trio.sleep(0.01)
    assert order == [0, 1, 2, 3]


def test_config_validation():
    with pytest.raises(ValueError):
        HostConfig(seed=b"short")
    with pytest.raises(ValueError):
        HostConfig(seed=b"\0" * 32, max_gossip_bytes=2_000_000)
    with pytest.raises(ValueError):
        HostConfig(seed=b"\0" * 32, gossip_degree=20)
