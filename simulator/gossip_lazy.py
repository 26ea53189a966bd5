"""Gossipsub's heartbeat and lazy gossip: fanout expiry, message-cache shifts, IHAVE and IWANT.

A part of `GossipRouter` (simulator/gossip_model.py), which owns the per-peer state these methods
read and change. A mixin, not an object of its own, because the hot paths keep plain attribute
access on one object and every call stays in the order that makes the trace byte-identical.
"""

from __future__ import annotations

from simulator.gossip_types import IHAVE_ID_BYTES, PHASES, Msg
from simulator.network import FRAME_OVERHEAD


class LazyGossip:
    """The heartbeat in PHASES groups; each active peer offers recent ids (IHAVE), a peer lacking one asks
    (IWANT) and is served from the message cache."""

    def _heartbeat_phase(self) -> None:
        phase = self._phase
        self._phase = (phase + 1) % PHASES
        self.loop.after(self.cfg.heartbeat / PHASES, self._heartbeat_phase)
        active = self._active[phase]
        if not active:
            return
        self._active[phase] = keep = set()  # peers activated while this phase runs land here too
        for i in sorted(active):
            if self._heartbeat(i):
                keep.add(i)

    def _heartbeat(self, i: int) -> bool:
        """One peer's heartbeat; True if it has work at its next heartbeat too."""
        cfg, now = self.cfg, self.loop.now
        if self.dirty[i]:
            self.dirty[i] = self._maintain(i)
        if self.fanout[i]:
            for topic in sorted(self.fanout[i]):
                if now - self.fanout_last[i].get(topic, now) > cfg.fanout_ttl:
                    del self.fanout[i][topic]
                    self.eligible[i].clear()
                    self.fanout_last[i].pop(topic, None)
        cache = self.mcache[i]
        if cache:
            horizon = now - cfg.history_length * cfg.heartbeat
            while cache and cache[0][0] <= horizon:
                cache.popleft()
            gossip_from = now - cfg.history_gossip * cfg.heartbeat
            if cache and cache[-1][0] > gossip_from and not self.withhold[i]:
                # The cache is in time order: the messages to offer are its tail.
                recent = []
                for entry in reversed(cache):
                    if entry[0] <= gossip_from:
                        break
                    recent.append(entry[1])
                by_topic: dict[str, list[Msg]] = {}
                for msg in reversed(recent):
                    by_topic.setdefault(msg.topic, []).append(msg)
                for topic in sorted(by_topic):
                    self._emit_ihave(i, topic, by_topic[topic][-cfg.max_ihave_length:])
        return self.dirty[i] or bool(cache) or bool(self.fanout[i])

    def _emit_ihave(self, i: int, topic: str, msgs: list[Msg]) -> None:
        cached = self.eligible[i]
        eligible = cached.get(topic)
        if eligible is None:
            mesh = self.mesh[i].get(topic, ())
            fanout = self.fanout[i].get(topic, ())
            subs = self.subs
            eligible = cached[topic] = [j for j in sorted(self.conns[i])
                                        if j not in mesh and j not in fanout and topic in subs[j]]
        if not eligible:
            return
        n = max(self.cfg.Dlazy, int(self.cfg.gossip_factor * len(eligible)))
        targets = eligible if n >= len(eligible) else self.rng.sample(eligible, n)
        size = 16 + IHAVE_ID_BYTES * len(msgs) + FRAME_OVERHEAD
        self.control_frames += len(targets)
        # Network.frame, inlined: one IHAVE per target, queued on i's uplink.
        net, loop = self.net, self.loop
        now = loop.now
        up, side_i, lat_i = net.up_Bps[i], net.side[i], net.latency[net.region[i]]
        down_Bps, side, region, extra, bytes_in = net.down_Bps, net.side, net.region, net.extra_delay, net.bytes_in
        heard = self.heard
        free = net.up_free[i]
        # Hoisted out of the per-target loop (it runs for every IHAVE of every peer each heartbeat): with
        # no partition every side matches, without loss nothing is drawn, and a lone offered message (the
        # usual case) is tested once per target instead of through a list built for it; `_on_ihave` only
        # reads the list it is given, so targets lacking every message share `msgs`.
        partitioned, lossy, lone = net.partitioned, net.loss > 0.0, msgs[0].seen if len(msgs) == 1 else None
        for j in targets:
            down = down_Bps[j]
            start = free if free >= now else now
            free = start + size / (up if up < down else down)
            if partitioned and side[j] != side_i:
                continue
            if lossy and net.rng.random() < net.loss:
                net.frames_lost += 1
                continue
            bytes_in[j] += size
            heard[j][i] = now  # an IHAVE: j's transport heard i (its core is not handed it)
            if lone is not None:
                if j not in lone:
                    loop.at(free + lat_i[region[j]] + extra[j], self._on_ihave, j, i, msgs)
                continue
            missing = [m for m in msgs if j not in m.seen]
            if missing:
                loop.at(free + lat_i[region[j]] + extra[j], self._on_ihave, j, i,
                        msgs if len(missing) == len(msgs) else missing)
        net.up_free[i] = free
        net.bytes_out[i] += size * len(targets)

    def _on_ihave(self, j: int, i: int, msgs: list[Msg]) -> None:
        if i not in self.conns[j]:
            return
        want = [m for m in msgs if j not in m.seen and j not in m.best and self.msgs.get(m.mid) is m]
        if not want:
            return
        arrival = self.net.frame(self.loop.now, j, i, 16 + IHAVE_ID_BYTES * len(want))
        self.control_frames += 1
        if arrival >= 0.0:
            self.loop.at(arrival, self._on_iwant, i, j, want)

    def _on_iwant(self, i: int, j: int, msgs: list[Msg]) -> None:
        if j not in self.conns[i] or self.withhold[i]:
            return
        held = {m.mid for _, m in self.mcache[i]}
        for m in msgs:
            if m.mid in held:
                self.iwant_served += 1
                self._send(i, j, m)
