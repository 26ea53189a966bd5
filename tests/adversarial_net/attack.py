"""Run an attack while an honest peer keeps asking the victim for things, and measure both sides."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from node.p2p import Host

STATUS = "/test/status/1"
HONEST_ASKS = (("/swarm/sync/1", b"task ids"), ("/swarm/blob/1", b"\x11" * 32), ("/swarm/shard/2", b"\x22" * 36))


async def status(client: Host, victim_id: str) -> dict[str, Any]:
    """The victim's counters; failing to answer within 2 s fails the test."""
    with trio.fail_after(2):
        return json.loads(await client.request(victim_id, STATUS, b"", timeout=2, max_response_bytes=1 << 20))


@dataclass
class Served:
    asked: int = 0
    answered: int = 0
    worst_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"honest requests answered {self.answered}/{self.asked}, slowest {self.worst_s:.2f}s"


async def while_attacking(attack: Callable[[], Awaitable[None]], honest: Host, victim_id: str,
                          min_asks: int = 6) -> Served:
    """Run ``attack`` and, until it ends (and at least ``min_asks`` times), one honest request every 0.1 s."""
    served = Served()
    done = trio.Event()

    async def run_attack() -> None:
        try:
            await attack()
        finally:
            done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_attack)
        while not done.is_set() or served.asked < min_asks:
            protocol, data = HONEST_ASKS[served.asked % len(HONEST_ASKS)]
            served.asked += 1
            start = trio.current_time()
            try:
                with trio.fail_after(2):
                    answer = await honest.request(victim_id, protocol, data, timeout=2)
                if answer == b"ok:" + data:
                    served.answered += 1
                else:
                    served.failures.append(f"{protocol}: wrong answer")
            except Exception as exc:  # noqa: BLE001 - counted, asserted by the test
                served.failures.append(f"{protocol}: {exc!r}")
            served.worst_s = max(served.worst_s, trio.current_time() - start)
            await trio.sleep(0.1)
    return served
