"""`PeerCore`: one peer's whole protocol logic as a sans-IO state machine.

    effects = core.handle(now, input)

Time comes in as `now` (seconds, any epoch, never decreasing); randomness comes from the peer's own
seeded `Rng`. The real runtime (`node/`) and the simulator (`simulator/`) drive this same class, so
what the simulator shows is what the network does. Every message from the network passes one intake
pipeline (size, envelope, signature, topic, bans, replays, rate) before any handler sees it; a
rejection is an effect plus a counted reason, never an exception.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gossip import errors, topics
from gossip.envelope import EnvelopeMemo, SignedMessage, open_envelope, seal
from gossip.errors import Rejected
from gossip.identity import Identity, peer_id_from_public_key
from gossip.messages import (MAX_PEERS_DECLARED, Message, Probe, RolloutCommitment, ShardHave, StatusHeartbeat,
                             TaskAnnouncement, TensorEntry, Verdict, WeightManifest)
from gossip.reputation import ReputationLedger
from gossip.seen import SeenCache
from swarm import protocols
from swarm.blobrefs import BlobRefs
from swarm.commitments import CommitmentBook
from swarm.io import (Ban, CommandResult, DialFailed, Emit, JobFinished, LocalCommand, MessageReceived,
                      MessageVerdict, PeerConnected, PeerDisconnected, Publish, RequestReceived, Respond,
                      ResponseReceived, RunJob, SendRequest, ShardSent, ShardsPresent, Started, Subscribe, Tick)
from swarm.membership import Membership, MembershipConfig
from swarm.ratelimit import TokenBuckets
from swarm.roles.base import Role
from swarm.roles.mirror import LeechRole, MirrorRole
from swarm.roles.shards import ShardsRole
from swarm.roles.trainer import TrainerRole
from swarm.roles.validator import ValidatorRole
from swarm.roles.worker import WorkerRole
from swarm.rng import Rng, stable_seed
from swarm.stats import GossipStats
from swarm.tasks import TaskBook
from swarm.timers import Timers

AGENT = "swarm/0.1.0"
VALIDATOR_QUORUM = 2  # distinct trusted validators whose failed verdicts ban a worker without a trainer's
OPINIONS_KEPT = 8192  # commitments whose trusted verdicts we remember
ACCEPTED = MessageVerdict(True)  # frozen: one instance serves every accepted message


@dataclass(frozen=True)
class CoreConfig:
    roles: tuple[str, ...] = ("relay",)
    agent: str = AGENT
    membership: MembershipConfig = field(default_factory=MembershipConfig)
    max_tasks: int = 32
    clock_skew: float = 30.0  # how far in the future a timestamp may be
    message_window: float = 600.0  # timestamped messages older than this are refused
    seen_capacity: int = 65536
    seen_ttl: float = 900.0  # > message_window, so any replay inside the window is recognised
    sender_rate: float = 200.0  # messages/s one signer may make us process
    sender_burst: float = 400.0
    sync_timeout: float = 5.0
    maintain_interval: float = 2.0
    sweep_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.seen_ttl <= self.message_window:
            raise ValueError("seen_ttl must exceed message_window, or replays slip through")


class PeerCore:
    def __init__(self, identity: Identity, config: CoreConfig | None = None, seed: int = 0,
                 envelope_memo: EnvelopeMemo | None = None) -> None:
        self.identity = identity
        # Shared by many cores in one process (the simulator) so each message is verified once.
        self._open = envelope_memo.open if envelope_memo is not None else open_envelope
        self.config = config or CoreConfig()
        self.peer_id = identity.peer_id
        self.rng = Rng(seed)
        self.ledger = ReputationLedger()
        self.seen = SeenCache(self.config.seen_capacity, self.config.seen_ttl)
        self.buckets = TokenBuckets(self.config.sender_rate, self.config.sender_burst)
        self.stats = GossipStats()
        self.membership = Membership(self.peer_id, self.config.membership)
        self.tasks = TaskBook(self.config.max_tasks, self.config.clock_skew)
        self.versions: dict[str, int] = {}  # task id -> policy version this peer holds
        self.listen_addrs: tuple[str, ...] = ()
        self.started_at: float | None = None
        self.timers = Timers()
        self._next_request_id = 1
        # request id -> (peer, protocol, deadline, owning role or None for the core, the role's tag)
        self._requests: dict[int, tuple[str, str, float, Role | None, object]] = {}
        self._next_job_id = 1
        self._jobs: dict[int, tuple[Role, object]] = {}
        self.commitments: dict[str, CommitmentBook] = {}
        self._opinions: OrderedDict[bytes, dict[bytes, tuple[bool, str]]] = OrderedDict()  # commitment -> verdicts
        role_classes = {"worker": WorkerRole, "trainer": TrainerRole, "validator": ValidatorRole,
                        "mirror": MirrorRole, "leech": LeechRole}
        self.roles: list[Role] = [role_classes[r](self) for r in self.config.roles if r in role_classes]
        self.shards = ShardsRole(self, Rng(stable_seed("shards", seed)))  # every peer serves what it holds
        self.blobs = BlobRefs()  # weights blobs the roles still use; the rest are deleted
        self._heartbeat_seq = -1
        self._probe_seq = -1

    # ------------------------------------------------------------------ driving

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()

    def handle(self, now: float, inp: object) -> list:
        if isinstance(inp, MessageReceived):
            return self._on_message(now, inp)
        if isinstance(inp, Tick):
            return self._on_tick(now)
        if isinstance(inp, Started):
            return self._on_started(now, inp)
        if isinstance(inp, PeerConnected):
            if self.ledger.is_banned(inp.peer):
                return [Ban(inp.peer, "banned")]
            self.membership.on_connected(inp.peer, inp.addrs)
            if self.started_at is not None and "heartbeat" not in self.timers:
                self.timers.set("heartbeat", now + (self.config.membership.first_beat_wait
                                                    if self._heartbeat_seq < 0 else 0.0))
            return [Emit("peer-connected", {"peer": inp.peer})] + self.shards.on_connected(now, inp.peer)
        if isinstance(inp, PeerDisconnected):
            self.membership.on_disconnected(inp.peer)
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
            return self._on_request(now, inp)
        if isinstance(inp, ResponseReceived):
            return self._on_response(now, inp)
        if isinstance(inp, LocalCommand):
            return self._on_command(now, inp)
        if isinstance(inp, JobFinished):
            owner = self._jobs.pop(inp.job_id, None)
            return owner[0].on_job_finished(now, owner[1], inp) if owner else []
        raise TypeError(f"PeerCore cannot handle {type(inp).__name__}")

    def is_banned(self, peer: str) -> bool:
        return self.ledger.is_banned(peer)

    # ------------------------------------------------------------------ timers

    def _on_started(self, now: float, inp: Started) -> list:
        self.listen_addrs = inp.listen_addrs
        self.started_at = now
        # The first heartbeat waits for the first link (PeerConnected): before that it reaches nobody.
        self.timers.set("sweep", now + self.config.sweep_interval)
        self.timers.set("maintain", now + self.config.maintain_interval)
        return [Subscribe(t) for t in topics.GLOBAL_TOPICS]

    def _on_tick(self, now: float) -> list:
        effects: list = []
        for name in self.timers.pop_due(now):
            if name == "heartbeat":
                uptime = now - self.started_at if self.started_at is not None else 0.0
                interval, size = self.membership.pace(uptime)
                effects += self._publish(now, topics.STATUS, self._heartbeat(now, interval, size))
                self.timers.set("heartbeat", now + interval * self.rng.uniform(0.9, 1.0))
            elif name == "sweep":
                effects += self.membership.sweep(now) + self.tasks.expire(now)
                effects += self._expire_requests(now)
                self.timers.set("sweep", now + self.config.sweep_interval)
            elif name == "maintain":
                effects += self.membership.maintain(now, self.rng, self.ledger.is_banned)
                effects += self.shards.reach_holders(now)  # retries a holder dial that failed
                self.timers.set("maintain", now + self.config.maintain_interval)
            else:
                prefix = name.split(":", 1)[0]
                if prefix == self.shards.name:
                    effects += self.shards.on_timer(now, name)
                for role in self.roles:
                    if role.name == prefix:
                        effects += role.on_timer(now, name)
        return effects

    def _heartbeat(self, now: float, interval: float, size: int = 0) -> StatusHeartbeat:
        # Milliseconds since the epoch as the floor of seq: a restarted peer's seq still grows.
        self._heartbeat_seq = max(self._heartbeat_seq + 1, int(now * 1000))
        return StatusHeartbeat(
            seq=self._heartbeat_seq, sent_at=now, interval=interval, roles=self.config.roles, agent=self.config.agent,
            listen_addrs=self.listen_addrs[:8], tasks=self.tasks.ids()[:32],
            versions={k: v for k, v in sorted(self.versions.items())[:32]},
            known_peers=self.membership.exchange_sample(self.rng), peers=min(size, MAX_PEERS_DECLARED))

    # ------------------------------------------------------------------ what roles may ask of the core

    def publish(self, now: float, topic: str, message: Message) -> list:
        return self._publish(now, topic, message)

    def new_job(self, owner: Role, tag: object, kind: str, payload: object) -> RunJob:
        job_id = self._next_job_id
        self._next_job_id += 1
        self._jobs[job_id] = (owner, tag)
        return RunJob(job_id, kind, payload)

    def new_request(self, now: float, owner: Role, tag: object, peer: str, protocol: str, data: bytes,
                    timeout: float = 10.0) -> SendRequest:
        request_id = self._next_request_id
        self._next_request_id += 1
        self._requests[request_id] = (peer, protocol, now + timeout * 2, owner, tag)
        return SendRequest(peer, protocol, request_id, data, timeout)

    def set_timer(self, name: str, at: float) -> None:
        """Role timers are named '<role>:...'; Tick routes them back to that role."""
        self.timers.set(name, at)

    def _publish(self, now: float, topic: str, message: Message) -> list:
        signed = seal(self.identity, message)
        self.seen.add(signed.msg_id, now)
        self.stats.on_published(topic, len(signed.wire))
        if isinstance(message, RolloutCommitment):  # verdicts about our own batches are about a known commitment
            self.book(message.task_id).add(signed.msg_id, message, self.peer_id, self.identity.public_key)
        return [Publish(topic, signed.wire)]

    # ------------------------------------------------------------------ gossip intake

    def _signer_id(self, public_key: bytes) -> str:
        # peer_id_from_public_key keeps one bounded cache for the process: a 1,000-core simulation
        # would otherwise hold a million per-core entries.
        return peer_id_from_public_key(public_key)

    def _on_message(self, now: float, inp: MessageReceived) -> list:
        blame = forwarder = inp.from_peer
        ledger = self.ledger
        try:
            if ledger.is_banned(forwarder):
                raise Rejected(errors.BANNED, f"forwarder {forwarder} is banned")
            allowed = topics.allowed_kinds(inp.topic)
            if not allowed:
                raise Rejected(errors.WRONG_TOPIC, f"unknown topic {inp.topic[:80]!r}")
            signed = self._open(inp.data)
            signer = peer_id_from_public_key(signed.signer)
            if signer == self.peer_id:
                return [ACCEPTED]  # our own message echoed back: nothing to learn
            if signed.kind not in allowed:
                raise Rejected(errors.WRONG_TOPIC, f"{signed.kind} on {inp.topic}")
            if ledger.is_banned(signer):
                raise Rejected(errors.BANNED, f"signer {signer} is banned")
            if not self.seen.add(signed.msg_id, now):
                # py-libp2p validates concurrent copies of one message before marking it seen, so an
                # honest forwarder can trip this now and then: it costs little, a replayer pays in bulk.
                raise Rejected(errors.DUPLICATE, f"{signed.kind} {signed.msg_id.hex()[:16]} seen before")
            blame = signer
            if not self.buckets.take(signer, now):
                raise Rejected(errors.RATE_LIMITED, f"{signer} above {self.config.sender_rate} msg/s")
            effects = self._dispatch(now, inp.topic, signed, signer, forwarder)
        except Rejected as rej:
            if rej.reason in (errors.OUT_OF_WINDOW, errors.STALE):
                blame = forwarder  # signed in its window; whoever delivers it late is at fault
            self.stats.on_received(inp.topic, len(inp.data), accepted=False)
            return [MessageVerdict(False, rej.reason)] + self._penalise(now, blame, rej)
        self.stats.on_received(inp.topic, len(inp.data), accepted=True)
        ledger.accept_relayed(signer, forwarder, now)  # relaying valid traffic is good behaviour too
        return [ACCEPTED] + effects

    def _penalise(self, now: float, peer: str, rej: Rejected) -> list:
        effects: list = [Emit("message-rejected", {"peer": peer, "reason": rej.reason, "detail": rej.detail[:200]})]
        if self.ledger.reject(peer, rej.reason, now):
            self.shards.on_banned(peer)
            effects += [Ban(peer, f"too many bad messages ({rej.reason})"),
                        Emit("peer-banned", {"peer": peer, "reason": rej.reason})]
        return effects

    def _dispatch(self, now: float, topic: str, signed: SignedMessage, signer: str, forwarder: str) -> list:
        message = signed.message
        if isinstance(message, StatusHeartbeat):
            effects = self.membership.on_heartbeat(now, signer, message)
            if self._heartbeat_seq < 0 and message.peers and "heartbeat" in self.timers:
                self.timers.set("heartbeat", now)  # our first: we now have a swarm size to go by
            effects += self.shards.on_heartbeat(now, signer, message.versions)
            self.stats.on_delivered("status", now - message.sent_at)
            return effects + self._ask_for_tasks(now, message.tasks, signer, forwarder)
        if isinstance(message, TaskAnnouncement):
            self.stats.on_delivered("task", None)
            return self._learn_task(now, signed)
        if isinstance(message, Probe):
            self._check_window(now, message.sent_at, "probe")
            self.stats.on_delivered("probe", now - message.sent_at)
            return []
        return self._on_task_message(now, topic, signed, signer)

    def _learn_task(self, now: float, signed: SignedMessage) -> list:
        """Store a task (raises Rejected); roles hear about it the first time only."""
        task_id = signed.message.task_id
        new = task_id not in self.tasks.tasks
        effects = self.tasks.add(now, signed)
        if new:
            for role in self.roles:
                effects += role.on_task(now, self.tasks.tasks[task_id])
        return effects

    def _check_window(self, now: float, at: float, what: str) -> None:
        if at < now - self.config.message_window or at > now + self.config.clock_skew:
            raise Rejected(errors.OUT_OF_WINDOW, f"{what} stamped {at:.3f}, now {now:.3f}")

    def _on_task_message(self, now: float, topic: str, signed: SignedMessage, signer: str) -> list:
        """Rollouts, verdicts and weight messages: accepted for known tasks and relayed."""
        task_id = topics.task_of_topic(topic)
        if task_id not in self.tasks.tasks or getattr(signed.message, "task_id", None) != task_id:
            raise Rejected(errors.UNKNOWN_TASK, f"{signed.kind} for a task this peer does not follow")
        stamp = getattr(signed.message, "created_at", None) or getattr(signed.message, "sent_at", None)
        if stamp is not None:
            self._check_window(now, stamp, signed.kind)
        task = self.tasks.tasks[task_id].task
        effects: list = []
        if isinstance(signed.message, WeightManifest) and signed.signer not in task.trainer_keys:
            raise Rejected(errors.UNAUTHORIZED, "weight manifest signed by a key the task does not name")
        if isinstance(signed.message, ShardHave):
            effects += self.shards.on_have(now, signed.message, signer)
        if isinstance(signed.message, RolloutCommitment):
            self._record_commitment(task_id, signed, signer)
        if isinstance(signed.message, Verdict):
            effects += self._on_verdict(now, task, signed)
        for role in self.roles:
            effects += role.on_message(now, signed, signer)
        self.stats.on_delivered(signed.kind, None)
        return effects

    def book(self, task_id: str) -> CommitmentBook:
        if task_id not in self.commitments:
            self.commitments[task_id] = CommitmentBook()
        return self.commitments[task_id]

    def _record_commitment(self, task_id: str, signed: SignedMessage, signer: str) -> None:
        book = self.book(task_id)
        earlier = book.replay_of(signed.msg_id, signed.message, signed.signer)
        if earlier is not None:
            # Two commitments signed by one worker for the same batch: proof anyone can check.
            raise Rejected(errors.CHEATED, f"replayed rollouts: repeats commitment {earlier.hex()[:16]}")
        book.add(signed.msg_id, signed.message, signer, signed.signer)

    def trusts_verdicts_of(self, task: TaskAnnouncement, key: bytes) -> bool:
        return key in task.validator_keys or key in task.trainer_keys

    def is_trainer_of(self, task: TaskAnnouncement) -> bool:
        return "trainer" in self.config.roles and self.identity.public_key in task.trainer_keys

    def _on_verdict(self, now: float, task: TaskAnnouncement, signed: SignedMessage) -> list:
        verdict: Verdict = signed.message
        seen = self.book(task.task_id).get(verdict.commitment_id)
        if seen is None:
            raise Rejected(errors.UNKNOWN_COMMITMENT, f"verdict about {verdict.commitment_id.hex()[:16]}")
        if seen.worker_key != verdict.subject:
            raise Rejected(errors.SCHEMA, "verdict subject is not the signer of the commitment")
        if not self.trusts_verdicts_of(task, signed.signer) or self.is_trainer_of(task):
            return []  # a trainer bans on its own re-check (roles/trainer.py), not on others' word
        return self._weigh_verdicts(now, task, seen, verdict, signed.signer)

    def _weigh_verdicts(self, now: float, task: TaskAnnouncement, seen, verdict: Verdict, key: bytes) -> list:
        """What the trusted verdicts about one commitment prove, so far.

        A trainer re-checks everything it trains on and publishes its verdict either way, so its word
        settles a commitment: a failure bans the worker, and a validator that said otherwise is shown
        wrong and banned. Without a trainer's verdict, validators' failures ban the worker only once
        VALIDATOR_QUORUM distinct validators agree: one lying validator cannot get honest workers
        banned, and its lies cost it its trust as soon as a trainer's verdict contradicts them.
        """
        cid = verdict.commitment_id
        said = self._opinions.setdefault(cid, {})
        said[key] = (verdict.passed, verdict.reason)
        self._opinions.move_to_end(cid)
        while len(self._opinions) > OPINIONS_KEPT:
            self._opinions.popitem(last=False)
        by_trainer = [v for k, v in said.items() if k in task.trainer_keys]
        effects: list = []
        if by_trainer:
            failed = next((reason for passed, reason in by_trainer if not passed), None)
            for other, (passed, reason) in said.items():
                if other in task.trainer_keys or passed == (failed is None) or errors.DUPLICATE in (reason, failed):
                    continue  # agrees (or only saw the content first: not a contradiction)
                effects += self.ban_for_cheating(now, self._signer_id(other), f"wrong verdict on {cid.hex()[:16]}: "
                                                 f"{reason}, a trainer's check says {failed or 'ok'}")
            if failed is not None:
                effects += self.ban_for_cheating(now, seen.worker, f"failed {failed} (verdict by a trainer)")
            return effects
        failing = sorted({reason for passed, reason in said.values() if not passed})
        if sum(1 for passed, _ in said.values() if not passed) >= VALIDATOR_QUORUM:
            effects += self.ban_for_cheating(now, seen.worker, f"failed {'/'.join(failing)} "
                                             f"(verdicts by {VALIDATOR_QUORUM}+ validators)")
        return effects

    def ban_for_cheating(self, now: float, peer: str, reason: str) -> list:
        if peer == self.peer_id or not self.ledger.ban(peer, reason, now):
            return []
        self.shards.on_banned(peer)
        return [Ban(peer, reason), Emit("peer-banned", {"peer": peer, "reason": reason})]

    # ------------------------------------------------------------------ task sync

    def _ask_for_tasks(self, now: float, task_ids: tuple[str, ...], signer: str, forwarder: str) -> list:
        wanted = self.tasks.missing(now, task_ids)
        if not wanted:
            return []
        # Ask the signer if we hold a link to it, else the forwarder, which has validated the heartbeat.
        info = self.membership.peers.get(signer)
        target = signer if info is not None and info.connected else forwarder
        return [self._request(now, target, protocols.SYNC, self.tasks.sync_request(wanted))]

    def _request(self, now: float, peer: str, protocol: str, data: bytes) -> SendRequest:
        request_id = self._next_request_id
        self._next_request_id += 1
        self._requests[request_id] = (peer, protocol, now + self.config.sync_timeout * 2, None, None)
        return SendRequest(peer, protocol, request_id, data, self.config.sync_timeout)

    def _expire_requests(self, now: float) -> list:
        # The runtime always answers with a ResponseReceived (data or error); this only bounds the
        # table if it ever does not.
        for request_id in [r for r, entry in self._requests.items() if entry[2] < now]:
            del self._requests[request_id]
        return []

    def _on_request(self, now: float, inp: RequestReceived) -> list:
        if self.ledger.is_banned(inp.peer):
            return [Respond(inp.request_id, error=errors.BANNED)]
        if inp.protocol == protocols.SYNC:
            try:
                return [Respond(inp.request_id, self.tasks.sync_response(inp.data))]
            except Rejected as rej:
                return [Respond(inp.request_id, error=rej.reason)] + self._penalise(now, inp.peer, rej)
        if inp.protocol == protocols.SHARD:
            return self.shards.on_request(now, inp.peer, inp.request_id, inp.data)
        return [Respond(inp.request_id, error="unsupported-protocol")]

    def _on_response(self, now: float, inp: ResponseReceived) -> list:
        pending = self._requests.pop(inp.request_id, None)
        if pending is None or pending[0] != inp.peer:
            return [Emit("unexpected-response", {"peer": inp.peer, "request_id": inp.request_id})]
        owner, tag = pending[3], pending[4]
        if owner is not None:
            return owner.on_response(now, tag, inp)
        if inp.error is not None:
            return [Emit("request-failed", {"peer": inp.peer, "protocol": inp.protocol, "error": inp.error[:200]})]
        if inp.protocol == protocols.SYNC:
            return self._on_sync_response(now, inp)
        return []

    def _on_sync_response(self, now: float, inp: ResponseReceived) -> list:
        effects: list = []
        try:
            wires = TaskBook.parse_sync_response(inp.data)
        except Rejected as rej:
            return self._penalise(now, inp.peer, rej)
        for wire in wires:
            try:
                signed = open_envelope(wire)
                if not isinstance(signed.message, TaskAnnouncement):
                    raise Rejected(errors.WRONG_TOPIC, f"sync answered with a {signed.kind}")
                effects += self._learn_task(now, signed)
            except Rejected as rej:
                effects += self._penalise(now, inp.peer, rej)
        return effects

    # ------------------------------------------------------------------ local commands

    def _on_command(self, now: float, cmd: LocalCommand) -> list:
        try:
            if cmd.name == "announce-task":
                return self._announce_task(now, cmd)
            if cmd.name == "probe":
                return self._probe(now, cmd)
            if cmd.name == "publish-version":
                return self._publish_version(now, cmd)
            if cmd.name == "ban":
                peer = str(cmd.args["peer"])
                self.ledger.ban(peer, "banned by operator", now)
                return [Ban(peer, "banned by operator"), CommandResult(cmd.command_id, True, {"peer": peer})]
        except (KeyError, TypeError, ValueError) as exc:
            return [CommandResult(cmd.command_id, False, error=f"{cmd.name}: {exc}")]
        return [CommandResult(cmd.command_id, False, error=f"unknown command {cmd.name!r}")]

    def _announce_task(self, now: float, cmd: LocalCommand) -> list:
        task = cmd.args["task"]
        if not isinstance(task, TaskAnnouncement):
            raise TypeError("announce-task needs a TaskAnnouncement")
        signed = seal(self.identity, task)
        try:
            effects = self._learn_task(now, signed)
        except Rejected as rej:
            return [CommandResult(cmd.command_id, False, error=f"task refused: {rej}")]
        self.seen.add(signed.msg_id, now)
        self.stats.on_published(topics.TASKS, len(signed.wire))
        return effects + [Publish(topics.TASKS, signed.wire),
                          CommandResult(cmd.command_id, True, {"task_id": task.task_id})]

    def _publish_version(self, now: float, cmd: LocalCommand) -> list:
        """Sign and gossip a version whose shards are already in our store (a trainer key of the task
        only): what the trainer role does after each step, for versions packed elsewhere (benchmarks)."""
        fields = dict(cmd.args["manifest"])
        task_id = str(fields["task_id"])
        known = self.tasks.tasks.get(task_id)
        if known is None or self.identity.public_key not in known.task.trainer_keys:
            return [CommandResult(cmd.command_id, False, error="not a trainer of that task")]
        fields["tensors"] = tuple(t if isinstance(t, TensorEntry) else TensorEntry(*t) for t in fields.get("tensors", ()))
        fields["shard_hashes"] = tuple(bytes(h) for h in fields["shard_hashes"])
        fields["piece_hashes"] = tuple(bytes(h) for h in fields.get("piece_hashes", ()))
        manifest = WeightManifest(**{**fields, "created_at": now})
        effects = self.shards.seed(now, manifest, self)
        effects += self._publish(now, topics.task_topic(task_id, "weights"), manifest)
        self.versions[task_id] = max(self.versions.get(task_id, -1), manifest.version)
        return effects + [CommandResult(cmd.command_id, True, {"root": manifest.root.hex()})]

    def _probe(self, now: float, cmd: LocalCommand) -> list:
        size = int(cmd.args.get("size", 1024))
        if not 0 <= size <= 64 * 1024:
            raise ValueError("probe size is 0 to 65536 bytes")
        self._probe_seq += 1
        payload = bytes(self.rng.randrange(256) for _ in range(min(size, 64))) * (size // 64 + 1)
        probe = Probe(seq=self._probe_seq, sent_at=now, payload=payload[:size])
        return self._publish(now, topics.PROBE, probe) + [CommandResult(cmd.command_id, True, {"seq": self._probe_seq})]

    # ------------------------------------------------------------------ status

    def snapshot(self, now: float) -> dict:
        """Everything a status screen needs, as plain JSON-able data."""
        return {
            "peer_id": self.peer_id,
            "agent": self.config.agent,
            "roles": list(self.config.roles),
            "listen_addrs": list(self.listen_addrs),
            "now": now,
            "uptime": None if self.started_at is None else round(now - self.started_at, 3),
            "peers": self.membership.snapshot(now),
            "connected": self.membership.connected_peers(),
            "alive": self.membership.alive_peers(),
            "tasks": self.tasks.snapshot(),
            "versions": dict(sorted(self.versions.items())),
            "downloads": self.shards.snapshot(now),
            "work": {role.name: role.snapshot() for role in self.roles},
            "gossip": self.stats.snapshot(),
            "messages": {"accepted": self.ledger.totals_accepted,
                         "rejected": dict(sorted(self.ledger.totals_rejected.items()))},
            "reputation": self.ledger.snapshot()["peers"],
            "banned": self.ledger.banned_peers(),
        }
