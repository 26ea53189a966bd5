"""The simulated runtime: the peer table, and each `PeerCore`'s effects turned into network actions
and inputs back.

This is `node/`'s job done on the virtual network. Here: peers (created, started, stopped), feeding
cores and their timers (`next_deadline()`), the effect dispatch table, gossip through
`GossipRouter`, and the trace of what each peer does. Elsewhere: connections (simulator/links.py),
request/response streams and the blob and shard stores they serve (simulator/streams.py), job slots
(simulator/jobqueue.py), and what the scenario and the adversaries do to the swarm
(simulator/actions.py). Peers are indices; the core sees libp2p-style peer ids. Each peer's `now`
is the virtual epoch (1.8e9 s) plus simulated time plus its clock skew.
"""

from __future__ import annotations

import bisect

import shutil
import tempfile
from dataclasses import dataclass, field, replace

from gossip.envelope import EnvelopeMemo
from gossip.hashing import blake2b256
from gossip.identity import Identity
from gossip.release import by_name as release_named
from simulator import adversaries
from simulator.actions import Actions
from simulator.content import Content, NodeStore
from simulator.flows import FlowScheduler
from simulator.gossip_model import GossipRouter, Msg
from simulator.jobqueue import JobQueue
from simulator.links import Links
from simulator.loop import EventLoop
from simulator.network import LinkProfile, Network
from simulator.scenario import PeerGroup, Scenario, core_config, gossip_config, real_role_jobs
from simulator.streams import Streams
from simulator.trace import Trace, canonical_fields
from swarm.core import PeerCore
from swarm.io import (Ban, CheckShards, CommandResult, Dial, Disconnect, DropBlobs, Emit, KeepShards, LocalCommand,
                      MessageReceived, MessageVerdict, Publish, Respond, RespondShard, RunJob, SendRequest, Started,
                      StoreBlob, StoreShard, Subscribe, Tick, Unsubscribe)
from swarm import jobs
from swarm.rng import Rng, stable_seed

EPOCH = 1.8e9  # virtual wall-clock origin, so message timestamps look like real ones


@dataclass
class JobLane:
    queue: list = field(default_factory=list)
    running: int = 0


@dataclass(eq=False)
class Node:
    index: int
    identity: Identity
    group: PeerGroup
    behaviour: adversaries.Behaviour | None
    skew: float = 0.0
    core: PeerCore | None = None
    up: bool = False
    incarnation: int = 0
    tick_at: float | None = None
    banned: set = field(default_factory=set)  # peers this incarnation refuses (its core's Ban effects)
    served: dict = field(default_factory=dict)  # server-side request id -> Request
    lanes: tuple = ()  # its job lanes (JobLane): all jobs, and for a trainer its checks (simulator/jobqueue.py)
    started_at: float = 0.0
    attack_seq: int = 0
    rejoin_pending: bool = False
    rng: Rng | None = None  # the simulator's stream for this peer (adversary choices, jobs)
    store: NodeStore = field(default_factory=NodeStore)  # its data dir: blobs and shards (digests)

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    def __post_init__(self) -> None:
        self.reset_lanes()

    def lane(self, kind: str) -> "JobLane":
        return self.lanes[1] if kind == jobs.VERIFY and len(self.lanes) > 1 else self.lanes[0]

    def reset_lanes(self) -> None:
        self.lanes = (JobLane(), JobLane()) if "trainer" in self.group.roles else (JobLane(),)

    @property
    def adversary(self) -> str:
        return self.group.adversary


