"""`PeerCore`: one peer's whole protocol logic as a sans-IO state machine.

    effects = core.handle(now, input)

Time comes in as `now` (seconds, any epoch, never decreasing); randomness comes from the peer's own
seeded `Rng`. The real runtime (`node/`) and the simulator (`simulator/`) drive this same class, so
what the simulator shows is what the network does. This file builds the parts and routes each input
to the one that handles it: every network message through the intake (swarm/intake.py), whose
accepted messages are dispatched here; verdict, quorum and ban rules in swarm/trust.py; task sync in
swarm/tasksync.py; liveness of our links in swarm/links.py and swarm/pings.py; operator commands in
swarm/commands.py; the status in swarm/snapshot.py. Roles see the peer only through their
`RoleContext` (swarm/context.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from gossip import errors, topics
from gossip.envelope import EnvelopeMemo, SignedMessage, open_envelope, seal
from gossip.errors import Rejected
from gossip.identity import Identity
from gossip.messages import (MAX_PEERS_DECLARED, Probe, RolloutCommitment, ShardHave, StatusHeartbeat,
                             TaskAnnouncement, TaskSummary, TrainerCheckpoint, Verdict, WeightManifest)
from gossip.release import by_name as release_named
from gossip.reputation import ReputationLedger
from gossip.seen import SeenCache
from swarm import protocols, snapshot
from swarm.blobrefs import BlobRefs
from swarm.checkrequests import answer_check_request
from swarm.commands import Commands
from swarm.commitments import KEPT_VERSIONS as COMMITTED_VERSIONS, CommitmentBook
from swarm.context import Pending, RoleContext
from swarm.evidence import Evidence
from swarm.floodwatch import FloodConfig, FloodWatch
from swarm.forkchoice import Chains
from swarm.intake import KEPT, Intake
from swarm.linkbeat import LinkBeat
from swarm.links import LinkConfig, Links
from swarm.io import (Ban, DialFailed, Disconnect, DropBlobs, Emit, JobFinished, LocalCommand, MessageReceived,
                      PeerConnected, PeerDisconnected, RequestReceived, Respond, ResponseReceived, ShardSent,
                      ShardsPresent, Started, StreamAbuse, Subscribe, Tick)
from swarm.memberlinks import MemberLinks
from swarm.membership import Membership, MembershipConfig
from swarm.newcomers import NoRoom
from swarm.pings import Pings
from swarm.roles.base import Role
from swarm.roles.mirror import LeechRole, MirrorRole
from swarm.roles.shards import ShardsRole
from swarm.roles.trainer import TrainerRole
from swarm.roles.validator import ValidatorRole
from swarm.roles.worker import WorkerRole
from swarm.rng import Rng
from swarm.stall import StallWatch
from swarm.stats import GossipStats
from swarm.summaries import TaskSummaries
from swarm.taskparams import TaskParams
from swarm.tasks import TaskBook
from swarm.tasksync import TaskSync
from swarm.timers import Timers
from swarm.trust import Trust
from swarm.upkeep import MaintainClock

AGENT = "swarm/0.1.0"
ROLE_CLASSES = {"worker": WorkerRole, "trainer": TrainerRole, "validator": ValidatorRole,
                "mirror": MirrorRole, "leech": LeechRole}


@dataclass(frozen=True)
class CoreConfig:
    roles: tuple[str, ...] = ("relay",)
    agent: str = AGENT
    membership: MembershipConfig = field(default_factory=MembershipConfig)
    links: LinkConfig = field(default_factory=LinkConfig)
    floods: FloodConfig = field(default_factory=FloodConfig)
    max_tasks: int = 32
    clock_skew: float = 30.0  # how far in the future a timestamp may be
    message_window: float = 600.0  # timestamped messages older than this are refused
    seen_capacity: int = 65536
    seen_ttl: float = 900.0  # > message_window, so any replay inside the window is recognised
    sender_rate: float = 200.0  # messages/s one signer may make us process
    sender_burst: float = 400.0
    fresh_signer_rate: float = 20.0  # messages/s from signers we have no record of, per forwarder
    fresh_signer_burst: float = 200.0
    sync_timeout: float = 5.0
    maintain_interval: float = 2.0
    sweep_interval: float = 1.0
    release: str = "current"  # which release this peer speaks (gossip/release.py; "next" in upgrade tests)

    @property
    def gossips_heartbeat(self) -> bool:
        """Whether our heartbeat is gossiped to the whole swarm: only if a task may need us (any role but
        relay). A relay is known to its neighbours by its link (swarm/links.py) and to nobody else: its
        heartbeats were most of what a large swarm delivered, to peers that had no use for them."""
        return any(role != "relay" for role in self.roles)

    def __post_init__(self) -> None:
        release_named(self.release)  # raises for an unknown name
        if self.seen_ttl <= self.message_window:
            raise ValueError("seen_ttl must exceed message_window, or replays slip through")


class PeerCore:
    def __init__(self, identity: Identity, config: CoreConfig | None = None, seed: int = 0,
                 envelope_memo: EnvelopeMemo | None = None) -> None:
        self.identity = identity
        self.config = config = config or CoreConfig()
        self.peer_id = identity.peer_id
        self.rng = Rng(seed)
        self.release = release = release_named(config.release)
        self.ledger = ReputationLedger()
        self.seen = SeenCache(config.seen_capacity, config.seen_ttl)
        self.stats = GossipStats()
        self.stall = StallWatch()  # our own stalls (swarm/stall.py): seen in how late our timers fire
        self.membership = Membership(self.peer_id, config.membership, release, self.stall)
        self.links = Links(config.links, config.membership.gone_after, self.stall, config.sweep_interval)
        self.floods = FloodWatch(config.floods)
        self.tasks = TaskBook(config.max_tasks, config.clock_skew, member=config.gossips_heartbeat,
                              last_seen=lambda peer: (info := self.membership.peers.get(peer)) and info.last_seen)
        self.versions: dict[str, int] = {}  # task id -> policy version this peer holds
        self.listen_addrs: tuple[str, ...] = ()
        self.started_at: float | None = None
        self.timers = Timers()
        self.maintain_clock = MaintainClock(self.timers, config.maintain_interval)
        self.blobs = BlobRefs()  # weights blobs the roles still use; the rest are deleted
        self.pending = Pending()
        self.chains = Chains()  # per task: which trainer's chain this peer follows (swarm/forkchoice.py)
        self.trust = Trust(self.peer_id, identity.public_key, "trainer" in config.roles, self.ledger)
        self.membership.vouches = self._vouches
        self.summaries = TaskSummaries()  # per task, the newest its trainers signed (swarm/summaries.py)
        self.evidence = Evidence(self.tasks, self.trust, self.summaries)
        self.member_links = MemberLinks(self.tasks, self.evidence) if config.gossips_heartbeat else None
        # The memo is shared by many cores in one process (the simulator) so each message is verified once.
        if envelope_memo is not None and envelope_memo.kinds != release.kinds:
            raise ValueError(f"the envelope memo decodes another release's kinds than {release.name!r}")
        opener = envelope_memo.open if envelope_memo is not None else partial(open_envelope, kinds=release.kinds)
        self.intake = Intake(self.peer_id, config, opener, self.ledger, self.seen, self.stats, self.trust.penalise,
                             release, self.membership.announced, self.stall)
        self.context = ctx = RoleContext(
            identity, config.roles, seed, membership=self.membership, ledger=self.ledger, tasks=self.tasks,
            versions=self.versions, blobs=self.blobs, timers=self.timers, seen=self.seen, stats=self.stats,
            trust=self.trust, pending=self.pending, chains=self.chains, release=release, stall=self.stall, summaries=self.summaries)
        self.roles: list[Role] = [ROLE_CLASSES[r](ctx) for r in config.roles if r in ROLE_CLASSES]
        self.shards = ShardsRole(ctx, ctx.rng("shards"))  # every peer serves what it holds
        ctx.attach_shards(self.shards)
        self.trust.on_banned(self.shards.on_banned)
        self.sync = TaskSync(self.tasks, self.membership, self.pending, config.sync_timeout, self._learn_task,
                             self.trust.penalise)
        self.commands = Commands(identity, ctx, self.tasks, self.seen, self.stats, self.rng, self.trust,
                                 self._learn_task)
        self.pings = Pings(self.links, self.membership, self.pending, self.stall, self.trust.penalise, opener,
                           config.links.ping_timeout, lambda: self.started_at is not None, self._signed_beat,
                           lambda now, beat, peer: self._on_heartbeat(now, beat, peer, peer, gossip=False))
        self._heartbeat_seq = -1
        self.link_beat = LinkBeat()
        # (interval, swarm size) our last gossiped heartbeat declared; None until the first is out (a
        # heartbeat in a ping does not count: the first on gossip still waits for a swarm size)
        self._pace: tuple[float, int] | None = None

    # ------------------------------------------------------------------ driving

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()

    def handle(self, now: float, inp: object) -> list:
        late = self.stall.observe(now, self.timers.next_deadline())
        if late is not None:  # appended: a MessageReceived's answer must start with its verdict
            return self._handle(now, inp) + [Emit("stalled", {"seconds": round(late, 3)})]
        return self._handle(now, inp)

    def _handle(self, now: float, inp: object) -> list:
        if isinstance(inp, MessageReceived):
            self.links.heard_from(now, inp.from_peer)
            effects = self.intake.receive(now, inp, self._dispatch)
            if effects[0].accepted:
                self.floods.accepted_from(inp.from_peer)
            return effects
        if isinstance(inp, Tick):
            if inp.heard:
                self.links.heard_by_transport(inp.heard)
            return self._on_tick(now)
        if isinstance(inp, Started):
            return self._on_started(now, inp)
        if isinstance(inp, PeerConnected):
            if self.ledger.is_banned(inp.peer):
                return [Ban(inp.peer, "banned")]
            if self.floods.refusing(inp.peer, now):
                return [Disconnect(inp.peer, "flooded us before")]
            self.membership.on_connected(inp.peer, inp.addrs)
            self.links.opened(now, inp.peer)
            if self.started_at is not None and self.config.gossips_heartbeat and "heartbeat" not in self.timers:
                self.timers.set("heartbeat", now + (self.config.membership.first_beat_wait
                                                    if self._pace is None else 0.0))
            return ([Emit("peer-connected", {"peer": inp.peer})] + self.pings.ping(now, inp.peer)
                    + self.shards.on_connected(now, inp.peer) + [e for r in self.roles for e in r.on_connected(now, inp.peer)])
        if isinstance(inp, PeerDisconnected):
            self.membership.on_disconnected(inp.peer)
            self.maintain_clock.link_closed(now)
            self.links.closed(inp.peer)
            self.floods.closed(inp.peer)
            self.shards.on_disconnected(inp.peer)
            return [Emit("peer-disconnected", {"peer": inp.peer})]
        if isinstance(inp, ShardsPresent):
            return self.shards.on_present(now, inp.root, inp.present)
        if isinstance(inp, ShardSent):
            return self.shards.on_sent(now, inp.request_id)
        if isinstance(inp, DialFailed):
            self.membership.on_dial_failed(now, inp.peer)
            return []
        if isinstance(inp, RequestReceived):
            self.links.heard_from(now, inp.peer)
            return self._on_request(now, inp)
        if isinstance(inp, ResponseReceived):
            if inp.error is None:  # an answer; an error may be our own runtime's (timeout, not connected)
                self.links.heard_from(now, inp.peer)
            return self._on_response(now, inp)
        if isinstance(inp, LocalCommand):
            return self.commands.handle(now, inp)
        if isinstance(inp, JobFinished):
            owner = self.pending.jobs.pop(inp.job_id, None)
            return owner[0].on_job_finished(now, owner[1], inp) if owner else []
        if isinstance(inp, StreamAbuse):
            return self.trust.penalise(now, inp.peer, Rejected(errors.STREAM_ABUSE, inp.reason))
        raise TypeError(f"PeerCore cannot handle {type(inp).__name__}")

    def is_banned(self, peer: str) -> bool:
        return self.ledger.is_banned(peer)

    def book(self, task_id: str) -> CommitmentBook:
        """The rollout commitments this peer has seen for a task."""
        return self.trust.book(task_id)

    def snapshot(self, now: float) -> dict:
        """Everything a status screen needs, as plain JSON-able data."""
        return snapshot.status(self, now)

    # ------------------------------------------------------------------ timers

    def _on_started(self, now: float, inp: Started) -> list:
        self.listen_addrs = inp.listen_addrs
        self.started_at = now
        # The first heartbeat waits for the first link (PeerConnected): before that it reaches nobody.
        self.timers.set("sweep", now + self.config.sweep_interval)
        self.maintain_clock.start(now)
        return [Subscribe(t) for t in topics.GLOBAL_TOPICS + tuple(self.release.topics)]

    def _on_tick(self, now: float) -> list:
        effects: list = []
        for name in self.timers.pop_due(now):
            if name == "heartbeat":
                uptime = now - self.started_at if self.started_at is not None else 0.0
                interval, size = self._pace = self.membership.pace(uptime)
                for topic in self.tasks.beat_topics(self.config.roles):  # members-only tasks: swarm/tasks.py
                    effects += self.context.publish(now, topic, self._heartbeat(now, interval, size))
                for topic, message in self.release.extras(now, self._uptime(now)):
                    effects += self.context.publish(now, topic, message)
                self.timers.set("heartbeat", now + interval * self.rng.uniform(0.9, 1.0))
            elif name == "sweep":
                if not self.config.gossips_heartbeat:  # our pace is still the yardstick for others' intervals
                    self.membership.pace(self._uptime(now))
                effects += self.pings.check(now)
                effects += self.membership.sweep(now, self.links.judged()) + self.tasks.expire(now)
                effects += self.floods.cut(now, self.membership, self.trust.penalise)
                effects += self._forget_dropped(now)
                self.pending.expire(now)
                self.timers.set("sweep", now + self.config.sweep_interval)
            elif name == "maintain":
                dials, short = self.membership.maintain(now, self.rng, self.ledger.is_banned, self.member_links)
                effects += dials + (self.pings.shuffle(now, self.rng) if short else [])
                effects += self.shards.reach_holders(now)  # retries a holder dial that failed
                self.maintain_clock.ran(now, idle=not self.roles and not dials and not short)
            else:
                prefix = name.split(":", 1)[0]
                if prefix == self.shards.name:
                    effects += self.shards.on_timer(now, name)
                for role in self.roles:
                    if role.name == prefix:
                        effects += role.on_timer(now, name)
        return effects

    def _uptime(self, now: float) -> float:
        return now - self.started_at if self.started_at is not None else 0.0

    def _signed_beat(self, now: float, fresh: bool = False) -> bytes:
        """Our heartbeat for a link (swarm/pings.py; one signed for a burst: swarm/linkbeat.py): the interval
        of our last gossiped one (the pace the neighbour should expect of our gossip), our swarm size
        estimate as it is now, and a peer exchange sample (a relay gossips no heartbeat: its links are how
        peers learn addresses). Newcomers borrow the median of the sizes their peers declare (Membership.pace),
        and in a flash crowd most links are to newcomers: so before our first gossiped heartbeat we declare
        no size (our count of the few peers heard so far is no estimate), and after it our current one."""
        interval, size = self.membership.pace(self._uptime(now))
        interval, size = (interval, 0) if self._pace is None else (self._pace[0], size)
        key = (self.tasks.ids(), tuple(self.versions.items()), self.listen_addrs)
        return self.link_beat.get(now, interval, key, lambda: seal(self.identity, self._heartbeat(now, interval, size)).wire,
                                  lambda: self._heartbeat_seq, fresh)

    def _heartbeat(self, now: float, interval: float, size: int = 0, exchange: bool = True) -> StatusHeartbeat:
        # Milliseconds since the epoch as the floor of seq: a restarted peer's seq still grows.
        self._heartbeat_seq = max(self._heartbeat_seq + 1, int(now * 1000))
        return self.release.heartbeat(
            self._uptime(now), seq=self._heartbeat_seq, sent_at=now, interval=interval, roles=self.config.roles, agent=self.config.agent,
            listen_addrs=self.listen_addrs[:8], tasks=self.tasks.ids()[:32],
            versions={k: v for k, v in sorted(self.versions.items())[:32]},
            known_peers=self.membership.exchange_sample(self.rng) if exchange else (),
            peers=min(size, MAX_PEERS_DECLARED))

    # ------------------------------------------------------------------ accepted gossip, routed

    def _dispatch(self, now: float, topic: str, signed: SignedMessage, signer: str, forwarder: str,
                  net: str) -> list:
        """A message the intake accepted so far; may still raise Rejected."""
        message = signed.message
        if isinstance(message, StatusHeartbeat):
            return self._on_heartbeat(now, message, signer, forwarder, via=net)
        if isinstance(message, TaskAnnouncement):
            self.stats.on_delivered("task", None)
            return self._learn_task(now, signed, via=net)
        if isinstance(message, Probe):
            self.intake.check_window(now, message.sent_at, "probe")
            self.stats.on_delivered("probe", now - message.sent_at)
            return []
        if topic in self.release.topics:  # a kind this release adds, on its own topic: counted
            self.intake.check_window(now, message.sent_at, signed.kind)
            self.stats.on_delivered(signed.kind, now - message.sent_at)
            return []
        return self._on_task_message(now, topic, signed, signer)

    def _on_heartbeat(self, now: float, message: StatusHeartbeat, signer: str, forwarder: str,
                      gossip: bool = True, via: str | None = None) -> list:
        """`via`: the source network a gossiped heartbeat came through (None: over the signer's link)."""
        vouched = self.membership.vouched(signer) if via is not None else None  # asked once: not cheap
        stranger = via is not None and signer not in self.membership.peers  # kept, it counts against its forwarder
        try:
            effects = self.membership.on_heartbeat(now, signer, message, via, vouched)
        except NoRoom:  # past the newcomer budget: no entry, yet relayed if it may be of use (swarm/newcomers.py)
            if self.evidence.works_on_held_task(signer, message):
                return []
            if stranger and self.floods.kept_from(now, forwarder, signer):
                return [KEPT] + self.floods.cut(now, self.membership, self.trust.penalise)
            return [KEPT]
        # Relayed only if someone can use it: its signer vouched for (linked to us: the first hop of every
        # heartbeat; named by a task; proven work) or shown to work on a task it names that we hold
        # (swarm/evidence.py: naming a task is free). A fresh key's stops at its signer's neighbours.
        if via is not None and not vouched and not self.evidence.works_on_held_task(signer, message):
            effects.insert(0, KEPT)
            if stranger and self.floods.kept_from(now, forwarder, signer):
                effects += self.floods.cut(now, self.membership, self.trust.penalise)
        if self._pace is None and message.peers and "heartbeat" in self.timers:
            self.timers.set("heartbeat", now)  # our first: we now have a swarm size to go by
        effects += self.shards.on_heartbeat(now, signer, message.versions)
        if gossip:  # a ping's heartbeat is not a gossip delivery (the latency figures are gossip's)
            self.stats.on_delivered("status", now - message.sent_at)
        return effects + self.sync.ask(now, message.tasks, signer, forwarder)

    def _vouches(self, peer: str) -> bool:
        """Something costly stands behind `peer` (swarm/membership.py): a trusted checker passed its work,
        or it trains or validates a task one of our roles works on."""
        if peer in self.trust.proven:
            return True
        worked = frozenset(task_id for role in self.roles for task_id in getattr(role, "tasks", ()))
        return bool(worked) and self.tasks.names(peer, worked)

    def _learn_task(self, now: float, signed: SignedMessage, own: bool = False, via: str = "") -> list:
        """Store a task that came through source network `via` (raises Rejected); roles hear about it
        the first time only."""
        task_id = signed.message.task_id
        new = task_id not in self.tasks.tasks
        effects = self.tasks.add(now, signed, own, via)
        effects += self._forget_dropped(now)  # a task it evicted
        if new:
            for role in self.roles:
                effects += role.on_task(now, self.tasks.tasks[task_id])
        return effects

    def _forget_dropped(self, now: float) -> list:
        """Tasks that left the table: the exchange and the roles let go (a trainer's next job crashed on them)."""
        dropped, self.tasks.dropped = self.tasks.dropped, []
        for task_id in dropped:
            self.summaries.forget(task_id)
        return [e for t in dropped for e in self.shards.forget_task(t) + sum((r.forget_task(now, t) for r in self.roles), [])]

    def _on_task_message(self, now: float, topic: str, signed: SignedMessage, signer: str) -> list:
        """Rollouts, verdicts and weight messages: accepted for known tasks and relayed."""
        task_id = topics.task_of_topic(topic)
        if task_id not in self.tasks.tasks or getattr(signed.message, "task_id", None) != task_id:
            raise Rejected(errors.UNKNOWN_TASK, f"{signed.kind} for a task this peer does not follow")
        stamp = getattr(signed.message, "created_at", None) or getattr(signed.message, "sent_at", None)
        if stamp is not None:
            self.intake.check_window(now, stamp, signed.kind)
        task = self.tasks.tasks[task_id].task
        effects: list = []
        self.trust.authorise(task, signed)
        if isinstance(signed.message, ShardHave):
            effects += self.shards.on_have(now, signed.message, signer)
        if isinstance(signed.message, WeightManifest):
            self.tasks.heard_manifest(task_id, now)  # authorised above: signed by one of its trainers
            effects += self._judge_chain(now, task, signed)
        if isinstance(signed.message, TaskSummary):  # authorised above: signed by one of its trainers
            self.summaries.add(signed.message, signer)
        if isinstance(signed.message, TrainerCheckpoint):
            self.chains.of(task_id, TaskParams.of(task).takeover_s).judge_checkpoint(task, signed.message, signed.signer)
        if isinstance(signed.message, RolloutCommitment):
            self.trust.record_commitment(task_id, signed, signer)
            chain = self.chains.tasks.get(task_id)  # its newest version, as the task's trainers signed it
            if chain is not None and chain.max_version > COMMITTED_VERSIONS:
                gone = self.trust.book(task_id).forget_below(chain.max_version - COMMITTED_VERSIONS)
                if gone:
                    effects.append(DropBlobs(tuple(gone)))
        if isinstance(signed.message, Verdict):
            effects += self.trust.on_verdict(now, task, signed)
        for role in self.roles:
            effects += role.on_message(now, signed, signer)
        self.stats.on_delivered(signed.kind, None)
        return effects

    def _judge_chain(self, now: float, task: TaskAnnouncement, signed: SignedMessage) -> list:
        """The fork choice refuses a losing or bad manifest (raises Rejected) before any role sees it."""
        m: WeightManifest = signed.message
        fork = self.chains.of(task.task_id, TaskParams.of(task).takeover_s)
        if not fork.judge(now, task, m, signed.signer):
            return []
        return [Emit("chain-switched", {"task_id": task.task_id, "term": m.term, "rank": m.rank,
                                        "version": m.version})]

    # ------------------------------------------------------------------ requests

    def _on_request(self, now: float, inp: RequestReceived) -> list:
        if self.ledger.is_banned(inp.peer):
            return [Respond(inp.request_id, error=errors.BANNED)]
        if inp.protocol == protocols.SHARD:
            return self.shards.on_request(now, inp.peer, inp.request_id, inp.data)
        answer = {protocols.PING: self.pings.on_ping, protocols.SYNC: self.sync.answer,
                  protocols.CHECK: partial(answer_check_request, self)}.get(inp.protocol)
        return answer(now, inp) if answer is not None else [Respond(inp.request_id, error="unsupported-protocol")]

    def _on_response(self, now: float, inp: ResponseReceived) -> list:
        pending = self.pending.requests.pop(inp.request_id, None)
        if pending is None or pending[0] != inp.peer:
            return [Emit("unexpected-response", {"peer": inp.peer, "request_id": inp.request_id})]
        owner, tag = pending[3], pending[4]
        if owner is not None:
            return owner.on_response(now, tag, inp)
        if inp.protocol == protocols.PING:
            return self.pings.on_answer(now, inp)
        if inp.error is not None:
            return [Emit("request-failed", {"peer": inp.peer, "protocol": inp.protocol, "error": inp.error[:200]})]
        if inp.protocol == protocols.SYNC:
            return self.sync.on_response(now, inp)
        return []
