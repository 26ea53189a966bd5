"""Gossipsub messages: publishing, the seen-cache, eager push to the mesh and arrival at a peer.

A part of `GossipRouter` (simulator/gossip_model.py), which owns the per-peer state these methods
read and change. A mixin, not an object of its own, because the hot paths keep plain attribute
access on one object and every call stays in the order that makes the trace byte-identical.
"""

from __future__ import annotations

from simulator.gossip_types import PHASES, Msg, message_id
from simulator.network import FRAME_OVERHEAD


class EagerPush:
    """A message's way through the swarm: publish or inject, send on a link, arrive, validate, forward."""

    def publish(self, i: int, topic: str, data: bytes) -> Msg:
        """The peer's own message (its core's Publish effect)."""
        msg = self._record(topic, data, i)
        if i in msg.seen:
            return msg  # gossipsub refuses to publish a duplicate
        msg.seen.add(i)
        self._cache(i, msg)
        if self.cfg.flood_publish or topic not in self.subs[i]:
            targets = [j for j in sorted(self.conns[i]) if topic in self.subs[j]]
            if topic not in self.subs[i]:
                self._touch_fanout(i, topic)
        else:
            targets = sorted(self.mesh[i].get(topic, ()))
        for j in targets:
            self._send(i, j, msg)
        return msg

    def inject(self, i: int, topic: str, data: bytes, targets: list[int] | None = None) -> Msg:
        """An adversary pushes raw bytes to its neighbours, bypassing its own core and seen-cache."""
        msg = self._record(topic, data, i)
        for j in (sorted(self.conns[i]) if targets is None else targets):
            if j in self.conns[i]:
                self._send(i, j, msg)
        return msg

    def _record(self, topic: str, data: bytes, origin: int) -> Msg:
        mid = message_id(data)
        msg = self.msgs.get(mid)
        if msg is None or msg.topic != topic:
            msg = self.msgs[mid] = Msg(mid, topic, data, origin, self.loop.now)
            self.loop.after(self.cfg.seen_ttl, self._expire, mid, msg)
        return msg

    def _expire(self, mid: bytes, msg: Msg) -> None:
        if self.msgs.get(mid) is msg:
            del self.msgs[mid]

    def _touch_fanout(self, i: int, topic: str) -> None:
        self.eligible[i].clear()
        peers = self.fanout[i].setdefault(topic, set())
        self.fanout_last[i][topic] = self.loop.now
        peers.intersection_update(self.conns[i])
        if len(peers) < self.cfg.D:
            candidates = [j for j in sorted(self.conns[i]) if j not in peers and topic in self.subs[j]]
            peers.update(self.rng.sample(candidates, self.cfg.D - len(peers)))
        self._activate(i)

    def _send(self, i: int, j: int, msg: Msg) -> None:
        # Network.frame inlined: this runs for every copy of every message.
        net = self.net
        size = msg.size + FRAME_OVERHEAD
        up, down = net.up_Bps[i], net.down_Bps[j]
        now = self.loop.now
        start = net.up_free[i]
        if start < now:
            start = now
        done = start + size / (up if up < down else down)
        net.up_free[i] = done
        net.bytes_out[i] += size
        if net.side[i] != net.side[j]:
            if j not in msg.seen:
                self.on_drop(j, msg, i, "partition")
            return
        if j in msg.seen:
            net.bytes_in[j] += size
            self.heard[j][i] = now  # not handed to j's core, but j's transport heard i
            return  # a duplicate: it only costs bytes
        if net.loss > 0.0 and net.rng.random() < net.loss:
            net.frames_lost += 1
            self.on_drop(j, msg, i, "lost")
            return
        net.bytes_in[j] += size
        arrival = done + net.latency[net.region[i]][net.region[j]] + net.extra_delay[j]
        best = msg.best.get(j)
        if best is not None and best <= arrival:
            return  # an earlier copy is already on its way
        msg.best[j] = arrival
        self.loop.at(arrival, self._arrive, j, i, msg, arrival)

    def _arrive(self, j: int, i: int, msg: Msg, arrival: float) -> None:
        seen = msg.seen
        if j in seen or msg.best.get(j) != arrival:
            return
        del msg.best[j]
        if i not in self.conns[j]:
            notice = self.closing[j].get(i)
            if notice is None or arrival > notice:  # sent after the close, or j closed the link itself
                self.on_drop(j, msg, i, "link-closed")
                return
        seen.add(j)
        if not self.validate(j, msg, i):
            return
        cache = self.mcache[j]
        if not cache:
            self._active[j % PHASES].add(j)
        cache.append((self.loop.now, msg))
        if self.withhold[j]:
            return
        mesh = self.mesh[j].get(msg.topic)
        if mesh:
            self._forward(j, i, msg, sorted(mesh))

    def _forward(self, j: int, i: int, msg: Msg, targets: list[int]) -> None:
        """Eager push to the mesh: `_send` for each target but `i` (the sender) and the origin, inlined
        (this is the innermost loop of a big run; same arithmetic in the same order)."""
        net, loop = self.net, self.loop
        now = loop.now
        size = msg.size + FRAME_OVERHEAD
        up, side_j, lat_j, origin = net.up_Bps[j], net.side[j], net.latency[net.region[j]], msg.origin
        down_Bps, side, region, extra, bytes_in = net.down_Bps, net.side, net.region, net.extra_delay, net.bytes_in
        seen, best, heard = msg.seen, msg.best, self.heard
        free = net.up_free[j]
        sent = 0
        for k in targets:
            if k == i or k == origin:
                continue
            down = down_Bps[k]
            start = free if free >= now else now
            free = start + size / (up if up < down else down)
            sent += size
            if side[k] != side_j:
                if k not in seen:
                    net.up_free[j] = free
                    self.on_drop(k, msg, j, "partition")
                continue
            if k in seen:
                bytes_in[k] += size
                heard[k][j] = now  # not handed to k's core, but k's transport heard j
                continue  # a duplicate: it only costs bytes
            if net.loss > 0.0 and net.rng.random() < net.loss:
                net.frames_lost += 1
                net.up_free[j] = free
                self.on_drop(k, msg, j, "lost")
                continue
            bytes_in[k] += size
            arrival = free + lat_j[region[k]] + extra[k]
            earlier = best.get(k)
            if earlier is not None and earlier <= arrival:
                continue  # an earlier copy is already on its way
            best[k] = arrival
            loop.at(arrival, self._arrive, k, j, msg, arrival)
        net.up_free[j] = free
        net.bytes_out[j] += sent

    def _cache(self, i: int, msg: Msg) -> None:
        cache = self.mcache[i]
        if not cache:
            self._activate(i)
        cache.append((self.loop.now, msg))

