"""Who is out there: the peer table, liveness from heartbeats, and peer exchange.

Liveness comes from signed application heartbeats, not from connections: a stopped (SIGSTOP) peer
keeps its TCP connection and stays in the gossipsub mesh (DESIGN.md), so only silence tells. A peer
silent for `gone_factor` times its declared interval (at least `gone_after`) is marked gone and its
connection closed; a heartbeat brings it back. The peers we hold a link to are judged sooner, on the
link itself (swarm/links.py, `link_dead`): `gone_after` of silence there, whatever their interval.

Gossiped heartbeats go to every peer, so their total rate must not grow with the swarm: each peer
that gossips one (any role but relay; a relay's goes over its links only) stretches its interval to
keep the whole swarm near `status_budget` heartbeats per second (2 s at 6 peers, 100 s at 1,000 with
the defaults), and says in each heartbeat when to expect the next. The peers we hold a link to count
as alive while the link does, heartbeat or not (`sweep(on_link=...)`).

Keys cost nothing, so a heartbeat alone earns a live entry only within a budget (swarm/newcomers.py). A peer
is *vouched* for when something costly stands behind it: we hold or held a link to it (its connection passed
the per-address and per-network limits), a task our roles work on names it as a trainer or validator, or a
trusted checker passed its work (`vouches`, the core's word). Any other peer is a newcomer, and newcomers
count toward our pace only up to the vouched peers' number.

Peer exchange: heartbeats, gossiped or over a new link, carry our listen addresses and a sample of
peers we know, so every peer learns dialable addresses beyond the bootstrap peer and keeps
`target_connections` links open. The swarm stays connected when the bootstrap peer dies.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gossip.errors import OUT_OF_WINDOW, STALE, Rejected
from gossip.messages import PeerAddrs, StatusHeartbeat
from gossip.release import CURRENT, Announced, Release
from swarm.io import Dial, Disconnect, Emit
from swarm.newcomers import Newcomers
from swarm.peerinfo import ALIVE, GONE, KNOWN, PeerInfo
from swarm.rng import Rng
from swarm.stall import StallWatch

_PLAIN = Announced()  # what a heartbeat that announces nothing says: 1.0, no capabilities (shared)
MAX_INTERVAL = 3600.0  # StatusHeartbeat.interval's schema bound
BELIEVED = 4.0  # a declared interval counts up to this many times our own
RELAY_ONLY = ("relay",)


@dataclass(frozen=True)
class MembershipConfig:
    heartbeat_interval: float = 2.0  # the shortest interval; stretched in large swarms
    status_budget: float = 10.0  # heartbeats/s the whole swarm should send, at most (roughly)
    gone_after: float = 10.0  # the least silence after which a peer is considered gone
    gone_factor: float = 3.0  # ... or this many of its declared intervals, if longer
    forget_after: float = 3600.0  # gone peers are dropped from the table after this
    max_peers: int = 1024
    target_connections: int = 8
    dial_backoff: float = 5.0  # first retry delay; doubles per failure up to dial_backoff_max
    dial_backoff_max: float = 300.0
    window_past: float = 60.0  # heartbeats older than this are out of window
    window_future: float = 30.0  # tolerated clock skew
    exchange_size: int = 8  # peers shared per heartbeat
    newcomers: int = 256  # alive peers nothing vouches for (swarm/newcomers.py), at most
    newcomers_per_net: int = 64  # ... of them charged to one source network, at most
    # After the first link, wait up to this long for someone's heartbeat (and the swarm size it declares)
    # before sending our first, which then declares an interval fit for the swarm instead of the
    # base-rate guess of a peer that knows nobody (and so needs a second heartbeat seconds later).
    # 0: send at once. Worth it when many peers join together (a flash crowd, docs/simulator.md, core change 8).
    first_beat_wait: float = 0.0


class Membership:
    """The peer table. `sweep()` and `maintain()` cost what is due, not the table's size: silence
    deadlines wait in a heap (`_due`, re-checked exactly when they pop, stale ones skipped) and the
    connected peers are counted as links open and close (`_linked`)."""

    def __init__(self, self_id: str, config: MembershipConfig, release: Release = CURRENT,
                 stall: StallWatch | None = None) -> None:
        self.self_id = self_id
        self.config = config
        self.release = release
        self.stall = stall or StallWatch()  # our own stalls: silence we slept through is not held against peers
        self.peers: dict[str, PeerInfo] = {}
        # (when, peer, last_seen then): when the peer may turn gone (ALIVE) or be forgotten (GONE). An
        # entry whose last_seen is no longer the peer's is stale (a newer one was pushed).
        self._due: list[tuple[float, str, float]] = []
        self._linked: set[str] = set()  # peers with info.connected
        self._alive_n = 0  # entries with state ALIVE, counted as they turn (pace asks on every tick)
        # Peers a neighbour named to us (peer exchange) or we held a link to: what `maintain` dials. Not a
        # gossiped heartbeat's sender: that reaches the whole swarm, and if it made its sender everyone's
        # dial target, the few peers that gossip (a task's members: relays gossip none) took every relay's
        # dials, sat at their connection limit and could not reach each other (`scale`). A neighbour names
        # its own neighbours (exchange_sample), so each peer is named about as often as it has links.
        self._named: set[str] = {self_id}
        self._failing: set[str] = set()  # peers our last dial to failed (learn_addrs may replace their addresses)
        self.vouches: Callable[[str], bool] = lambda peer: False  # the core's word: task-named, or proven work
        self.newcomers = Newcomers(config.newcomers_per_net, config.newcomers)  # told of every alive/gone turn
        self.own_interval = config.heartbeat_interval  # what our last pace() said (gone_threshold's yardstick)

    # ---- table upkeep

    def _info(self, peer: str, linked: bool = False, room_from_newcomers: bool = False) -> PeerInfo | None:
        """The peer's entry, made if there is room. A peer we hold a link to always gets one: a flood of
        heartbeats from fresh keys fills the table with live entries (issue 27, attack 1), and our own
        neighbours, whose links cost something to hold, must not be what it locks out. A peer vouched
        for otherwise (`room_from_newcomers`) may take the place of a live newcomer."""
        info = self.peers.get(peer)
        if info is None and peer != self.self_id:
            if len(self.peers) >= self.config.max_peers and \
                    not self._evict_one("any" if linked else "newcomers" if room_from_newcomers else ""):
                return None
            info = self.peers[peer] = PeerInfo(peer)
        return info

    def _evict_one(self, alive_too: str = "") -> bool:
        """Drop the unlinked entry heard from least recently: one not alive, else a live newcomer
        (`alive_too` "newcomers" or "any"), else (`alive_too` "any") any."""
        charged = self.newcomers.charged
        victim = min(((p.state == ALIVE, p.peer_id not in charged, p.last_seen or 0.0, p.peer_id)
                      for p in self.peers.values()
                      if not p.connected and (p.state != ALIVE or alive_too == "any"
                                              or (alive_too and p.peer_id in charged))), default=None)
        if victim is None:
            return False
        self._forget(victim[3])
        return True

    def _forget(self, peer: str) -> None:
        self._alive_n -= self.peers.pop(peer).state == ALIVE
        self._named.discard(peer)
        self._failing.discard(peer)
        self.newcomers.uncharge(peer)

    # ---- newcomers

    def vouched(self, peer: str, info: PeerInfo | None = None) -> bool:
        info = info if info is not None else self.peers.get(peer)
        return (info is not None and info.linked_once) or self.vouches(peer)

    def _admit(self, peer: str, info: PeerInfo | None, net: str, vouched: bool | None) -> None:
        """A gossiped heartbeat would make `peer` alive: fine if vouched for (`vouched`, if the caller
        knows), else charged to `net` within the newcomer budget (raises NoRoom past it)."""
        if vouched if vouched is not None else self.vouched(peer, info):
            self.newcomers.uncharge(peer)
        else:
            self.newcomers.admit(peer, net)

    def learn_addrs(self, peer: str, addrs: tuple[str, ...]) -> None:
        if not addrs:
            return
        info = self.peers.get(peer)
        if info is None:
            if peer == self.self_id:
                return
            info = self._info(peer)
            if info is None:
                return
        if not info.addrs or (info.dial_failures and not info.connected):
            # A neighbour's word never overrides addresses that work (it could name bogus ones), but ours
            # failed: the peer may have moved, or (behind NAT) be reachable only by a relay's circuit
            # address it took since its heartbeat reached us. A relay's heartbeat goes to its links only.
            info.addrs = tuple(addrs)[:4]
        self._named.add(peer)

    # ---- inputs

    def on_heartbeat(self, now: float, peer: str, beat: StatusHeartbeat, via: str | None = None,
                     vouched: bool | None = None) -> list:
        """A heartbeat signed by `peer`, gossiped through source network `via` (None: over our link to
        it, so vouched for); `vouched`: `self.vouched(peer)` if the caller has asked already. Raises
        Rejected when it is out of window, stale or of another major, and NoRoom (swarm/newcomers.py) for a
        newcomer past the budget."""
        cfg = self.config
        if beat.sent_at < now - cfg.window_past or beat.sent_at > now + cfg.window_future:
            raise Rejected(OUT_OF_WINDOW, f"heartbeat sent at {beat.sent_at:.3f}, now {now:.3f}")
        theirs = _PLAIN if beat.proto_major == _PLAIN.major and beat.proto_minor == 0 and not beat.caps \
            else Announced.of(beat)
        self.release.check_major(theirs)  # another major: refused (other-major), never alive here
        peers = self.peers
        info = peers.get(peer)
        if info is not None and beat.seq <= (last := info.last_seq if via is None else info.gossip_seq):
            # Gossip can deliver an older heartbeat late (IHAVE/IWANT after the mesh copy of a newer one);
            # an identical replay is caught earlier by the seen-cache, an old one by the time window.
            # Gossiped ones are judged against gossiped ones only: a newer one over the signer's link
            # (a ping, sent after it) must not stop us forwarding it to peers that have not had it.
            raise Rejected(STALE, f"heartbeat seq {beat.seq} after {last}{'' if via is None else ' (gossiped)'}")
        if via is not None and (info is None or info.state != ALIVE or peer in self.newcomers):
            self._admit(peer, info, via, vouched)  # before an entry is made; and a newcomer vouched for since is none
        if info is None:
            info = self._info(peer, room_from_newcomers=peer not in self.newcomers)
            if info is None:
                self.newcomers.uncharge(peer)
                return []
        if via is not None:
            info.gossip_seq = beat.seq
            if beat.seq <= info.last_seq:
                return []  # its link brought a newer one: forwarded, nothing new to learn
        effects: list = []
        if info.state != ALIVE:
            effects.append(Emit("peer-alive" if info.state == KNOWN else "peer-back", {"peer": peer}))
            self.newcomers.mark(peer, True)
            self._alive_n += 1
        info.state, info.last_seq, info.last_seen = ALIVE, beat.seq, now
        info.latency = max(0.0, now - beat.sent_at)
        info.clock_offset = now - beat.sent_at  # negative: its clock runs ahead of ours (doctor reports it)
        info.interval, info.swarm = beat.interval, beat.peers
        info.roles, info.agent, info.tasks = beat.roles, beat.agent, beat.tasks
        if info.announced != theirs:
            info.announced = theirs
        if info.versions != beat.versions:  # most heartbeats repeat the last (or declare none): keep ours
            info.versions = dict(beat.versions)
        if beat.listen_addrs:
            info.addrs = beat.listen_addrs[:4]
        heapq.heappush(self._due, (now + self.gone_threshold(info), peer, now))
        if not beat.known_ids <= self._named or not self._failing.isdisjoint(beat.known_ids):  # else nothing to learn
            for known in beat.known_peers:
                if known.peer_id != self.self_id:
                    self.learn_addrs(known.peer_id, known.addrs)
        return effects

    def on_connected(self, peer: str, addrs: tuple[str, ...]) -> None:
        info = self._info(peer, linked=True)
        if info is not None:
            info.connected, info.dial_failures, info.linked_once = True, 0, True
            self.newcomers.uncharge(peer)
            self._failing.discard(peer)
            self._linked.add(peer)
            self._named.add(peer)

    @property
    def linked(self) -> set[str]:
        """The peers we hold a link to (read only)."""
        return self._linked

    def refuse_dials(self, peer: str, until: float) -> None:
        """`peer` is not dialled again before `until` (a link we cut: swarm/floodwatch.py)."""
        info = self.peers.get(peer)
        if info is not None:
            info.next_dial = max(info.next_dial, until)

    def on_disconnected(self, peer: str) -> None:
        info = self.peers.get(peer)
        if info is not None:
            info.connected = False
        self._linked.discard(peer)

    def on_dial_failed(self, now: float, peer: str) -> None:
        info = self.peers.get(peer)
        if info is not None:
            info.dial_failures += 1
            self._failing.add(peer)
            doublings = min(info.dial_failures - 1, 16)  # a peer dead for days must not overflow the float
            delay = min(self.config.dial_backoff * 2 ** doublings, self.config.dial_backoff_max)
            info.next_dial = now + delay

    # ---- periodic work

    def sweep(self, now: float, on_link: Mapping[str, float] | None = None) -> list:
        """Mark silent peers gone (closing their links), forget long-gone ones.

        Only peers whose deadline in `_due` has come are looked at; each is then judged by the exact
        rule (silent for more than `gone_threshold`, or gone, unlinked and silent for `forget_after`),
        and the effects come in peer-id order, as a scan of the sorted table would give them. A peer
        whose link judges it (`on_link`: peer -> when the link last carried anything, swarm/links.py)
        is not gone for a silent heartbeat: a relay gossips none (`CoreConfig.gossips_heartbeat`), and
        its link says sooner than any heartbeat when it goes; its entry is as fresh as the link."""
        due, peers, cfg = self._due, self.peers, self.config
        slack = 1e-3  # `when` is a float sum; the exact test below decides
        popped: set[str] = set()
        while due and due[0][0] <= now + slack:
            when, peer, seen = heapq.heappop(due)
            info = peers.get(peer)
            if info is None or info.last_seen != seen or info.state == KNOWN:
                continue  # stale: forgotten, heard from since, or re-learned
            popped.add(peer)
        effects: list = []
        later: list[tuple[float, str, float]] = []
        awake_since = self.stall.awake_since
        for peer in sorted(popped):
            info = peers[peer]
            heard_on_link = on_link.get(peer) if on_link is not None else None
            if info.state == ALIVE and heard_on_link is not None:
                info.last_seen = max(info.last_seen, heard_on_link)
                later.append((max(info.last_seen + self.gone_threshold(info), now + slack * 2), peer,
                              info.last_seen))
                continue
            silent = now - max(info.last_seen, awake_since)  # a silence we slept through does not count
            if info.state == ALIVE and silent > self.gone_threshold(info):
                self._turn_gone(peer, info)
                info.next_dial = now + cfg.dial_backoff  # retried with backoff: a healed partition rejoins
                effects.append(Emit("peer-gone", {"peer": peer, "silent_for": round(now - info.last_seen, 3)}))
                if info.connected:
                    effects.append(Disconnect(peer, "silent"))
                later.append((info.last_seen + cfg.forget_after, peer, info.last_seen))
            elif info.state == GONE and not info.connected and silent > cfg.forget_after:
                self._forget(peer)
            else:  # not quite due (float slack), gone but still linked, or heard of before we stalled: later
                when = max(info.last_seen, awake_since) + (
                    self.gone_threshold(info) if info.state == ALIVE else cfg.forget_after)
                later.append((max(when, now + slack * 2), peer, info.last_seen))
        for entry in later:
            heapq.heappush(due, entry)
        return effects

    def _turn_gone(self, peer: str, info: PeerInfo) -> None:
        """An alive entry turns gone, and the counts that follow it (live entries, live newcomers) with it."""
        info.state = GONE
        self.newcomers.mark(peer, False)
        self._alive_n -= 1

    def link_dead(self, now: float, peer: str) -> list:
        """Our link to `peer` went silent (swarm/links.py): it is gone and the link is closed, as when its
        heartbeats stop, but judged in seconds at every swarm size instead of three stretched intervals."""
        info = self.peers.get(peer)
        effects: list = [Disconnect(peer, "silent")]
        if info is not None and info.state == ALIVE:
            self._turn_gone(peer, info)
            info.next_dial = now + self.config.dial_backoff
            effects.insert(0, Emit("peer-gone", {"peer": peer, "silent_for": round(now - info.last_seen, 3),
                                                 "link": True}))
            heapq.heappush(self._due, (info.last_seen + self.config.forget_after, peer, info.last_seen))
        return effects

    def gone_threshold(self, info: PeerInfo) -> float:
        """Silence allowed: `gone_factor` of its declared interval, but of at most `BELIEVED` times our own
        (honest peers stretch for the same swarm, so theirs is near ours): a key that declares an hour
        (issue 27, attack 1: fresh keys, one heartbeat each) is not counted alive for three."""
        interval = min(info.interval, BELIEVED * self.own_interval)
        return max(self.config.gone_after, self.config.gone_factor * interval + 1.0)

    def heartbeat_interval(self, uptime: float = float("inf")) -> float:
        """Ours: the base interval, stretched so the swarm's heartbeats stay within the budget."""
        return self.pace(uptime)[0]

    def pace(self, uptime: float = float("inf")) -> tuple[float, int]:
        """(our heartbeat interval, the swarm size it is stretched for), `uptime` seconds after we started.
        The size is the peers that count (`counted_count`) plus ourselves, once our table is complete: once we have
        been up for the interval that count implies, everyone heartbeating at that rate or faster has been heard.
        Until then (a newcomer) our own count is too low: a peer joining a 1,000-peer swarm whose interval is an
        hour has heard a handful after a few seconds. A newcomer therefore also takes the median of the sizes others
        declare (`StatusHeartbeat.peers`), ignoring 0, which a peer that has heard nobody yet declares: in a flash
        crowd, where most peers heard are newcomers too, the median comes from those whose estimate rests on
        something. Only newcomers borrow: a settled peer's estimate is its own count, so the swarm's estimate
        follows it down when peers leave (borrowed sizes would otherwise sustain each other forever). A lying
        minority cannot move the median, and newcomers' declarations are not in it (fresh keys declaring 1,000 peers
        made a trainer's first interval an hour); the interval stays within the schema's bound whatever is declared."""
        cfg = self.config
        charged = self.newcomers.charged
        size = (alive := self.counted_count()) + 1
        interval = max(cfg.heartbeat_interval, size / cfg.status_budget)
        if uptime < interval:  # still filling our table
            declared = sorted(p.swarm for p in self.peers.values() if p.state == ALIVE and p.swarm > 0
                              and p.peer_id not in charged)  # newcomers' word is free: not theirs
            if declared:
                size = max(size, declared[len(declared) // 2])
                interval = max(cfg.heartbeat_interval, size / cfg.status_budget)
            elif not alive:
                size = 0  # we know nobody: no estimate to offer
        self.own_interval = interval = min(MAX_INTERVAL, interval)
        return interval, size

    def maintain(self, now: float, rng: Rng, is_banned, members=None) -> tuple[list, bool]:
        """Dial known peers until `target_connections` links are open, and (`members`, swarm/memberlinks.py)
        a few to our members-only tasks' members: (the dials, whether we are short of peers to dial, which
        asks our neighbours for more: swarm/pings.py, shuffle)."""
        dials = members.dials(now, rng, self, is_banned) if members is not None else []
        missing = self.config.target_connections - len(self._linked) - len(dials)
        if missing <= 0:
            return dials, False
        peers = self.peers
        candidates = [p for p in sorted(self._named) if p in peers and self.dialable(peers[p], now) and not is_banned(p)]
        return dials + [self.dial(self.peers[peer], now) for peer in rng.sample(candidates, missing)], len(candidates) < missing

    def dial(self, info: PeerInfo, now: float) -> Dial:
        info.next_dial = now + self.config.dial_backoff  # at most one dial in flight per backoff period
        return Dial(info.peer_id, info.addrs)

    def dialable(self, info: PeerInfo, now: float) -> bool:
        # Gone peers stay dialable (with backoff): after a partition heals, nothing else would bring the
        # two sides together, since no heartbeat can cross while there is no link.
        return not info.connected and bool(info.addrs) and now >= info.next_dial

    def exchange_sample(self, rng: Rng) -> tuple[PeerAddrs, ...]:
        """Some of our linked peers with addresses, for our heartbeat (peer exchange): our neighbours, not
        every live peer we know, which would name the few that gossip heartbeats in every sample; and of
        them the relays, when we have any: a peer named is dialled by whoever hears it, and a task member
        at its connection limit with relays' links cannot be reached by the trainer that needs its
        batch (a 3,000-peer `scale` lost a batch that way, and every step after it). Task members find
        each other by their gossiped heartbeats and the task's own dials."""
        peers = self.peers
        linked = [p for p in sorted(self._linked) if p in peers and peers[p].addrs]
        relays = [p for p in linked if peers[p].roles == RELAY_ONLY]
        return tuple(_exchange_entry(peers[p]) for p in rng.sample(relays or linked, self.config.exchange_size))

    def budget_snapshot(self) -> dict:
        """Our pace and the newcomer budget's use, for status (swarm-node status, the TUI)."""
        return {"interval": round(self.own_interval, 3), **self.newcomers.snapshot()}

    def announced(self, peer: str) -> Announced | None:
        info = self.peers.get(peer)
        return None if info is None else info.announced

    def alive_peers(self) -> list[str]:
        return sorted(p for p, info in self.peers.items() if info.state == ALIVE)

    def counted_count(self) -> int:  # vouched alive peers and newcomers up to as many: pace asks for every heartbeat
        newcomers = len(self.newcomers.alive)
        vouched = self._alive_n - newcomers
        return vouched + min(newcomers, vouched)

    def vouched_alive(self) -> list[str]:
        """The alive peers something vouches for: what a role splits work among (swarm/context.py). A
        newcomer vouched for since it was charged counts at once, not from its next heartbeat (a worker's
        first batch passed, and at a big swarm's pace its next heartbeat may be minutes away)."""
        charged = self.newcomers.charged
        return sorted(p for p, info in self.peers.items()
                      if info.state == ALIVE and (p not in charged or self.vouches(p)))

    def counted_peers(self) -> list[str]:
        """The alive peers vouched for, and newcomers up to as many, those heard first first: what a task's
        split of the work counts before anyone has committed to it (swarm/context.py `workers_of`)."""
        vouched = self.vouched_alive()
        return sorted(set(vouched).union(self.newcomers.first_alive(len(vouched))))

    def connected_peers(self) -> list[str]:
        return sorted(p for p, info in self.peers.items() if info.connected)

    def snapshot(self, now: float, on_link: Mapping[str, float] | None = None) -> list[dict]:
        on_link = on_link or {}
        return [self.peers[p].as_dict(now, on_link.get(p)) for p in sorted(self.peers)]


def _exchange_entry(info: PeerInfo) -> PeerAddrs:
    """The peer exchange entry for `info`, kept while its addresses stay: a link heartbeat names up to 8
    neighbours, and building (and checking) each entry anew was most of what making one cost."""
    entry = info.exchange_entry
    if entry is None or entry.addrs != info.addrs:
        entry = info.exchange_entry = PeerAddrs(info.peer_id, info.addrs)
    return entry
