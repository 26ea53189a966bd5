"""Benchmark: py-libp2p 0.8.1's QUIC transport against TCP (Noise + yamux) under our guarded host, on
127.0.0.1, in one run. JSON out.

For each transport: connection set-up time (dial to a usable connection: `Host.connect`, median of
``--connects`` fresh hosts) and throughput of one request/response of ``--size-mb`` MB
(`Host.request` on a `/bench/echo/1` handler answering with the size; median of ``--rounds``),
plus the through-a-relay case for TCP (circuit relay v2 via node/p2p/autorelay.py) since that is what
a NATed peer's bulk bytes ride until DCUtR upgrades the link. A calibration (a 20M-iteration Python
loop) is recorded so figures from different machines compare.

Run: `python bench/transports.py [--size-mb 4] [--rounds 3] [--connects 5] [--skip-relay]`
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import statistics
import sys
import time
from contextlib import AsyncExitStack

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from node.p2p import HostConfig, ReachConfig, open_host  # noqa: E402

ECHO = "/bench/echo/1"
NO_REACH = ReachConfig(enabled=False)


def seed(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def calibration() -> float:
    start = time.perf_counter()
    n = 0
    for _ in range(20_000_000):
        n += 1
    return round(time.perf_counter() - start, 3)


async def answer(peer: str, data: bytes) -> bytes:
    return str(len(data)).encode()


def addr_of(host, quic: bool) -> str:
    return next(a for a in host.listen_addrs() if ("/quic" in a) == quic)


async def measure(quic: bool, size: int, rounds: int, connects: int) -> dict:
    tag = "quic" if quic else "tcp"
    setup: list[float] = []
    async with open_host(HostConfig(seed=seed(f"{tag}-server"), quic=quic)) as server:
        server.set_request_handler(ECHO, answer, max_request_bytes=size + 1024)
        for i in range(connects):
            async with open_host(HostConfig(seed=seed(f"{tag}-client-{i}"), quic=quic)) as client:
                start = time.perf_counter()
                await client.connect(addr_of(server, quic), timeout=30)
                setup.append(time.perf_counter() - start)
        async with open_host(HostConfig(seed=seed(f"{tag}-client"), quic=quic)) as client:
            await client.connect(addr_of(server, quic), timeout=30)
            rates, errors = [], []
            for _ in range(rounds):
                start = time.perf_counter()
                try:
                    reply = await client.request(server.peer_id, ECHO, os.urandom(size), timeout=300)
                    assert int(reply) == size
                    rates.append(size / (time.perf_counter() - start) / 1e6)
                except Exception as exc:  # noqa: BLE001 - recorded: the point is to find out
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
    return {"transport": tag, "setup_s_median": round(statistics.median(setup), 4),
            "setup_s": [round(s, 4) for s in setup],
            "throughput_mb_s_median": round(statistics.median(rates), 2) if rates else None,
            "throughput_mb_s": [round(r, 2) for r in rates], "errors": errors}


async def measure_relayed(size: int, rounds: int) -> dict:
    """A request through a circuit (relay on this machine): its cost over a direct link."""
    from node.p2p import RelayLimits

    limits = RelayLimits(circuit_bytes=4 * size + (1 << 20), reservation_bytes=64 * size + (1 << 20))
    reach = ReachConfig(unknown_interval=0.2, min_interval=0.1)
    async with AsyncExitStack() as stack:
        relay = await stack.enter_async_context(open_host(HostConfig(seed=seed("r"), nat=True, reach=reach,
                                                                     relay_service=True, relay_limits=limits)))
        helper = await stack.enter_async_context(open_host(HostConfig(seed=seed("h"), nat=True, reach=reach)))
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        natted = await stack.enter_async_context(open_host(HostConfig(
            seed=seed("n"), nat=True, reach=reach, announce_addrs=(f"/ip4/127.0.0.1/tcp/{closed}",))))
        client = await stack.enter_async_context(open_host(HostConfig(seed=seed("c"), nat=True, reach=reach)))
        for host in (relay, helper, natted, client):
            host.nat.dcutr.auto_drive = False  # measure the circuit, not its upgrade
        natted.set_request_handler(ECHO, answer, max_request_bytes=size + 1024)
        await natted.connect(relay.listen_addrs()[0])
        await natted.connect(helper.listen_addrs()[0])
        with trio.fail_after(30):
            while not natted.reachability()["relayed_addrs"]:
                await trio.sleep(0.1)
        start = time.perf_counter()
        await client.connect(natted.reachability()["relayed_addrs"][0])
        setup = time.perf_counter() - start
        rates = []
        for _ in range(rounds):
            start = time.perf_counter()
            reply = await client.request(natted.peer_id, ECHO, os.urandom(size), timeout=300)
            assert int(reply) == size
            rates.append(size / (time.perf_counter() - start) / 1e6)
    return {"transport": "tcp-via-relay", "setup_s_median": round(setup, 4),
            "throughput_mb_s_median": round(statistics.median(rates), 2), "throughput_mb_s": [round(r, 2) for r in rates]}


async def main(args: argparse.Namespace) -> dict:
    size = int(args.size_mb * (1 << 20))
    out = {"bench": "transports", "size_mb": args.size_mb, "rounds": args.rounds, "connects": args.connects,
           "machine": platform.node(), "cpus": os.cpu_count(), "calibration_20m_loop_s": calibration(),
           "results": []}
    for quic in (False, True):
        print(f"measuring {'quic' if quic else 'tcp'} ...", file=sys.stderr)
        try:
            out["results"].append(await measure(quic, size, args.rounds, args.connects))
        except Exception as exc:  # noqa: BLE001 - a transport that does not work is a result too
            out["results"].append({"transport": "quic" if quic else "tcp", "failed": f"{type(exc).__name__}: {exc}"})
    if not args.skip_relay:
        print("measuring tcp through a relay ...", file=sys.stderr)
        out["results"].append(await measure_relayed(size, args.rounds))
    by = {r["transport"]: r for r in out["results"]}
    tcp, quic = by.get("tcp", {}), by.get("quic", {})
    if tcp.get("throughput_mb_s_median") and quic.get("throughput_mb_s_median"):
        out["quic_over_tcp_throughput"] = round(quic["throughput_mb_s_median"] / tcp["throughput_mb_s_median"], 3)
        out["quic_over_tcp_setup"] = round(quic["setup_s_median"] / tcp["setup_s_median"], 2)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connects", type=int, default=5)
    parser.add_argument("--skip-relay", action="store_true")
    logging.disable(logging.ERROR)  # the library's ERROR lines for failed dial-backs and closed streams
    print(json.dumps(trio.run(main, parser.parse_args()), indent=2))
