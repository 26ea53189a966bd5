"""Request/response streams: round trips (incl. 16 MiB), caps, timeouts, handler failures."""

from __future__ import annotations

import hashlib

import pytest
import trio

from node.p2p import RequestError

from .helpers import link, open_hosts

ECHO = "/swarm/test-echo/1"  # no request cap of its own: the swarm protocols have small ones (HostConfig.request_caps)
SLOW = "/swarm/test-slow/1"


async def echo(peer: str, data: bytes) -> bytes:
    return hashlib.sha256(data).digest() + data


async def test_round_trip_small_and_16_mib():
    payload = hashlib.sha256(b"seed").digest() * (16 * 1024 * 1024 // 32)  # 16 MiB, cheap to build
    with trio.fail_after(30):
        async with open_hosts(2) as (a, b):
            callers: list[str] = []

            async def handler(peer: str, data: bytes) -> bytes:
                callers.append(peer)
                return await echo(peer, data)

            b.set_request_handler(ECHO, handler)
            await link(a, b)
            assert await a.request(b.peer_id, ECHO, b"hi") == hashlib.sha256(b"hi").digest() + b"hi"
            assert await a.request(b.peer_id, ECHO, b"") == hashlib.sha256(b"").digest()
            resp = await a.request(b.peer_id, ECHO, payload, timeout=20)
            assert resp[:32] == hashlib.sha256(payload).digest() and resp[32:] == payload
            assert callers == [a.peer_id] * 3
            assert b.stats.requests_served == 3 and b.stats.bytes_in[a.peer_id] == 2 + len(payload)


async def test_timeout_then_host_keeps_serving():
    with trio.fail_after(30):
        async with open_hosts(2) as (a, b):
            async def slow(peer: str, data: bytes) -> bytes:
                await trio.sleep(10)
                return data

            b.set_request_handler(SLOW, slow)
            b.set_request_handler(ECHO, echo)
            await link(a, b)
            start = trio.current_time()
            with pytest.raises(RequestError) as info:
                await a.request(b.peer_id, SLOW, b"x", timeout=0.5)
            assert info.value.reason == "timeout"
            assert trio.current_time() - start < 2.0
            assert (await a.request(b.peer_id, ECHO, b"y"))[32:] == b"y"
            assert a.stats.request_errors["timeout"] == 1


async def test_failures_have_reasons():
    with trio.fail_after(30):
        async with open_hosts(2) as (a, b):
            async def broken(peer: str, data: bytes) -> bytes:
                raise ValueError("handler bug")

            async def not_bytes(peer: str, data: bytes) -> bytes:
                return "a string"  # type: ignore[return-value]

            b.set_request_handler("/swarm/broken/1", broken)
            b.set_request_handler("/swarm/str/1", not_bytes)
            b.set_request_handler(ECHO, echo)

            with pytest.raises(RequestError) as info:
                await a.request(b.peer_id, ECHO, b"x")
            assert info.value.reason == "not_connected"  # requests never dial implicitly
            await link(a, b)

            for proto in ("/swarm/broken/1", "/swarm/str/1"):
                with pytest.raises(RequestError) as info:
                    await a.request(b.peer_id, proto, b"x")
                assert info.value.reason == "reset", info.value
            assert b.stats.requests_failed["handler_error"] == 2

            with pytest.raises(RequestError) as info:
                await a.request(b.peer_id, "/swarm/unknown/1", b"x")
            assert info.value.reason == "open_failed"

            with pytest.raises(RequestError) as info:
                await a.request(b.peer_id, ECHO, b"z" * 100, max_response_bytes=64)
            assert info.value.reason == "too_large"

            with pytest.raises(RequestError) as info:
                await a.request("not-a-peer-id", ECHO, b"x")
            assert info.value.reason == "bad_peer_id"

            assert (await a.request(b.peer_id, ECHO, b"ok"))[32:] == b"ok"


async def test_server_caps_request_size():
    with trio.fail_after(30):
        async with open_hosts(1, "small", max_request_bytes=1000) as (small,), open_hosts(1, "big") as (big,):
            small.set_request_handler(ECHO, echo)
            await link(big, small)
            with pytest.raises(RequestError) as info:
                await big.request(small.peer_id, ECHO, b"x" * 5000)
            assert info.value.reason == "reset"
            assert small.stats.requests_failed["too_large"] == 1
            with pytest.raises(RequestError) as info:
                await small.request(big.peer_id, ECHO, b"x" * 1001)  # refused locally before sending
            assert info.value.reason == "too_large"


async def test_a_reply_reports_once_that_its_answer_was_written():
    # The shard exchange frees an upload slot on `done`: it must come once, after the answer was
    # written (not when the handler returns), and also when the answer could not be sent.
    from node.p2p.reqresp import Reply

    big = b"\1" * (4 * 1024 * 1024)
    with trio.fail_after(30):
        async with open_hosts(2) as (a, b):
            log: list[str] = []

            async def answer(peer: str, data: bytes):
                log.append("returned")
                return Reply(big if data == b"big" else 42, lambda: log.append("done"))  # 42: not bytes

            b.set_request_handler(ECHO, answer)
            await link(a, b)
            assert await a.request(b.peer_id, ECHO, b"big", timeout=20) == big
            with trio.fail_after(5):
                while log.count("done") < 1:
                    await trio.sleep(0.01)
            assert log == ["returned", "done"]
            with pytest.raises(RequestError):
                await a.request(b.peer_id, ECHO, b"bad", timeout=5)
            with trio.fail_after(5):
                while log.count("done") < 2:
                    await trio.sleep(0.01)
            await trio.sleep(0.1)
            assert log == ["returned", "done", "returned", "done"]
            assert b.stats.requests_served == 1 and b.stats.requests_failed["handler_error"] == 1
