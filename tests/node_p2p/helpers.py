"""Shared helpers for the host tests: start N hosts on 127.0.0.1, poll for a condition with a deadline."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace

import trio

from node.p2p import Host, HostConfig, open_host


def seed(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


@asynccontextmanager
async def open_hosts(n: int, name: str = "host", **overrides: object) -> AsyncIterator[list[Host]]:
    async with AsyncExitStack() as stack:
        hosts = []
        for i in range(n):
            config = replace(HostConfig(seed=seed(f"{name}-{i}")), **overrides)
            hosts.append(await stack.enter_async_context(open_host(config)))
        yield hosts


async def wait_until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    with trio.move_on_after(timeout):
        while not pred():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def link(a: Host, b: Host) -> None:
    """a dials b and both see the connection."""
    await a.connect(b.listen_addrs()[0])
    await wait_until(lambda: a.peer_id in b.connected_peers(), what="inbound side to register")
