"""A victim node in its own process, so its memory is its own: ``python -m tests.adversarial_net.victim NAME``.

It runs the guarded host (node/p2p) with small handlers on the swarm's request protocols and prints
its multiaddr on the first stdout line. ``/test/status/1`` answers with the host's counters, the
penalty events it surfaced (what the node would feed to its reputation ledger), its RSS and its open
file descriptors, so a test can check "still answers within 2 s" and "stays under a memory (and fd)
bound" from outside.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import trio

from node.p2p import HostConfig, open_host

STATUS = "/test/status/1"
SWARM_PROTOCOLS = ("/swarm/sync/1", "/swarm/blob/1", "/swarm/shard/2")


def rss_kb() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


async def main(name: str) -> None:
    # The host blocks by itself here, standing in for the node's reputation ledger that bans on the
    # penalty events in a real node (Host.on_penalty); the events are reported either way.
    config = HostConfig(seed=hashlib.sha256(name.encode()).digest(), penalty_block_points=100.0)
    async with open_host(config) as host:
        events: list[tuple[str, str]] = []
        host.on_penalty(lambda peer, reason: events.append((peer, reason)))

        async def answer(peer: str, data: bytes) -> bytes:
            return b"ok:" + data

        async def status(peer: str, data: bytes) -> bytes:
            return json.dumps({"stats": host.stats.snapshot(), "rss_kb": rss_kb(), "penalty_events": events,
                               "connected": host.connected_peers(),
                               "fds": len(os.listdir("/proc/self/fd"))}).encode()

        for protocol in SWARM_PROTOCOLS:
            host.set_request_handler(protocol, answer)
        host.set_request_handler(STATUS, status)
        print(f"{host.listen_addrs()[0]}/p2p/{host.peer_id}", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    try:
        trio.run(main, sys.argv[1])
    except KeyboardInterrupt:
        pass
