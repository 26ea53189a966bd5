"""Connections on the virtual network, as node/'s host makes them.

A dial takes `HANDSHAKE_TRIPS` one-way delays and then connects, or fails (the target is down or
unreachable, refuses us after a ban, or is at its connection limit); the dialling core hears
PeerConnected or DialFailed, and both sides hear PeerDisconnected when a link closes (open requests
on it fail). Like node/'s join loop, a peer with no links dials a few live peers from its
bootstrap list, and again `REJOIN_AFTER` s after it loses its last link.
"""

from __future__ import annotations

import bisect

from typing import TYPE_CHECKING

from swarm.io import Ban, Dial, DialFailed, Disconnect, PeerConnected, PeerDisconnected

if TYPE_CHECKING:
    from simulator.sim import Simulation

HANDSHAKE_TRIPS = 3  # one-way trips to connect: TCP, Noise, multistream/yamux
REJOIN_AFTER = 10.0  # like node/'s join loop: re-dial bootstrap peers while we have no links


class Links:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim

    def dial_effect(self, i: int, e: Dial) -> None:
        sim = self.sim
        j = sim.by_id.get(e.peer)
        if j is None:
            sim.trace.record(sim.loop.now, i, "dial", {"to": -1, "ok": False})
            sim.feed_later(sim.scenario.network.dial_timeout, i, DialFailed(e.peer, "unknown address"))
            return
        self.dial(i, j)

    def dial(self, i: int, j: int) -> None:
        """Peer i dials peer j (its core asked, or the runtime bootstraps)."""
        sim = self.sim
        target = sim.nodes[j]
        sim.trace.record(sim.loop.now, i, "dial", {"to": j})
        if j == i or j in sim.router.conns[i]:
            return
        if not target.up or not sim.net.reachable(i, j):
            sim.feed_later(sim.scenario.network.dial_timeout, i, DialFailed(target.peer_id, "timeout"))
            return
        rtt_part = sim.net.one_way(i, j)
        sim.loop.after(HANDSHAKE_TRIPS * rtt_part, self._establish, i, sim.nodes[i].incarnation, j,
                        target.incarnation)

    def _establish(self, i: int, inc_i: int, j: int, inc_j: int) -> None:
        sim = self.sim
        a, b = sim.nodes[i], sim.nodes[j]
        if not a.up or a.incarnation != inc_i:
            return
        why = ""
        if not b.up or b.incarnation != inc_j or not sim.net.reachable(i, j):
            why = "unreachable"
        elif i in b.banned:
            why = "refused"
        elif len(sim.router.conns[j]) >= sim.scenario.network.max_connections:
            why = "connection limit"
        if why:
            sim.trace.record(sim.loop.now, i, "dial-failed", {"to": j, "why": why})
            sim.feed(i, DialFailed(b.peer_id, why))
            return
        if j in sim.router.conns[i]:
            return
        sim.router.connected(i, j)
        sim.trace.record(sim.loop.now, i, "connect", {"to": j})
        sim.feed(i, PeerConnected(b.peer_id, (sim.addr(j),)))
        if b.up and a.up and j in sim.router.conns[i]:
            sim.feed(j, PeerConnected(a.peer_id, (sim.addr(i),)))

    def bootstrap(self, i: int) -> None:
        """Like `node/`'s join list: dial a few live peers while we have none."""
        sim = self.sim
        node = sim.nodes[i]
        if not node.up or sim.router.conns[i]:
            return
        k = sim.scenario.network.bootstrap
        if sim.net.partitioned:
            picks = node.rng.sample([j for j in sim.live_sorted if j != i and sim.net.reachable(i, j)], k)
        else:  # every live peer but us, as above, without building the list (10,000 peers start)
            live, skip = sim.live_sorted, bisect.bisect_left(sim.live_sorted, i)
            mine = skip < len(live) and live[skip] == i
            picks = [live[c + 1 if mine and c >= skip else c]
                     for c in node.rng.sample_positions(len(live) - mine, k)]
        for j in picks:
            self.dial(i, j)
        self._schedule_rejoin(i)

    def _schedule_rejoin(self, i: int) -> None:
        """At most one pending re-bootstrap per peer, `REJOIN_AFTER` s after it lost its last link."""
        sim = self.sim
        node = sim.nodes[i]
        if node.up and not node.rejoin_pending:
            node.rejoin_pending = True
            sim.loop.after(REJOIN_AFTER, self._rejoin, i, node.incarnation)

    def _rejoin(self, i: int, incarnation: int) -> None:
        sim = self.sim
        node = sim.nodes[i]
        if node.incarnation != incarnation:
            return
        node.rejoin_pending = False
        if node.up and not sim.router.conns[i]:
            self.bootstrap(i)

    def disconnect(self, i: int, e: Disconnect) -> None:
        sim = self.sim
        j = sim.by_id.get(e.peer)
        if j is not None:
            self.close(i, j, e.reason)

    def ban(self, i: int, e: Ban) -> None:
        sim = self.sim
        j = sim.by_id.get(e.peer)
        if j is None:
            return
        sim.nodes[i].banned.add(j)
        sim.trace.record(sim.loop.now, i, "ban", {"peer": j, "reason": e.reason})
        self.close(i, j, "banned")

    def close(self, i: int, j: int, reason: str, notify_self: bool = True) -> None:
        sim = self.sim
        if j not in sim.router.conns[i]:
            return
        sim.router.disconnected(i, j, closed_by_i=reason != "partition")
        sim.trace.record(sim.loop.now, i, "disconnect", {"peer": j, "reason": reason})
        sim.streams.fail_where(lambda req: {req.client, req.server} == {i, j}, "connection closed")
        if notify_self:
            sim.feed_later(0.0, i, PeerDisconnected(sim.nodes[j].peer_id))
        sim.feed_later(0.0, j, PeerDisconnected(sim.nodes[i].peer_id))
        if not sim.router.conns[j]:
            self._schedule_rejoin(j)
        if notify_self and not sim.router.conns[i]:
            self._schedule_rejoin(i)
