"""The item-5 attacker in its own process: ``python -m tests.adversarial_net.silent_sockets IP PORT N``.

Opens N plain TCP connections to IP:PORT, never writes a byte, and re-opens each one a second after
the victim closes it. Prints ``ready`` once N have been opened; on SIGTERM prints its counts as JSON
and exits. Its own process, so its CPU is not the honest peer's (a real attacker is another machine).
"""

from __future__ import annotations

import json
import signal
import sys

import trio


async def hold(ip: str, port: int, counts: dict[str, int]) -> None:
    while True:
        try:
            sock = await trio.open_tcp_stream(ip, port)
        except OSError:
            counts["refused"] += 1
            await trio.sleep(1)
            continue
        counts["opened"] += 1
        try:
            while await sock.receive_some(4096):
                pass  # the victim's multistream header, if any; b"" = the victim closed it
        except trio.BrokenResourceError:
            pass
        finally:
            counts["closed_by_victim"] += 1
            await sock.aclose()
        await trio.sleep(1)


async def main(ip: str, port: int, n: int) -> None:
    counts = {"opened": 0, "refused": 0, "closed_by_victim": 0}
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(hold, ip, port, counts)
            while counts["opened"] < n:
                await trio.sleep(0.02)
            print("ready", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
