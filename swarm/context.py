"""`RoleContext`: everything a role (worker, trainer, validator, mirror, the shard exchange) may ask
of its peer, and nothing more.

Roles never see the `PeerCore`. Each operation here is named for what a role wants (publish a
message, start a job, ask a peer, set a timer, blame or ban a peer), so a reader can see a role's
whole reach in one page, and the core can change its insides without touching a role. Time is not
here on purpose: every role input carries `now`, as every core input does (sans-IO). Jobs and
requests get their ids from one `Pending` table, so the core knows which role to wake when one ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gossip.envelope import seal
from gossip.identity import Identity, peer_id_from_public_key
from gossip.messages import Message, RolloutCommitment, TaskSummary, Verdict, WeightManifest
from gossip.release import CURRENT, Release
from swarm.io import Dial, Publish, RunJob, SendRequest
from swarm.peerinfo import ALIVE
from swarm.rng import Rng, stable_seed
from swarm.stall import StallWatch
from swarm.taskparams import TaskParams

if TYPE_CHECKING:
    from gossip.errors import Rejected
    from gossip.reputation import ReputationLedger
    from gossip.seen import SeenCache
    from swarm.blobrefs import BlobRefs
    from swarm.forkchoice import Chains, ForkChoice
    from swarm.membership import Membership, PeerInfo
    from swarm.stats import GossipStats
    from swarm.summaries import TaskSummaries
    from swarm.tasks import TaskBook
    from swarm.timers import Timers
    from swarm.trust import Trust

FIRST_WORK_BEAT = 2.0  # seconds from our first commitment to a task to our next gossiped heartbeat


class Pending:
    """The jobs and requests in flight: their ids, and the owner (a role, or None for the core) to
    wake with the tag it chose when the job finishes or the answer comes."""

    def __init__(self) -> None:
        self._next_request_id = 1
        # request id -> (peer, protocol, deadline, owner, the owner's tag)
        self.requests: dict[int, tuple[str, str, float, object, object]] = {}
        self._next_job_id = 1
        self.jobs: dict[int, tuple[object, object]] = {}  # job id -> (owner, tag)

    def job(self, owner, tag: object, kind: str, payload: object) -> RunJob:
        job_id = self._next_job_id
        self._next_job_id += 1
        self.jobs[job_id] = (owner, tag)
        return RunJob(job_id, kind, payload)

    def request(self, now: float, owner, tag: object, peer: str, protocol: str, data: bytes,
                timeout: float) -> SendRequest:
        request_id = self._next_request_id
        self._next_request_id += 1
        self.requests[request_id] = (peer, protocol, now + timeout * 2, owner, tag)
        return SendRequest(peer, protocol, request_id, data, timeout)

    def expire(self, now: float) -> None:
        # The runtime always answers with a ResponseReceived (data or error); this only bounds the
        # table if it ever does not.
        for request_id in [r for r, entry in self.requests.items() if entry[2] < now]:
            del self.requests[request_id]


class RoleContext:
    def __init__(self, identity: Identity, roles: tuple[str, ...], seed: int, *, membership: Membership,
                 ledger: ReputationLedger, tasks: TaskBook, versions: dict[str, int], blobs: BlobRefs,
                 timers: Timers, seen: SeenCache, stats: GossipStats, trust: Trust, pending: Pending,
                 chains: Chains, release: Release = CURRENT, stall: StallWatch | None = None,
                 summaries: TaskSummaries | None = None) -> None:
        self.release = release  # what this peer speaks: a task may need capabilities it lacks (refusal.py)
        self._stall = stall or StallWatch()
        self._identity = identity
        self._roles = roles
        self._seed = seed
        self._membership = membership
        self._ledger = ledger
        self._tasks = tasks
        self._versions = versions
        self._blobs = blobs
        self._timers = timers
        self._seen = seen
        self._stats = stats
        self._trust = trust
        self._pending = pending
        self._chains = chains
        self._summaries = summaries  # the task summaries held (swarm/summaries.py): ours too, gossip never echoes them
        self._shards = None  # the shard exchange role, itself built with this context (`attach_shards`)

    def attach_shards(self, shards) -> None:
        self._shards = shards

    @property
    def awake_since(self) -> float:
        """When this peer last woke from a stall of its own (swarm/stall.py); -inf if it never stalled."""
        return self._stall.awake_since

    def excused(self, now: float) -> bool:
        """Whether this peer is still working through the backlog of its own stall: what looks like a
        peer's lateness, or a piece it no longer holds, is then this peer's doing (swarm/stall.py)."""
        return self._stall.excused(now)

    # ---- who we are

    @property
    def peer_id(self) -> str:
        return self._identity.peer_id

    @property
    def public_key(self) -> bytes:
        return self._identity.public_key

    def sign(self, data: bytes) -> bytes:
        return self._identity.sign(data)

    def runs_role(self, name: str) -> bool:
        return name in self._roles

    def rng(self, name: str) -> Rng:
        """A random stream of the role's own, seeded from the peer's seed: no role's draws move another's."""
        return Rng(stable_seed(name, self._seed))

    @staticmethod
    def signer(public_key: bytes) -> str:
        """The peer id of a signing key. peer_id_from_public_key keeps one bounded cache for the
        process: a 1,000-core simulation would otherwise hold a million per-core entries."""
        return peer_id_from_public_key(public_key)

    # ---- effects a role asks for

    def publish(self, now: float, topic: str, message: Message) -> list:
        signed = seal(self._identity, message)
        self._seen.add(signed.msg_id, now)
        self._stats.on_published(topic, len(signed.wire))
        if isinstance(message, RolloutCommitment):  # verdicts about our own batches are about a known commitment
            first = not self._trust.book(message.task_id).works(self.peer_id)
            self._trust.record_own(message.task_id, signed.msg_id, message)
            if first:
                self._beat_soon(now)
        elif isinstance(message, Verdict) and message.passed and message.task_id in self._tasks.tasks \
                and self.trusts_verdicts_of(message.task_id, self.public_key):
            self._trust.prove(self.signer(message.subject))  # gossip never echoes our own verdict to us
        elif isinstance(message, TaskSummary) and self._summaries is not None:
            self._summaries.add(message, self.peer_id)
        return [Publish(topic, signed.wire)]

    def _beat_soon(self, now: float) -> None:
        """Our first commitment to a task: gossip a heartbeat within `FIRST_WORK_BEAT`, whatever our pace.
        Relays carry a heartbeat naming a task only with evidence that its signer works on it
        (swarm/evidence.py), so before this one ours reached our neighbours' neighbours; now the peers that
        hold the commitment carry it, and the trainer learns the addresses it dials for our batch."""
        at = self._timers.due("heartbeat")
        if at is not None and at > now + FIRST_WORK_BEAT:
            self._timers.set("heartbeat", now + FIRST_WORK_BEAT)

    def job(self, owner, tag: object, kind: str, payload: object) -> RunJob:
        """A job whose JobFinished goes to `owner.on_job_finished(now, tag, done)`."""
        return self._pending.job(owner, tag, kind, payload)

    def request(self, now: float, owner, tag: object, peer: str, protocol: str, data: bytes,
                timeout: float = 10.0) -> SendRequest:
        """A request whose answer goes to `owner.on_response(now, tag, response)`."""
        return self._pending.request(now, owner, tag, peer, protocol, data, timeout)

    def timer(self, name: str, at: float) -> None:
        """Role timers are named '<role>:...'; Tick routes them back to that role."""
        self._timers.set(name, at)

    def timer_due(self, name: str) -> float | None:
        return self._timers.due(name)

    def cancel_timer(self, name: str) -> None:
        self._timers.cancel(name)

    def dial(self, info: PeerInfo, now: float) -> Dial:
        return self._membership.dial(info, now)

    # ---- blame and trust (swarm/trust.py decides)

    def penalise(self, now: float, peer: str, rej: Rejected) -> list:
        """A peer sent something bad: it costs reputation, and a ban once too much."""
        return self._trust.penalise(now, peer, rej)

    def ban(self, now: float, peer: str, reason: str) -> list:
        """Proof of cheating (a failed check, a wrong verdict): banned at once."""
        return self._trust.ban(now, peer, reason)

    def is_banned(self, peer: str) -> bool:
        return self._ledger.is_banned(peer)

    def reputation(self, peer: str) -> float:
        return self._ledger.score(peer)

    def knows_commitment(self, task_id: str, commitment_id: bytes) -> bool:
        """Whether the task's commitment book still holds it (it forgets those 64 versions behind)."""
        return self._trust.book(task_id).get(commitment_id) is not None

    def trusts_verdicts_of(self, task_id: str, key: bytes) -> bool:
        return self._trust.trusts_verdicts_of(self._tasks.tasks[task_id].task, key)

    # ---- what a role may read of the peer

    def follows_task(self, task_id: str) -> bool:
        return task_id in self._tasks.tasks

    def peer_info(self, peer: str) -> PeerInfo | None:
        return self._membership.peers.get(peer)

    def dialable(self, info: PeerInfo, now: float) -> bool:
        """Worth a dial now: not linked, addresses known, past its backoff, not banned."""
        return self._membership.dialable(info, now) and not self._ledger.is_banned(info.peer_id)

    def chain(self, task_id: str) -> ForkChoice:
        """The task's fork choice (swarm/forkchoice.py): the head chain, who was heard when."""
        return self._chains.of(task_id, TaskParams.of(self._tasks.tasks[task_id].task).takeover_s)

    def alive_with_role(self, role: str) -> list[str]:
        """Alive peers whose heartbeats name `role`, sorted; only those something vouches for (a link, a
        task naming them, proven work: swarm/membership.py), since a newcomer's heartbeat costs nothing
        to mint. A task's trainers and validators are named by it, so vouched for; how a task's work is
        split among workers is `workers_of`."""
        peers = self._membership.peers
        return [p for p in self._membership.vouched_alive() if role in peers[p].roles]

    def workers_of(self, task_id: str, version: int) -> list[str]:
        """The alive workers `version`'s work is split among, sorted. Once another worker has committed to
        the task for an older version: those vouched for, those whose rollout commitments for it we hold
        (a commitment is checked, and a fake one gets its signer banned), and newcomers whose heartbeats
        claim the role up to as many as those, heard first first. A heartbeat costs nothing to mint: fake
        workers counted up to the vouched peers' number took ranks in each honest worker's split, and
        steps waited for batches nobody made (tests/simulator/test_heartbeat_flood.py). Not counting
        newcomers at all left out honest workers no rank had given work yet, so the others' shares were
        too big (32 workers generated 9-11 batches of versions the steps took 8 of). Before anyone has
        committed there is no evidence: newcomers count up to the vouched peers' number, as for our pace."""
        membership, book = self._membership, self._trust.book(task_id)
        peers = membership.peers
        if not book.worked_before(version, besides=self.peer_id):
            counted = {p for p in membership.counted_peers() if "worker" in peers[p].roles}
        else:
            committed = [p for p in book.workers() if (info := peers.get(p)) is not None and info.state == ALIVE]
            counted = {p for p in set(membership.vouched_alive()).union(committed) if "worker" in peers[p].roles}
            fresh = [p for p in membership.newcomers.first_alive(len(peers))
                     if p not in counted and "worker" in peers[p].roles]
            counted.update(fresh[:len(counted)])
        return sorted(p for p in counted if not self._ledger.is_banned(p))

    # ---- versions, blobs and shards this peer holds

    def hold_version(self, task_id: str, version: int) -> None:
        """We hold `version` (heartbeats tell peers whom to ask); the newest held is what counts."""
        self._versions[task_id] = max(self._versions.get(task_id, -1), version)

    def switched_version(self, task_id: str, version: int) -> None:
        """After a chain switch: the newest version held on the new chain (-1: none yet)."""
        if version < 0:
            self._versions.pop(task_id, None)
        else:
            self._versions[task_id] = version

    def trained_version(self, task_id: str, version: int) -> None:
        """The trainer's newest version: what it serves, whatever else this peer heard."""
        self._versions[task_id] = version

    def hold_blob(self, owner, digest: bytes) -> None:
        self._blobs.hold(owner, digest)

    def release_blobs(self, owner, digests) -> list:
        return self._blobs.release(owner, digests)

    def want_shards(self, now: float, manifest: WeightManifest, owner, source: str = "") -> list:
        return self._shards.want(now, manifest, owner, source)

    def seed_shards(self, now: float, manifest: WeightManifest, owner) -> list:
        return self._shards.seed(now, manifest, owner)

    def release_shards(self, now: float, root: bytes, owner) -> list:
        return self._shards.release(now, root, owner)
