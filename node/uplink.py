"""An emulated uplink: shard answers leave at most `rate` bytes per second, one after another.

Off by default (`--upload-mbps`). On one machine every peer shares the same CPU and loopback, so a
localhost swarm measures Noise + yamux in Python, not the protocol (node/shardbench.py). Giving each
peer process its own slow uplink, like the simulator's per-peer link (simulator/swarming.py), makes
the protocol the bottleneck again as long as the sum of all uplinks stays below what the cores can
encrypt. A FIFO link: each answer waits for the ones before it, then for its own size / rate.
"""

from __future__ import annotations

import trio


class Uplink:
    def __init__(self, mbps: float) -> None:
        if not mbps > 0:
            raise ValueError("an uplink needs a positive rate (Mbit/s)")
        self.bytes_per_s = mbps * 1e6 / 8
        self._free_at = 0.0  # trio clock: when what is already queued has left
        self.bytes_sent = 0

    async def send(self, n: int) -> None:
        """Return when `n` bytes queued now would have left the link."""
        now = trio.current_time()
        self._free_at = max(now, self._free_at) + n / self.bytes_per_s
        self.bytes_sent += n
        await trio.sleep_until(self._free_at)