class Simulation:
    def __init__(self, scenario: Scenario, trace: Trace, core_factory=PeerCore, workdir: str | None = None) -> None:
        """`core_factory(identity, config, seed=, envelope_memo=)` builds each peer's core: PeerCore,
        or in tests a subclass that emits effects the real roles do not emit yet (RunJob). `workdir`:
        where a scenario with real role jobs keeps its peers' data dirs (default: a temporary dir,
        deleted by `close`)."""
        self.scenario = s = scenario
        self.real_jobs = real_role_jobs(s)
        self._own_workdir = self.real_jobs and workdir is None
        self.workdir = tempfile.mkdtemp(prefix="swarm-sim-") if self._own_workdir else workdir
        self.core_factory = core_factory
        self.seed = s.seed
        self.trace = trace
        self.loop = EventLoop()
        self.rng = Rng(stable_seed("swarm-sim", s.seed, "world"))
        self.net = Network(s.network.regions, s.network.latency_ms, s.network.loss,
                           Rng(stable_seed("swarm-sim", s.seed, "network")))
        self.flows = FlowScheduler(self.loop, self.net.up_Bps.__getitem__, self.net.down_Bps.__getitem__)
        self.router = GossipRouter(self.loop, self.net, gossip_config(s), Rng(stable_seed("swarm-sim", s.seed, "gossip")),
                                   self._validate, self._on_drop)
        self.memos: dict[str, EnvelopeMemo] = {}  # per release: what an envelope decodes to depends on it
        self.core_config = core_config(s)
        self.content = Content()
        self.nodes: list[Node] = []
        self.by_id: dict[str, int] = {}
        self.pids: list[str] = []  # peer index -> peer id
        self.live: set[int] = set()
        self.live_sorted: list[int] = []  # the same, in order (links.bootstrap samples it)
        self.jobs = JobQueue(self)
        self.streams = streams = Streams(self)
        self.links = links = Links(self)
        self.actions = Actions(self)  # the scenario's actions, and the adversaries' World
        self.controllers: dict[str, adversaries.GroupController] = {}
        self._command_id = 0
        self._region_rr: dict[str, int] = {}
        self.attack_until = s.duration - s.settle
        self._observe_deliver = trace.observed("deliver")
        self._observe_reject = trace.observed("reject")
        self._reason_json: dict[str, str] = {}
        self.counts = {"deliveries": 0, "core_calls": 0, "rejected": 0}
        self.effect_handlers = {
            Publish: self._do_publish, Subscribe: self._do_subscribe, Unsubscribe: self._do_unsubscribe,
            Dial: links.dial_effect, Disconnect: links.disconnect, Ban: links.ban, SendRequest: streams.request,
            Respond: streams.respond, RunJob: self.jobs.run_job, Emit: self._do_emit, CommandResult: self._do_result,
            MessageVerdict: self._do_verdict, StoreBlob: streams.store_blob, StoreShard: streams.store_shard,
            RespondShard: streams.respond_shard, CheckShards: streams.check_shards, KeepShards: streams.keep_shards,
            DropBlobs: streams.drop_blobs,
        }
        """Effect class -> handler(peer index, effect), built once; `feed` refuses an effect missing here."""

    # ------------------------------------------------------------------ helpers

    def core_now(self, node: Node) -> float:
        return EPOCH + self.loop.now + node.skew

    def attacks_allowed(self) -> bool:
        return self.loop.now < self.attack_until

    def live_honest(self) -> list[int]:
        return sorted(i for i in self.live if not self.nodes[i].adversary)

    def close(self) -> None:
        """Delete the real jobs' data dirs, if this simulation made them."""
        if self._own_workdir and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ peers

    def create_peer(self, group: PeerGroup, skew: float = 0.0) -> int:
        index = len(self.nodes)
        seed = blake2b256(f"swarm-sim/{self.seed}/identity/{index}".encode())
        identity = Identity(seed)
        behaviour = None
        if group.adversary:
            ctl = self.controllers.get(group.name)
            if ctl is None:
                ctl = self.controllers[group.name] = adversaries.GroupController(
                    group.name, stable_seed("swarm-sim", self.seed, "group", group.name))
            behaviour = adversaries.make(group.adversary, group.adversary_params, ctl)
        regions = self.scenario.network.regions
        if group.region == "any":
            k = self._region_rr.get(group.name, 0)
            self._region_rr[group.name] = k + 1
            region = (k + index) % len(regions)
        else:
            region = regions.index(group.region)
        node = Node(index, identity, group, behaviour, skew=skew,
                    rng=Rng(stable_seed("swarm-sim", self.seed, "peer", index)))
        self.nodes.append(node)
        self.by_id[identity.peer_id] = index
        self.pids.append(identity.peer_id)
        self.net.add_peer(region, LinkProfile(group.up_mbps * 1e6, group.down_mbps * 1e6))
        self.router.add_peer()
        self.trace.record(self.loop.now, index, "peer", {
            "id": identity.peer_id, "group": group.name, "adversary": group.adversary, "region": regions[region],
            "roles": list(group.roles),
            "up_mbps": group.up_mbps, "down_mbps": group.down_mbps, "skew": round(skew, 6),
            **({"release": group.release} if group.release != "current" else {}),
            "detectable": bool(behaviour and adversaries.detectable(behaviour, self.core_config.sender_rate,
                                                                    self.core_config.sender_burst))})
        return index

    def start_peer(self, i: int) -> None:
        node = self.nodes[i]
        if node.up:
            return
        node.up = True
        node.incarnation += 1
        node.started_at = self.loop.now
        node.banned = set()
        node.served = {}
        node.reset_lanes()
        node.rejoin_pending = False
        release = node.group.release
        cfg = replace(self.core_config, roles=node.group.roles, release=release)
        memo = self.memos.get(release)
        if memo is None:
            memo = self.memos[release] = EnvelopeMemo(kinds=release_named(release).kinds)
        node.core = self.core_factory(node.identity, cfg, seed=stable_seed("swarm-sim", self.seed, "core", i, node.incarnation),
                             envelope_memo=memo)
        shards = getattr(node.core, "shards", None)
        if shards is not None:  # hash each shard bytes object once, however many peers receive it
            shards.exchange.hasher = self.content.hasher
        node.store.seen.clear()  # the job process's memory, not the data dir
        if i not in self.live:
            bisect.insort(self.live_sorted, i)
        self.live.add(i)
        self.trace.record(self.loop.now, i, "start", {"incarnation": node.incarnation})
        self.feed(i, Started((self.addr(i),)))
        self.links.bootstrap(i)
        if node.behaviour is not None:
            node.behaviour.start(self.actions, node)

    def stop_peer(self, i: int, how: str) -> None:
        """`how`: "leave" (graceful) or "crash" (state lost); either way its links close now."""
        node = self.nodes[i]
        if not node.up:
            return
        node.up = False
        node.tick_at = None
        if i in self.live:
            del self.live_sorted[bisect.bisect_left(self.live_sorted, i)]
        self.live.discard(i)
        self.trace.record(self.loop.now, i, how, {"incarnation": node.incarnation})
        for j in sorted(self.router.conns[i]):
            self.links.close(i, j, how, notify_self=False)
        self.router.reset_peer(i)
        for flow in self.flows.cancel_peer(i):
            pass  # their requests fail below or by timeout
        self.streams.fail_where(lambda req: req.client == i or req.server == i, "peer gone")
        node.core = None

    def addr(self, i: int) -> str:
        return f"/sim/{self.net.regions[self.net.region[i]]}/{i}"

    # ------------------------------------------------------------------ driving cores

    def feed(self, i: int, inp) -> list:
        node = self.nodes[i]
        effects = node.core.handle(EPOCH + self.loop.now + node.skew, inp)
        self.counts["core_calls"] += 1
        self._carry_out(node, effects)
        if node.up:
            self._schedule_tick(node)
        return effects

    def _carry_out(self, node: Node, effects) -> None:
        handlers = self.effect_handlers
        for effect in effects:
            handler = handlers.get(type(effect))
            if handler is None:
                raise TypeError(f"simulator/sim.py has no handler for effect {type(effect).__name__}")
            handler(node.index, effect)
            if not node.up:
                return

    def feed_later(self, delay: float, i: int, inp) -> None:
        self.loop.after(delay, self._feed_if, i, self.nodes[i].incarnation, inp)

    def _feed_if(self, i: int, incarnation: int, inp) -> None:
        node = self.nodes[i]
        if node.up and node.incarnation == incarnation:
            self.feed(i, inp)

    def command(self, i: int, name: str, args: dict) -> list:
        self._command_id += 1
        return self.feed(i, LocalCommand(self._command_id, name, args))

    def _schedule_tick(self, node: Node) -> None:
        deadline = node.core.next_deadline()
        if deadline is None:
            node.tick_at = None
            return
        at = deadline - EPOCH - node.skew
        if at != node.tick_at:
            node.tick_at = at
            self.loop.at(at, self._tick, node, node.incarnation, at)

    def _tick(self, node: Node, incarnation: int, at: float) -> None:
        if node.up and node.incarnation == incarnation and node.tick_at == at:
            node.tick_at = None
            heard = self.router.take_heard(node.index)
            if heard:
                pids, clock = self.pids, EPOCH + node.skew
                self.feed(node.index, Tick(tuple((pids[i], clock + t) for i, t in heard.items())))
            else:
                self.feed(node.index, Tick())

    def _validate(self, j: int, msg: Msg, i: int) -> bool:
        """The router hands a first arrival to peer j's core; its verdict decides forwarding."""
        node = self.nodes[j]
        now = self.loop.now
        effects = node.core.handle(EPOCH + now + node.skew, MessageReceived(msg.topic, msg.data, self.pids[i]))
        counts = self.counts
        counts["core_calls"] += 1
        counts["deliveries"] += 1
        verdict = effects[0]
        accepted = verdict.accepted
        if accepted:
            # Hand-built canonical JSON (sorted keys): this is the hottest record.
            if self._observe_deliver:
                self.trace.record_raw(now, j, "deliver", f'{{"from":{i},"m":"{msg.hex}"}}', {"from": i, "m": msg.hex})
            else:
                self.trace.line(now, j, "deliver", f'{{"from":{i},"m":"{msg.hex}"}}')
            if node.behaviour is not None:
                node.behaviour.on_accepted(self.actions, node, msg.topic, msg.data)
        else:
            self.counts["rejected"] += 1
            # Hand-built too (a flood's kept heartbeats make it the second hottest): the reason's JSON once.
            why = self._reason_json.get(verdict.reason) or self._reason_json.setdefault(
                verdict.reason, canonical_fields(verdict.reason))
            body = f'{{"from":{i},"m":"{msg.hex}","why":{why}}}'
            if self._observe_reject:
                self.trace.record_raw(now, j, "reject", body, {"from": i, "m": msg.hex, "why": verdict.reason})
            else:
                self.trace.line(now, j, "reject", body)
        if len(effects) > 1:
            self._carry_out(node, effects[1:])
            if not node.up:
                return accepted
        # _schedule_tick, inlined (once per delivery)
        deadline = node.core.next_deadline()
        if deadline is None:
            node.tick_at = None
        else:
            at = deadline - EPOCH - node.skew
            if at != node.tick_at:
                node.tick_at = at
                self.loop.at(at, self._tick, node, node.incarnation, at)
        return accepted

    def _on_drop(self, j: int, msg: Msg, i: int, why: str) -> None:
        self.trace.record(self.loop.now, j, "drop", {"m": msg.hex, "from": i, "why": why})

    # ------------------------------------------------------------------ effects

    def _do_publish(self, i: int, e: Publish) -> None:
        msg = self.router.publish(i, e.topic, e.data)
        self.trace.record(self.loop.now, i, "publish", {"m": msg.hex, "topic": e.topic, "size": len(e.data)})

    def _do_subscribe(self, i: int, e: Subscribe) -> None:
        self.router.subscribe(i, e.topic)
        self.trace.record(self.loop.now, i, "sub", {"topic": e.topic})

    def _do_unsubscribe(self, i: int, e: Unsubscribe) -> None:
        self.router.unsubscribe(i, e.topic)
        self.trace.record(self.loop.now, i, "unsub", {"topic": e.topic})

    # ---- events

    def _do_emit(self, i: int, e: Emit) -> None:
        fields = e.fields
        if len(fields) == 1:
            peer = fields.get("peer")
            if type(peer) is str and peer.isalnum():  # the many peer-alive/-connected events: skip json
                kind = "emit." + e.event
                trace = self.trace
                if trace.observed(kind):
                    trace.record_raw(self.loop.now, i, kind, f'{{"peer":"{peer}"}}', dict(fields))
                else:
                    trace.line(self.loop.now, i, kind, f'{{"peer":"{peer}"}}')
                return
        self.trace.record(self.loop.now, i, "emit." + e.event, dict(fields))

    def _do_verdict(self, i: int, e: MessageVerdict) -> None:
        pass  # `_validate` reads the verdict of each delivery it hands a core; none come otherwise

    def _do_result(self, i: int, e: CommandResult) -> None:
        self.trace.record(self.loop.now, i, "command", {"id": e.command_id, "ok": e.ok, "error": e.error})
