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

The router's parts live in their own files: gossip_mesh.py (mesh control), gossip_push.py (messages and
eager push), gossip_lazy.py (heartbeat, IHAVE/IWANT); gossip_types.py holds the config and the message.
This module holds the per-peer state and the peers' links and subscriptions.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from simulator.gossip_lazy import LazyGossip
from simulator.gossip_mesh import MeshControl
from simulator.gossip_push import EagerPush
from simulator.gossip_types import PHASES, GossipConfig, Msg, message_id
from simulator.loop import EventLoop
from simulator.network import Network
from swarm.rng import Rng

__all__ = ["GossipConfig", "GossipRouter", "Msg", "message_id"]


class GossipRouter(EagerPush, LazyGossip, MeshControl):
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
        # receiver -> {sender: when it last sent a frame the receiver's core is not handed (a copy of a
        # message it had, an IHAVE)}: what node/driver.py gives the core with each Tick (`Tick.heard`)
        self.heard: list[dict[int, float]] = []
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
        self.heard.append({})
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
        self.heard[i] = {}

    def take_heard(self, i: int) -> dict[int, float]:
        """What peer i's transport heard since it was last asked (`heard`), handed over and forgotten."""
        heard = self.heard[i]
        if heard:
            self.heard[i] = {}
        return heard

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

