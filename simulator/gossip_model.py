"""A gossipsub 1.1 router for every simulated peer: mesh, fanout, eager push, IHAVE/IWANT, seen-cache.

What it models, per peer and topic (parameters as in the gossipsub 1.1 spec and go-libp2p defaults):

* a mesh of D=6 peers kept within [Dlo=4, Dhi=12] by a 1 s heartbeat that GRAFTs and PRUNEs (with a
  prune backoff), fanout peers for publishing on a topic the peer is not subscribed to (expiring after
  60 s), and flood publishing of a peer's own messages to every connected subscriber;
* eager push of every accepted message to the mesh (minus the peer it came from and its origin);
* lazy gossip: at each heartbeat, message ids from the last `history_gossip` heartbeats are offered
  (IHAVE) to Dlazy=6 (or gossip_factor of the) non-mesh subscribers; an IWANT answers, served from
  the message cache while it holds the message (`history_length` heartbeats);
* a seen-cache (ids, 120 s) that drops duplicates before validation, and validation by the peer's
  core: a message is forwarded only if the core accepted it (MessageVerdict), never if rejected.

Peer scoring, opportunistic grafting and outbound-degree quotas are not modelled; the core's own
reputation ledger stands in for scoring. GRAFT/PRUNE take effect at both ends at once (their bytes
are counted on the links).

Speed (all exact, not approximations of the protocol's outcome): a copy sent to a peer that has
already seen the message costs only its bytes (it would be dropped on arrival); of several copies in
flight to one peer only the earliest arrival gets an event (later ones would be duplicates); an IHAVE
to a peer that holds every offered id costs only its bytes. Heartbeats run in 10 phase groups, and a
peer with no mesh repair, no ids to gossip and no fanout does no heartbeat work at all.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Callable

from simulator.loop import EventLoop
from simulator.network import FRAME_OVERHEAD, Network
from swarm.rng import Rng

PHASES = 10
IHAVE_ID_BYTES = 34  # one message id in an IHAVE/IWANT control entry
CONTROL_BYTES = 40  # a GRAFT or PRUNE entry (topic, backoff)


@dataclass(frozen=True)
class GossipConfig:
    D: int = 6
    Dlo: int = 4
    Dhi: int = 12
    Dlazy: int = 6
    gossip_factor: float = 0.25
    heartbeat: float = 1.0
    history_length: int = 5
    history_gossip: int = 3
    seen_ttl: float = 120.0
    fanout_ttl: float = 60.0
    prune_backoff: float = 60.0
    flood_publish: bool = True
    max_ihave_length: int = 5000


class Msg:
    """One distinct message (by id) while any seen-cache may still hold it."""

    __slots__ = ("mid", "hex", "topic", "data", "size", "origin", "t0", "seen", "best")

    def __init__(self, mid: bytes, topic: str, data: bytes, origin: int, t0: float) -> None:
        self.mid, self.hex, self.topic, self.data = mid, mid[:10].hex(), topic, data
        self.size = len(data)
        self.origin, self.t0 = origin, t0
        self.seen: set[int] = set()
        self.best: dict[int, float] = {}  # peer -> earliest arrival among copies in flight


def message_id(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=20).digest()


class GossipRouter:
    """`validate(peer, msg, from_peer) -> bool` hands a first arrival to the peer's core."""

    def __init__(self, loop: EventLoop, net: Network, config: GossipConfig, rng: Rng,
                 validate: Callable[[int, Msg, int], bool], on_drop: Callable[[int, Msg, int, str], None]) -> None:
        self.loop, self.net, self.cfg, self.rng = loop, net, config, rng
        self.validate = validate
        self.on_drop = on_drop
        self.msgs: dict[bytes, Msg] = {}
        self.subs: list[set[str]] = []
        self.conns: list[set[int]] = []
        self.mesh: list[dict[str, set[int]]] = []
        self.fanout: list[dict[str, set[int]]] = []
        self.fanout_last: list[dict[str, float]] = []
        self.backoff: list[dict[tuple[str, int], float]] = []
        self.mcache: list[deque] = []  # (time accepted, Msg), oldest first
        self.dirty: list[bool] = []
        self.withhold: list[bool] = []  # adversary: never forwards or answers IWANT
        # receiver -> {sender: when the receiver learns that the sender closed their link}. Frames the
        # sender had put on the wire before it closed still arrive until then, as over TCP, where the
        # close (FIN) travels behind the data; see `disconnected`.
        self.closing: list[dict[int, float]] = []
        # peer -> {topic: the peers its IHAVEs may go to}, dropped whenever its links, mesh or fanout, or a
        # neighbour's subscriptions change: every heartbeat with messages to offer needs it, and in a big
        # steady swarm it rarely changes.
        self.eligible: list[dict[str, list[int]]] = []
        self._active: list[set[int]] = [set() for _ in range(PHASES)]
        self.control_frames = 0
        self.iwant_served = 0
        self._phase = 0
        self._started = False

    # ------------------------------------------------------------------ peers and links

    def add_peer(self) -> int:
        self.subs.append(set())
        self.conns.append(set())
        self.mesh.append({})
        self.fanout.append({})
        self.fanout_last.append({})
        self.backoff.append({})
        self.mcache.append(deque())
        self.dirty.append(False)
        self.withhold.append(False)
        self.closing.append({})
        self.eligible.append({})
        if not self._started:
            self._started = True
            self.loop.after(self.cfg.heartbeat / PHASES, self._heartbeat_phase)
        return len(self.subs) - 1

    def reset_peer(self, i: int) -> None:
        """The peer's process died: its router state is gone with it."""
        for j in sorted(self.conns[i]):
            self.disconnected(i, j)
        self.subs[i] = set()
        self.mesh[i], self.fanout[i], self.fanout_last[i], self.backoff[i] = {}, {}, {}, {}
        self.mcache[i] = deque()
        self.dirty[i] = False
        self.closing[i] = {}  # nothing reaches a process that died
        self.eligible[i] = {}

    def _activate(self, i: int) -> None:
        self._active[i % PHASES].add(i)

    def connected(self, i: int, j: int) -> None:
        self.conns[i].add(j)
        self.conns[j].add(i)
        self.closing[i].pop(j, None)
        self.closing[j].pop(i, None)
        self._link_changed(i, j)
        for a, b in ((i, j), (j, i)):
            if any(t in self.subs[b] and len(self.mesh[a].get(t, ())) < self.cfg.Dlo for t in self.subs[a]):
                self.dirty[a] = True
                self._activate(a)

    def disconnected(self, i: int, j: int, closed_by_i: bool = False) -> None:
        """The link i-j is gone. `closed_by_i`: peer i closed it (it left, crashed or hung up): j learns
        of it one latency later, so i's frames already on the wire still reach j; i discards j's. Without
        it (a partition cuts the link) frames in flight on it are lost."""
        self.conns[i].discard(j)
        self.conns[j].discard(i)
        self.closing[i].pop(j, None)
        if closed_by_i:
            net = self.net
            self.closing[j][i] = self.loop.now + net.latency[net.region[i]][net.region[j]] + net.extra_delay[j]
        else:
            self.closing[j].pop(i, None)
        self._link_changed(i, j)
        for a, b in ((i, j), (j, i)):
            for topic, members in self.mesh[a].items():
                if b in members:
                    members.discard(b)
                    if len(members) < self.cfg.Dlo:
                        self.dirty[a] = True
                        self._activate(a)
            for members in self.fanout[a].values():
                members.discard(b)

    def subscribe(self, i: int, topic: str) -> None:
        if topic in self.subs[i]:
            return
        self.subs[i].add(topic)
        self._neighbours_changed(i)
        # Join: fanout peers first, then random subscribers, up to D; GRAFT them.
        mesh = self.fanout[i].pop(topic, set())
        self.fanout_last[i].pop(topic, None)
        mesh = {j for j in mesh if topic in self.subs[j] and j in self.conns[i]}
        self.mesh[i][topic] = set()
        for j in sorted(mesh):
            self._graft(i, j, topic)
        if len(self.mesh[i][topic]) < self.cfg.D:
            self._fill(i, topic, self.cfg.D)
        # Neighbours below Dlo on this topic may now graft us.
        for j in sorted(self.conns[i]):
            if topic in self.subs[j] and len(self.mesh[j].get(topic, ())) < self.cfg.Dlo:
                self.dirty[j] = True
                self._activate(j)

    def unsubscribe(self, i: int, topic: str) -> None:
        self.subs[i].discard(topic)
        self._neighbours_changed(i)
        for j in sorted(self.mesh[i].pop(topic, set())):
            self._prune(i, j, topic)

    def _link_changed(self, i: int, j: int) -> None:
        """The link i-j opened, closed, or joined or left a mesh: both ends' IHAVE targets change."""
        self.eligible[i].clear()
        self.eligible[j].clear()

    def _neighbours_changed(self, i: int) -> None:
        """Peer i's subscriptions (and so its neighbours' IHAVE targets) or its own mesh changed."""
        eligible = self.eligible
        eligible[i].clear()
        for j in self.conns[i]:
            eligible[j].clear()

    # ------------------------------------------------------------------ mesh control

    def _graft(self, i: int, j: int, topic: str) -> None:
        now = self.loop.now
        self._link_changed(i, j)
        self.net.frame(now, i, j, CONTROL_BYTES)
        self.control_frames += 1
        if topic not in self.subs[j] or self.backoff[j].get((topic, i), 0.0) > now:
            self.net.frame(now, j, i, CONTROL_BYTES)  # PRUNE back
            self.backoff[i][(topic, j)] = now + self.cfg.prune_backoff
            return
        self.mesh[i].setdefault(topic, set()).add(j)
        theirs = self.mesh[j].setdefault(topic, set())
        theirs.add(i)
        if len(theirs) > self.cfg.Dhi:
            self.dirty[j] = True
            self._activate(j)

    def _prune(self, i: int, j: int, topic: str) -> None:
        now = self.loop.now
        self._link_changed(i, j)
        self.net.frame(now, i, j, CONTROL_BYTES)
        self.control_frames += 1
        self.mesh[i].get(topic, set()).discard(j)
        theirs = self.mesh[j].get(topic)
        if theirs is not None and i in theirs:
            theirs.discard(i)
            if len(theirs) < self.cfg.Dlo:
                self.dirty[j] = True
                self._activate(j)
        self.backoff[i][(topic, j)] = now + self.cfg.prune_backoff
        self.backoff[j][(topic, i)] = now + self.cfg.prune_backoff

    def _fill(self, i: int, topic: str, want: int) -> None:
        now = self.loop.now
        mesh = self.mesh[i].setdefault(topic, set())
        backoff = self.backoff[i]
        candidates = [j for j in sorted(self.conns[i]) if j not in mesh and topic in self.subs[j]
                      and backoff.get((topic, j), 0.0) <= now]
        for j in self.rng.sample(candidates, want - len(mesh)):
            self._graft(i, j, topic)

    def _maintain(self, i: int) -> bool:
        """Heartbeat mesh repair; True while the peer still lacks Dlo mesh peers somewhere."""
        cfg = self.cfg
        short = False
        self.eligible[i].clear()
        for topic in sorted(self.subs[i]):
            mesh = self.mesh[i].setdefault(topic, set())
            for j in sorted(mesh):
                if j not in self.conns[i] or topic not in self.subs[j]:
                    mesh.discard(j)
            if len(mesh) < cfg.Dlo:
                self._fill(i, topic, cfg.D)
                short = short or len(mesh) < cfg.Dlo
            elif len(mesh) > cfg.Dhi:
                for j in self.rng.sample(sorted(mesh), len(mesh) - cfg.D):
                    self._prune(i, j, topic)
        if self.backoff[i]:
            now = self.loop.now
            self.backoff[i] = {k: v for k, v in self.backoff[i].items() if v > now}
        return short

    # ------------------------------------------------------------------ messages

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
        seen, best = msg.seen, msg.best
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

    # ------------------------------------------------------------------ heartbeat and lazy gossip

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
        free = net.up_free[i]
        for j in targets:
            down = down_Bps[j]
            start = free if free >= now else now
            free = start + size / (up if up < down else down)
            if side[j] != side_i:
                continue
            if net.loss > 0.0 and net.rng.random() < net.loss:
                net.frames_lost += 1
                continue
            bytes_in[j] += size
            missing = [m for m in msgs if j not in m.seen]
            if missing:
                loop.at(free + lat_i[region[j]] + extra[j], self._on_ihave, j, i, missing)
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
