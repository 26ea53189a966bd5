"""Where peers are and what their links can do: regions, latency, bandwidth, loss, partitions.

Two kinds of traffic share a peer's links:

* Gossip frames (messages, IHAVE/IWANT/GRAFT/PRUNE control) are small; each copy is serialised FIFO on
  the sender's uplink at the bottleneck rate min(sender up, receiver down) and arrives one one-way
  latency after its last byte leaves. Receive-side contention of small frames is not modelled.
* Streams (request/response bodies: blobs, shards, task sync) are flows sharing both ends max-min
  fairly (`flows.FlowScheduler`).

Loss applies to gossip frames (a frame is dropped with probability `loss`); streams run over a
reliable transport, which is what libp2p's yamux-over-TCP gives. A partition splits peers into sides;
nothing crosses it until it heals, and links across it are cut when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.rng import Rng

DEFAULT_REGIONS = ("eu", "na", "asia", "sa")
# One-way latency in milliseconds between regions (within a region: a few ms).
DEFAULT_LATENCY_MS = (
    (2.0, 45.0, 120.0, 110.0),
    (45.0, 2.0, 90.0, 70.0),
    (120.0, 90.0, 2.0, 220.0),
    (110.0, 70.0, 220.0, 2.0),
)
FRAME_OVERHEAD = 64  # bytes of framing per gossip frame (protobuf RPC, yamux, noise)


@dataclass
class LinkProfile:
    up_bps: float  # bits per second
    down_bps: float


class Network:
    def __init__(self, regions: tuple[str, ...], latency_ms: tuple[tuple[float, ...], ...], loss: float,
                 rng: Rng) -> None:
        self.regions = regions
        self.latency = [[ms / 1000.0 for ms in row] for row in latency_ms]
        self.loss = loss
        self.rng = rng
        # Per peer index (lists grow as peers are created):
        self.region: list[int] = []
        self.up_Bps: list[float] = []  # bytes/s, after any slow-peer factor
        self.down_Bps: list[float] = []
        self.base: list[LinkProfile] = []
        self.up_free: list[float] = []  # when the peer's uplink finishes its queued gossip frames
        self.side: list[int] = []  # partition side; 0 when no partition is active
        self.extra_delay: list[float] = []  # slow peers: added processing delay per received frame
        self.bytes_out: list[int] = []
        self.bytes_in: list[int] = []
        self.frames_lost = 0
        self.partitioned = False

    def add_peer(self, region: int, link: LinkProfile) -> int:
        self.region.append(region)
        self.base.append(link)
        self.up_Bps.append(link.up_bps / 8.0)
        self.down_Bps.append(link.down_bps / 8.0)
        self.up_free.append(0.0)
        self.side.append(0)
        self.extra_delay.append(0.0)
        self.bytes_out.append(0)
        self.bytes_in.append(0)
        return len(self.region) - 1

    def set_slow(self, peer: int, factor: float, extra_delay: float) -> None:
        link = self.base[peer]
        self.up_Bps[peer] = link.up_bps / 8.0 * factor
        self.down_Bps[peer] = link.down_bps / 8.0 * factor
        self.extra_delay[peer] = extra_delay

    def one_way(self, a: int, b: int) -> float:
        return self.latency[self.region[a]][self.region[b]]

    def reachable(self, a: int, b: int) -> bool:
        return self.side[a] == self.side[b]

    def frame(self, now: float, src: int, dst: int, size: int) -> float:
        """Queue one gossip frame; returns its arrival time at `dst`, or -1.0 if lost or cut off."""
        size += FRAME_OVERHEAD
        up = self.up_Bps[src]
        down = self.down_Bps[dst]
        start = self.up_free[src]
        if start < now:
            start = now
        done = start + size / (up if up < down else down)
        self.up_free[src] = done
        self.bytes_out[src] += size
        if self.side[src] != self.side[dst]:
            return -1.0
        if self.loss > 0.0 and self.rng.random() < self.loss:
            self.frames_lost += 1
            return -1.0
        self.bytes_in[dst] += size
        return done + self.latency[self.region[src]][self.region[dst]] + self.extra_delay[dst]

    def set_partition(self, sides: dict[int, int] | None) -> None:
        """Put peers on sides (peer index -> side); None heals."""
        for i in range(len(self.side)):
            self.side[i] = 0
        self.partitioned = bool(sides)
        if sides:
            for peer, side in sides.items():
                self.side[peer] = side
