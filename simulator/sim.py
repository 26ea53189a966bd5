"""The simulated runtime: turns each `PeerCore`'s effects into network actions and inputs back.

This is `node/`'s job done on the virtual network: gossip through `GossipRouter`, connections
(Dial -> PeerConnected / DialFailed, Disconnect, Ban with connection gating), request/response streams
as bandwidth-sharing flows with timeouts, jobs through the executor registry (the roles' kinds by
simulator/rolejobs.py's cost model, or for real by simulator/realjobs.py), timers through
`next_deadline()`, and every observable thing into the trace. Blobs and weight shards are virtual
(simulator/content.py): each peer's `NodeStore` holds digests, and bytes are built only to travel
(or read from the files real jobs wrote). Like node/driver.py and node/runtime.py, the runtime serves
`/swarm/blob/1` itself from the blob store, and carries out StoreBlob, StoreShard, RespondShard (the
stored shard, or "not-found"), CheckShards (answered with ShardsPresent after the current effects)
and KeepShards (gc sparing shards younger than a grace period). Peers are indices; the core sees
libp2p-style peer ids. Each peer's `now` is the virtual epoch (1.8e9 s) plus simulated time plus its
clock skew.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gossip.envelope import EnvelopeMemo
from gossip.identity import Identity
from gossip.messages import TaskAnnouncement
from simulator import adversaries
from simulator.flows import Flow, FlowScheduler
from simulator.gossip_model import GossipRouter, Msg
from simulator.loop import EventLoop
from simulator.network import LinkProfile, Network
from simulator.scenario import PeerGroup, Scenario, core_config, gossip_config, real_role_jobs
from simulator.content import Content, NodeStore
from simulator.rolejobs import ROLE_KINDS, RoleJobs
from simulator.trace import Trace
from simulator.workload import CostModelExecutor, JobContext, JobOutcome, JobRegistry, RealExecutor, real_function
from swarm import protocols
from swarm.core import PeerCore
from swarm.io import (Ban, CheckShards, CommandResult, Dial, DialFailed, Disconnect, DropBlobs, Emit, JobFinished,
                      KeepShards, LocalCommand, MessageReceived, MessageVerdict, PeerConnected, PeerDisconnected,
                      Publish, RequestReceived, Respond, RespondShard, ResponseReceived, RunJob, SendRequest,
                      ShardSent, ShardsPresent, Started, StoreBlob, StoreShard, Subscribe, Tick, Unsubscribe)
from swarm.rng import Rng, stable_seed

EPOCH = 1.8e9  # virtual wall-clock origin, so message timestamps look like real ones
STREAM_OVERHEAD = 200  # bytes: stream open, protocol negotiation, framing
HANDSHAKE_TRIPS = 3  # one-way trips to connect: TCP, Noise, multistream/yamux
REJOIN_AFTER = 10.0  # like node/'s join loop: re-dial bootstrap peers while we have no links


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
    jobs_running: int = 0
    job_queue: list = field(default_factory=list)
    started_at: float = 0.0
    attack_seq: int = 0
    rejoin_pending: bool = False
    rng: Rng | None = None  # the simulator's stream for this peer (adversary choices, jobs)
    store: NodeStore = field(default_factory=NodeStore)  # its data dir: blobs and shards (digests)

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    @property
    def adversary(self) -> str:
        return self.group.adversary


@dataclass(eq=False)
class Request:
    seq: int
    client: int
    client_inc: int
    server: int
    rid: int
    protocol: str
    data: bytes
    done: bool = False
    flow: Flow | None = None
    shard_rid: int = 0  # the server's RespondShard request id, until ShardSent tells its core the upload ended


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
        self.memo = EnvelopeMemo()
        self.core_config = core_config(s)
        self.content = Content()
        self.nodes: list[Node] = []
        self.by_id: dict[str, int] = {}
        self.pids: list[str] = []  # peer index -> peer id
        self.live: set[int] = set()
        self.jobs = self._job_registry()
        self.controllers: dict[str, adversaries.GroupController] = {}
        self._requests: dict[int, Request] = {}
        self._request_seq = 0
        self._server_rid = 0
        self._command_id = 0
        self._region_rr: dict[str, int] = {}
        self.attack_until = s.duration - s.settle
        self._observe_deliver = trace.observed("deliver")
        self.counts = {"deliveries": 0, "core_calls": 0, "rejected": 0}
        self._effect_handlers = {
            Publish: self._do_publish, Subscribe: self._do_subscribe, Unsubscribe: self._do_unsubscribe,
            Dial: self._do_dial, Disconnect: self._do_disconnect, Ban: self._do_ban, SendRequest: self._do_request,
            Respond: self._do_respond, RunJob: self._do_job, Emit: self._do_emit, CommandResult: self._do_result,
            MessageVerdict: lambda i, e: None, StoreBlob: self._do_store_blob, StoreShard: self._do_store_shard,
            RespondShard: self._do_respond_shard, CheckShards: self._do_check_shards, KeepShards: self._do_keep_shards,
            DropBlobs: self._do_drop_blobs,
        }

    # ------------------------------------------------------------------ helpers

    def core_now(self, node: Node) -> float:
        return EPOCH + self.loop.now + node.skew

    def attacks_allowed(self) -> bool:
        return self.loop.now < self.attack_until

    def rng_for(self, node: Node) -> Rng:
        return node.rng

    def live_honest(self) -> list[int]:
        return sorted(i for i in self.live if not self.nodes[i].adversary)

    def _job_registry(self) -> JobRegistry:
        registry = JobRegistry()
        if self.real_jobs:  # trainer/jobs.py on real files (simulator/realjobs.py)
            from simulator.realjobs import RealRoleJobs
            roles = RealRoleJobs(self.content, self.scenario.jobs, Path(self.workdir))
        else:
            roles = RoleJobs(self.content, self.scenario.jobs)
        for kind in ROLE_KINDS:
            registry.register(kind, roles.executor(kind))
        for kind, spec in sorted(self.scenario.jobs.items()):
            if kind in ROLE_KINDS:
                continue
            cost = CostModelExecutor(spec.seconds, spec.jitter, spec.result_bytes, spec.fail_rate)
            if spec.mode == "real":
                registry.register(kind, RealExecutor(real_function(spec.function), cost))
            else:
                registry.register(kind, cost)
        return registry

    def close(self) -> None:
        """Delete the real jobs' data dirs, if this simulation made them."""
        if self._own_workdir and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ peers

    def create_peer(self, group: PeerGroup, skew: float = 0.0) -> int:
        index = len(self.nodes)
        seed = hashlib.blake2b(f"swarm-sim/{self.seed}/identity/{index}".encode(), digest_size=32).digest()
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
        node.jobs_running, node.job_queue = 0, []
        node.rejoin_pending = False
        from dataclasses import replace
        cfg = replace(self.core_config, roles=node.group.roles)
        node.core = self.core_factory(node.identity, cfg, seed=stable_seed("swarm-sim", self.seed, "core", i, node.incarnation),
                             envelope_memo=self.memo)
        shards = getattr(node.core, "shards", None)
        if shards is not None:  # hash each shard bytes object once, however many peers receive it
            shards.exchange.hasher = self.content.hasher
        node.store.seen.clear()  # the job process's memory, not the data dir
        self.live.add(i)
        self.trace.record(self.loop.now, i, "start", {"incarnation": node.incarnation})
        self._feed(i, Started((self.addr(i),)))
        self._bootstrap(i)
        if node.behaviour is not None:
            node.behaviour.start(self, node)

    def stop_peer(self, i: int, how: str) -> None:
        """`how`: "leave" (graceful) or "crash" (state lost); either way its links close now."""
        node = self.nodes[i]
        if not node.up:
            return
        node.up = False
        node.tick_at = None
        self.live.discard(i)
        self.trace.record(self.loop.now, i, how, {"incarnation": node.incarnation})
        for j in sorted(self.router.conns[i]):
            self._close(i, j, how, notify_self=False)
        self.router.reset_peer(i)
        for flow in self.flows.cancel_peer(i):
            pass  # their requests fail below or by timeout
        for seq in sorted(self._requests):
            req = self._requests[seq]
            if req.client == i or req.server == i:
                self._fail(req, "peer gone")
        node.core = None

    def addr(self, i: int) -> str:
        return f"/sim/{self.net.regions[self.net.region[i]]}/{i}"

    # ------------------------------------------------------------------ driving cores

    def _feed(self, i: int, inp) -> list:
        node = self.nodes[i]
        effects = node.core.handle(EPOCH + self.loop.now + node.skew, inp)
        self.counts["core_calls"] += 1
        handlers = self._effect_handlers
        for effect in effects:
            handlers[type(effect)](i, effect)
            if not node.up:
                return effects
        self._schedule_tick(node)
        return effects

    def feed_later(self, delay: float, i: int, inp) -> None:
        self.loop.after(delay, self._feed_if, i, self.nodes[i].incarnation, inp)

    def _feed_if(self, i: int, incarnation: int, inp) -> None:
        node = self.nodes[i]
        if node.up and node.incarnation == incarnation:
            self._feed(i, inp)

    def command(self, i: int, name: str, args: dict) -> list:
        self._command_id += 1
        return self._feed(i, LocalCommand(self._command_id, name, args))

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
            self._feed(node.index, Tick())

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
                node.behaviour.on_accepted(self, node, msg.topic, msg.data)
        else:
            self.counts["rejected"] += 1
            self.trace.record(now, j, "reject", {"m": msg.hex, "from": i, "why": verdict.reason})
        if len(effects) > 1:
            handlers = self._effect_handlers
            for effect in effects[1:]:
                handlers[type(effect)](j, effect)
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

    def attack(self, node: Node, topic: str, data: bytes) -> None:
        """An adversary's raw push to all its neighbours."""
        msg = self.router.inject(node.index, topic, data)
        self.trace.record(self.loop.now, node.index, "attack", {"m": msg.hex, "topic": topic, "size": len(data),
                                                                "kind": node.adversary})

    def _do_subscribe(self, i: int, e: Subscribe) -> None:
        self.router.subscribe(i, e.topic)
        self.trace.record(self.loop.now, i, "sub", {"topic": e.topic})

    def _do_unsubscribe(self, i: int, e: Unsubscribe) -> None:
        self.router.unsubscribe(i, e.topic)
        self.trace.record(self.loop.now, i, "unsub", {"topic": e.topic})

    def _do_dial(self, i: int, e: Dial) -> None:
        j = self.by_id.get(e.peer)
        if j is None:
            self.trace.record(self.loop.now, i, "dial", {"to": -1, "ok": False})
            self.feed_later(self.scenario.network.dial_timeout, i, DialFailed(e.peer, "unknown address"))
            return
        self.dial(i, j)

    def dial(self, i: int, j: int) -> None:
        """Peer i dials peer j (its core asked, or the runtime bootstraps)."""
        target = self.nodes[j]
        self.trace.record(self.loop.now, i, "dial", {"to": j})
        if j == i or j in self.router.conns[i]:
            return
        if not target.up or not self.net.reachable(i, j):
            self.feed_later(self.scenario.network.dial_timeout, i, DialFailed(target.peer_id, "timeout"))
            return
        rtt_part = self.net.one_way(i, j)
        self.loop.after(HANDSHAKE_TRIPS * rtt_part, self._establish, i, self.nodes[i].incarnation, j,
                        target.incarnation)

    def _establish(self, i: int, inc_i: int, j: int, inc_j: int) -> None:
        a, b = self.nodes[i], self.nodes[j]
        if not a.up or a.incarnation != inc_i:
            return
        why = ""
        if not b.up or b.incarnation != inc_j or not self.net.reachable(i, j):
            why = "unreachable"
        elif i in b.banned:
            why = "refused"
        elif len(self.router.conns[j]) >= self.scenario.network.max_connections:
            why = "connection limit"
        if why:
            self.trace.record(self.loop.now, i, "dial-failed", {"to": j, "why": why})
            self._feed(i, DialFailed(b.peer_id, why))
            return
        if j in self.router.conns[i]:
            return
        self.router.connected(i, j)
        self.trace.record(self.loop.now, i, "connect", {"to": j})
        self._feed(i, PeerConnected(b.peer_id, (self.addr(j),)))
        if b.up and a.up and j in self.router.conns[i]:
            self._feed(j, PeerConnected(a.peer_id, (self.addr(i),)))

    def _bootstrap(self, i: int) -> None:
        """Like `node/`'s join list: dial a few live peers while we have none."""
        node = self.nodes[i]
        if not node.up or self.router.conns[i]:
            return
        candidates = [j for j in sorted(self.live) if j != i and self.net.reachable(i, j)]
        for j in node.rng.sample(candidates, self.scenario.network.bootstrap):
            self.dial(i, j)
        self._schedule_rejoin(i)

    def _schedule_rejoin(self, i: int) -> None:
        """At most one pending re-bootstrap per peer, `REJOIN_AFTER` s after it lost its last link."""
        node = self.nodes[i]
        if node.up and not node.rejoin_pending:
            node.rejoin_pending = True
            self.loop.after(REJOIN_AFTER, self._rejoin, i, node.incarnation)

    def _rejoin(self, i: int, incarnation: int) -> None:
        node = self.nodes[i]
        if node.incarnation != incarnation:
            return
        node.rejoin_pending = False
        if node.up and not self.router.conns[i]:
            self._bootstrap(i)

    def _do_disconnect(self, i: int, e: Disconnect) -> None:
        j = self.by_id.get(e.peer)
        if j is not None:
            self._close(i, j, e.reason)

    def _do_ban(self, i: int, e: Ban) -> None:
        j = self.by_id.get(e.peer)
        if j is None:
            return
        self.nodes[i].banned.add(j)
        self.trace.record(self.loop.now, i, "ban", {"peer": j, "reason": e.reason})
        self._close(i, j, "banned")

    def _close(self, i: int, j: int, reason: str, notify_self: bool = True) -> None:
        if j not in self.router.conns[i]:
            return
        self.router.disconnected(i, j, closed_by_i=reason != "partition")
        self.trace.record(self.loop.now, i, "disconnect", {"peer": j, "reason": reason})
        for seq in sorted(self._requests):
            req = self._requests[seq]
            if {req.client, req.server} == {i, j}:
                self._fail(req, "connection closed")
        if notify_self:
            self.feed_later(0.0, i, PeerDisconnected(self.nodes[j].peer_id))
        self.feed_later(0.0, j, PeerDisconnected(self.nodes[i].peer_id))
        if not self.router.conns[j]:
            self._schedule_rejoin(j)
        if notify_self and not self.router.conns[i]:
            self._schedule_rejoin(i)

    # ---- request/response streams

    def _do_request(self, i: int, e: SendRequest) -> None:
        j = self.by_id.get(e.peer)
        self._request_seq += 1
        req = Request(self._request_seq, i, self.nodes[i].incarnation, -1 if j is None else j, e.request_id,
                      e.protocol, e.data)
        self.trace.record(self.loop.now, i, "request", {"to": req.server, "proto": e.protocol, "rid": e.request_id,
                                                        "size": len(e.data)})
        if j is None or j not in self.router.conns[i]:
            req.done = True
            self.feed_later(0.0, i, ResponseReceived(e.peer, e.protocol, e.request_id, error="not connected"))
            return
        self._requests[req.seq] = req
        req.flow = self.flows.start(i, j, len(e.data) + STREAM_OVERHEAD, lambda fl, r=req: self._request_sent(r))
        self.loop.after(e.timeout, self._timeout, req)

    def _request_sent(self, req: Request) -> None:
        req.flow = None
        self.loop.after(self.net.one_way(req.client, req.server), self._request_arrives, req)

    def _request_arrives(self, req: Request) -> None:
        if req.done:
            return
        server = self.nodes[req.server]
        if not server.up or req.client not in self.router.conns[req.server]:
            self._fail(req, "connection closed")
            return
        self._server_rid += 1
        if req.protocol == protocols.BLOB:  # the runtime serves blobs from its store (node/runtime.py)
            self._serve_blob(server, req, self._server_rid)
            return
        server.served[self._server_rid] = req
        self._feed(req.server, RequestReceived(self.nodes[req.client].peer_id, req.protocol, self._server_rid, req.data))

    def _serve_blob(self, server: Node, req: Request, rid: int) -> None:
        if server.core.is_banned(self.nodes[req.client].peer_id):
            data, error = b"", "banned"
        else:
            digest = bytes(req.data)
            data = self.content.data(digest) if len(digest) == 32 and server.store.has_blob(digest) else None
            data, error = (b"", "not-found") if data is None else (data, None)
        self._send_response(server.index, req, rid, data, error)

    def _do_respond(self, j: int, e: Respond) -> None:
        req = self.nodes[j].served.pop(e.request_id, None)
        self._send_response(j, req, e.request_id, e.data, e.error)

    def _send_response(self, j: int, req: Request | None, rid: int, data: bytes, error: str | None) -> None:
        self.trace.record(self.loop.now, j, "respond", {"rid": rid, "size": len(data), "error": error or ""})
        if req is None or req.done:
            return
        req.flow = self.flows.start(j, req.client, len(data) + STREAM_OVERHEAD,
                                    lambda fl, r=req, d=data, err=error: self._response_sent(r, d, err))

    # ---- the blob and shard stores (node/driver.py's effects)

    def _do_store_blob(self, i: int, e: StoreBlob) -> None:
        if self.content.size(e.digest) == len(e.data):  # the core checked the hash; we know the content
            self.nodes[i].store.add_blob(e.digest)

    def _do_drop_blobs(self, i: int, e: DropBlobs) -> None:
        self.nodes[i].store.drop_blobs(e.digests)

    def _do_store_shard(self, i: int, e: StoreShard) -> None:
        self.nodes[i].store.add_shard(e.digest, self.loop.now)

    def _do_respond_shard(self, j: int, e: RespondShard) -> None:
        node = self.nodes[j]
        req = node.served.pop(e.request_id, None)
        data = e.data  # a piece of a shard this peer is still fetching (the core checked it)
        if data is None and node.store.has_shard(e.shard):
            data = self.content.piece(e.shard, e.offset, e.length, e.digest)
        data, error = (b"", "not-found") if data is None else (data, None)
        if node.behaviour is not None and data:
            data, error = node.behaviour.serve_shard(self, node, data)
        if req is not None and not req.done:
            req.shard_rid = e.request_id
        else:
            self.feed_later(0.0, j, ShardSent(e.request_id))
        self._send_response(j, req, e.request_id, data, error)

    def _shard_sent(self, req: Request) -> None:
        """The server's upload of a shard answer ended (sent, or its request failed): like node/driver.py,
        tell its core, whose upload slot is free again."""
        if req.shard_rid:
            rid, req.shard_rid = req.shard_rid, 0
            server = self.nodes[req.server]
            if server.up:
                self.feed_later(0.0, req.server, ShardSent(rid))

    def _do_check_shards(self, i: int, e: CheckShards) -> None:
        store = self.nodes[i].store
        present = frozenset(d for d in e.digests if store.has_shard(d))
        self.feed_later(0.0, i, ShardsPresent(e.root, present))

    def _do_keep_shards(self, i: int, e: KeepShards) -> None:
        dropped = self.nodes[i].store.gc(e.keep, self.loop.now)
        if dropped:
            self.trace.record(self.loop.now, i, "shards-gc", {"dropped": dropped})

    def _response_sent(self, req: Request, data: bytes, error: str | None) -> None:
        req.flow = None
        self._shard_sent(req)
        self.loop.after(self.net.one_way(req.server, req.client), self._response_arrives, req, data, error)

    def _response_arrives(self, req: Request, data: bytes, error: str | None) -> None:
        if req.done:
            return
        if req.server not in self.router.conns[req.client]:
            self._fail(req, "connection closed")
            return
        req.done = True
        self._requests.pop(req.seq, None)
        client = self.nodes[req.client]
        self.trace.record(self.loop.now, req.client, "response", {"from": req.server, "rid": req.rid,
                                                                  "size": len(data), "error": error or ""})
        if client.up and client.incarnation == req.client_inc:
            self._feed(req.client, ResponseReceived(self.nodes[req.server].peer_id, req.protocol, req.rid, data, error))

    def _timeout(self, req: Request) -> None:
        self._fail(req, "timeout")

    def _fail(self, req: Request, why: str) -> None:
        if req.done:
            return
        req.done = True
        self._requests.pop(req.seq, None)
        if req.flow is not None:
            self.flows.cancel(req.flow)
            req.flow = None
        self._shard_sent(req)
        client = self.nodes[req.client]
        self.trace.record(self.loop.now, req.client, "response", {"from": req.server, "rid": req.rid, "size": 0,
                                                                  "error": why})
        if client.up and client.incarnation == req.client_inc:
            peer = self.nodes[req.server].peer_id if req.server >= 0 else ""
            self.feed_later(0.0, req.client, ResponseReceived(peer, req.protocol, req.rid, error=why))

    # ---- jobs

    def _do_job(self, i: int, e: RunJob) -> None:
        node = self.nodes[i]
        self.trace.record(self.loop.now, i, "job-queued", {"job": e.job_id, "kind": e.kind})
        node.job_queue.append(e)
        self._start_jobs(node)

    def _start_jobs(self, node: Node) -> None:
        while node.job_queue and node.jobs_running < self.scenario.job_slots:
            job = node.job_queue.pop(0)
            node.jobs_running += 1
            executor = self.jobs.get(job.kind)
            if executor is None:
                outcome = JobOutcome(0.0, False, error=f"no executor for job kind {job.kind!r}")
            else:
                ctx = JobContext(node.index, node.peer_id, job.job_id, job.kind, job.payload,
                                 bool(node.behaviour and node.behaviour.forges_jobs),
                                 Rng(stable_seed("swarm-sim", self.seed, "job", node.index, node.incarnation, job.job_id)),
                                 cheat=getattr(node.behaviour, "cheat", ""), store=node.store,
                                 incarnation=node.incarnation)
                outcome = executor.run(ctx)
            self.loop.after(outcome.duration, self._job_done, node, node.incarnation, job, outcome)

    def _job_done(self, node: Node, incarnation: int, job: RunJob, outcome: JobOutcome) -> None:
        if not node.up or node.incarnation != incarnation:
            return
        node.jobs_running -= 1
        honest = outcome.honest if outcome.honest is not None else getattr(outcome.result, "honest", None)
        for digest in outcome.blobs:
            node.store.add_blob(digest)
        for digest in outcome.shards:
            node.store.add_shard(digest, self.loop.now)
        if outcome.ok and job.kind in ("init", "train") and hasattr(outcome.result, "weights"):
            node.store.published[job.payload.task.task_id] = (outcome.result.version, bytes(outcome.result.weights))
        self.trace.record(self.loop.now, node.index, "job-done", {"job": job.job_id, "kind": job.kind, "ok": outcome.ok,
                                                                  "honest": honest, "error": outcome.error})
        self._feed(node.index, JobFinished(job.job_id, outcome.ok, outcome.result, outcome.error))
        if node.up:
            self._start_jobs(node)

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

    def _do_result(self, i: int, e: CommandResult) -> None:
        self.trace.record(self.loop.now, i, "command", {"id": e.command_id, "ok": e.ok, "error": e.error})

    # ------------------------------------------------------------------ scenario actions

    def announce_task(self, group: str, name: str, model: str, env: str, ttl: float, spec=None) -> None:
        """`spec` (a scenario TaskSpec) adds task params, the async level and the trusted validators:
        every peer created so far in the groups it names (an adversary group there is a compromised
        validator the task trusts)."""
        validators = tuple(n.identity.public_key for n in self.nodes
                           if spec is not None and n.group.name in spec.validators)
        for i in self.live_honest():
            node = self.nodes[i]
            if node.group.name == group:
                now = self.core_now(node)
                task = TaskAnnouncement(name=name, model=model, env=env, created_at=now, expires_at=now + ttl,
                                        trainer_keys=(node.identity.public_key,), validator_keys=validators[:64],
                                        async_level=spec.async_level if spec is not None else 2,
                                        params=dict(spec.params) if spec is not None else {})
                self.trace.record(self.loop.now, i, "task", {"task_id": task.task_id, "name": name,
                                                             "expires": round(ttl + self.loop.now, 6)})
                self.command(i, "announce-task", {"task": task})
                return
        self.trace.record(self.loop.now, -1, "task-skipped", {"group": group, "why": "no live honest peer"})

    def probe(self, size: int) -> None:
        honest = self.live_honest()
        if honest:
            self.command(self.rng.choice(honest), "probe", {"size": size})
