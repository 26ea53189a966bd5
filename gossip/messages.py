"""The messages peers gossip, as frozen, self-validating structs.

Each message class has a `KIND` (its name on the wire) and a `MAX_BODY` (the most bytes its encoded
body may take). The signer of a message is carried by its envelope (`gossip.envelope`), never in the
body, so a body cannot claim to be from someone else.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import msgpack

from gossip.schema import Scalar, Struct, f

HASH = 32  # blake2b-256 digests and Ed25519 public keys are both 32 bytes
TASK_ID_HEX = 16  # task ids: 8 bytes of blake2b over the task body, as hex
MAX_TIME = 1e11  # seconds since the epoch; far beyond any real clock, rejects absurd values
MAX_PEERS_DECLARED = 1 << 20  # StatusHeartbeat.peers: a swarm-size estimate, bounded
MAX_PIECES = 16384  # pieces of one version: 4 GiB at 256 KiB; their hashes (557 KB) still fit a manifest
MAX_TERM = 1 << 32  # takeovers of one task, at most
MAX_PROTO = 1 << 16  # protocol major and minor numbers a heartbeat may announce
MAX_CAPS = 16  # capabilities one heartbeat may announce
MAX_CAP = 32  # characters in a capability name


class Message(Struct):
    KIND: ClassVar[str] = ""
    MAX_BODY: ClassVar[int] = 16 * 1024

    def body_bytes(self) -> bytes:
        """Canonical encoding: field order is declaration order, so equal messages encode equally. A body
        decoded from a newer release is kept as received (`gossip.envelope.decode_body`): it carries fields
        this release ignores, and a task's id must hash what its announcer signed."""
        body = self.__dict__.get("_wire_body")
        return body if body is not None else msgpack.packb(self.to_wire(), use_bin_type=True)


@dataclass(frozen=True)
class TaskAnnouncement(Message):
    """What to train, and who may publish policy versions for it. Its id is the hash of its body."""

    KIND: ClassVar[str] = "task"
    MAX_BODY: ClassVar[int] = 64 * 1024

    name: str = f(max=64)
    model: str = f(max=256)  # "builtin:<name>" or a model name the node can resolve offline
    env: str = f(max=64)
    created_at: float = f(min=0, max=MAX_TIME)
    expires_at: float = f(min=0, max=MAX_TIME)
    trainer_keys: tuple[bytes, ...] = f(max=16, item_max=HASH)
    validator_keys: tuple[bytes, ...] = f(max=64, item_max=HASH)
    async_level: int = f(min=0, max=16)
    params: dict[str, Scalar] = f(max=64, item_max=48)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.expires_at <= self.created_at:
            raise ValueError("TaskAnnouncement: expires_at must be after created_at")
        if not self.trainer_keys:
            raise ValueError("TaskAnnouncement: at least one trainer key is required")
        for key in self.trainer_keys + self.validator_keys:
            if len(key) != HASH:
                raise ValueError("TaskAnnouncement: keys are 32-byte Ed25519 public keys")
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError("TaskAnnouncement.name: letters, digits, '-', '_' and '.' only")

    @functools.cached_property  # asked on every task message; the struct is frozen, so once is enough
    def task_id(self) -> str:
        return hashlib.blake2b(self.body_bytes(), digest_size=TASK_ID_HEX // 2).hexdigest()


@dataclass(frozen=True)
class PeerAddrs(Struct):
    """A peer and where to dial it: carried in heartbeats so peers find each other (peer exchange)."""

    peer_id: str = f(max=64)
    addrs: tuple[str, ...] = f(max=4, item_max=256)


@dataclass(frozen=True)
class StatusHeartbeat(Message):
    """A peer's periodic 'I am alive, this is what I do'. `seq` only grows, so replays are refused."""

    KIND: ClassVar[str] = "status"

    seq: int = f(min=0)
    sent_at: float = f(min=0, max=MAX_TIME)
    interval: float = f(min=0.1, max=3600)  # when to expect the next one: silence past ~3x means gone
    roles: tuple[str, ...] = f(max=8, item_max=16)
    agent: str = f(max=64)
    listen_addrs: tuple[str, ...] = f(max=8, item_max=256)
    tasks: tuple[str, ...] = f(max=32, item_max=TASK_ID_HEX)
    versions: dict[str, int] = f(max=32, item_max=TASK_ID_HEX)
    known_peers: tuple[PeerAddrs, ...] = f(max=16)
    # How many live peers (itself included) the sender reckons the swarm has, the count its `interval`
    # was stretched for; 0: no estimate yet (a peer that has heard nobody). Newcomers use the median of
    # what others declare while their own table is still filling (swarm/membership.py).
    peers: int = f(min=0, max=MAX_PEERS_DECLARED, default=0)
    # What the sender speaks (gossip/release.py, docs/protocol.md §10): its protocol version (the major is
    # also the envelope's `v` and the topics' prefix) and its capabilities, names sorted and distinct.
    # Left out while they are 1.0 and none, so such a heartbeat is what peers before versioning sent.
    proto_major: int = f(min=0, max=MAX_PROTO, default=1, optional=True)
    proto_minor: int = f(min=0, max=MAX_PROTO, default=0, optional=True)
    caps: tuple[str, ...] = f(max=MAX_CAPS, item_max=MAX_CAP, default=(), optional=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        for cap in self.caps:
            if not cap or not all(c.islower() or c.isdigit() or c == "-" for c in cap) or not cap.isascii():
                raise ValueError(f"StatusHeartbeat.caps: {cap[:MAX_CAP]!r} is not a capability name "
                                 "(lowercase letters, digits and '-')")
        if list(self.caps) != sorted(set(self.caps)):
            raise ValueError("StatusHeartbeat.caps: names must be sorted and distinct")

    @cached_property
    def known_ids(self) -> frozenset[str]:
        """The peer ids of `known_peers`. Cached on the message: the simulator hands one decoded beat to
        every receiver, and each receiver only asks whether it already knows them all."""
        return frozenset(k.peer_id for k in self.known_peers)


@dataclass(frozen=True)
class RolloutCommitment(Message):
    """A worker's signed claim: 'this blob holds my rollouts for these assigned prompts'."""

    KIND: ClassVar[str] = "rollout"

    task_id: str = f(size=TASK_ID_HEX)
    policy_version: int = f(min=0)
    created_at: float = f(min=0, max=MAX_TIME)
    blob_hash: bytes = f(size=HASH)
    blob_size: int = f(min=1, max=256 << 20)
    prompt_indices: tuple[int, ...] = f(max=256)
    samples_per_prompt: int = f(min=1, max=256)
    num_tokens: int = f(min=0)
    mean_reward: float = f(min=-1e6, max=1e6)
    # The term of the manifest that published `policy_version`: with the version it names one chain's
    # version (swarm/forkchoice.py), so a trainer never trains on rollouts from another chain.
    policy_term: int = f(min=0, max=MAX_TERM, default=0)


@dataclass(frozen=True)
class Verdict(Message):
    """A validator's signed result of checking one commitment, with a hash of its evidence."""

    KIND: ClassVar[str] = "verdict"
    MAX_BODY: ClassVar[int] = 4 * 1024

    task_id: str = f(size=TASK_ID_HEX)
    commitment_id: bytes = f(size=HASH)
    subject: bytes = f(size=HASH)  # the worker's public key
    passed: bool = f()
    reason: str = f(max=64)
    evidence_hash: bytes = f(max=HASH)
    created_at: float = f(min=0, max=MAX_TIME)
    detail: str = f(max=256)


@dataclass(frozen=True)
class TensorEntry(Struct):
    name: str = f(max=256)
    dtype: str = f(max=16)
    shape: tuple[int, ...] = f(max=8)
    hash: bytes = f(size=HASH)  # blake2b-256 of the reconstructed tensor's bytes


class Sharded:
    """A packed stream cut into `shard_size` shards (a version, a trainer checkpoint)."""

    def shard_length(self, index: int) -> int:
        """The exact byte length of shard `index` (every shard but the last is `shard_size`)."""
        if index < len(self.shard_hashes) - 1:
            return self.shard_size
        return self.compressed_size - self.shard_size * (len(self.shard_hashes) - 1)


@dataclass(frozen=True)
class WeightManifest(Sharded, Message):
    """A signed policy version: how it is encoded and the hashes of every shard and tensor."""

    KIND: ClassVar[str] = "manifest"
    MAX_BODY: ClassVar[int] = 880 * 1024

    task_id: str = f(size=TASK_ID_HEX)
    version: int = f(min=0)
    parent_version: int = f(min=-1)  # -1: no parent (a full encoding)
    parent_root: bytes = f(max=HASH)  # empty for a full encoding
    encoding: str = f(max=16)  # "full" or "delta"
    dtype: str = f(max=16)
    root: bytes = f(size=HASH)
    shard_size: int = f(min=1, max=64 << 20)
    raw_size: int = f(min=0)
    compressed_size: int = f(min=0)
    shard_hashes: tuple[bytes, ...] = f(max=4096, item_max=HASH)
    tensors: tuple[TensorEntry, ...] = f(max=4096)
    created_at: float = f(min=0, max=MAX_TIME)
    # How trainer/weights packed it (bound into `root`, see trainer/weights/manifest.py).
    delta_op: str = f(max=8, default="")  # "sub" or "xor" for a delta, "" for a full encoding
    depth: int = f(min=0, max=1 << 20, default=0)  # deltas since the last full version
    shuffle: bool = f(default=True)  # payload tensors are byte-shuffled
    # Pieces: what peers request, check and relay one by one (swarm/pieces.py). 0 and no hashes: every
    # shard is one piece (a manifest built outside trainer/weights, e.g. a benchmark's).
    piece_size: int = f(min=0, max=64 << 20, default=0)
    piece_hashes: tuple[bytes, ...] = f(max=MAX_PIECES, item_max=HASH, default=())
    # Who published it on which chain (swarm/forkchoice.py): the term, raised by one at each takeover,
    # and the signer's rank (its index in the task's trainer_keys).
    term: int = f(min=0, max=MAX_TERM, default=0)
    rank: int = f(min=0, max=15, default=0)
    # Prompts the step that made this version trained on (0: unknown, version 0): workers size what they
    # generate for the next version from it (swarm/roles/worker.py `_share`).
    prompts: int = f(min=0, max=1 << 20, default=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.encoding not in ("full", "delta"):
            raise ValueError("WeightManifest.encoding: 'full' or 'delta'")
        if (self.encoding == "delta") != (self.parent_version >= 0):
            raise ValueError("WeightManifest: a delta names its parent, a full encoding does not")
        if any(len(h) != HASH for h in self.shard_hashes):
            raise ValueError("WeightManifest.shard_hashes: 32-byte hashes")
        if (self.encoding == "delta") != (self.delta_op in ("sub", "xor")) or (self.encoding == "delta") != (self.depth > 0):
            raise ValueError("WeightManifest: a delta has a delta_op ('sub' or 'xor') and depth >= 1, a full one neither")
        if self.shard_hashes and -(-self.compressed_size // self.shard_size) != len(self.shard_hashes):
            raise ValueError("WeightManifest: compressed_size / shard_size disagrees with the shard count")
        if self.piece_hashes or self.piece_size:
            if any(len(h) != HASH for h in self.piece_hashes):
                raise ValueError("WeightManifest.piece_hashes: 32-byte hashes")
            if self.piece_size <= 0 or self.shard_size % self.piece_size:
                raise ValueError("WeightManifest: piece_size divides shard_size")
            if -(-self.compressed_size // self.piece_size) != len(self.piece_hashes):
                raise ValueError("WeightManifest: compressed_size / piece_size disagrees with the piece count")



@dataclass(frozen=True)
class TrainerCheckpoint(Sharded, Message):
    """A signed trainer state: what a standby needs to continue the active trainer's run exactly
    (swarm/roles/trainerstate.py). Its shards travel over the weights exchange like a version's, but it
    is fetched only by the task's other trainers (and mirrors), never by workers or validators. It names
    the version it belongs to by that manifest's root, so it cannot be attached to another chain."""

    KIND: ClassVar[str] = "checkpoint"
    MAX_BODY: ClassVar[int] = 880 * 1024

    task_id: str = f(size=TASK_ID_HEX)
    version: int = f(min=0)  # the policy version whose training state this is
    term: int = f(min=0, max=MAX_TERM)
    rank: int = f(min=0, max=15)
    weights_root: bytes = f(size=HASH)  # the root of that version's WeightManifest
    step: int = f(min=0)  # optimizer steps taken (the schedule position)
    root: bytes = f(size=HASH)  # trainer/weights root over the packed state (every field below is bound in)
    dtype: str = f(max=16)
    shard_size: int = f(min=1, max=64 << 20)
    raw_size: int = f(min=0)
    compressed_size: int = f(min=0)
    shard_hashes: tuple[bytes, ...] = f(max=4096, item_max=HASH)
    piece_size: int = f(min=0, max=64 << 20)
    piece_hashes: tuple[bytes, ...] = f(max=MAX_PIECES, item_max=HASH)
    tensors: tuple[TensorEntry, ...] = f(max=16384)
    shuffle: bool = f(default=True)
    created_at: float = f(min=0, max=MAX_TIME, default=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(len(h) != HASH for h in self.shard_hashes + self.piece_hashes):
            raise ValueError("TrainerCheckpoint: 32-byte hashes")
        if not self.shard_hashes or -(-self.compressed_size // self.shard_size) != len(self.shard_hashes):
            raise ValueError("TrainerCheckpoint: compressed_size / shard_size disagrees with the shard count")
        if self.piece_size <= 0 or self.shard_size % self.piece_size \
                or -(-self.compressed_size // self.piece_size) != len(self.piece_hashes):
            raise ValueError("TrainerCheckpoint: piece_size divides shard_size and counts the pieces")



@dataclass(frozen=True)
class ShardHave(Message):
    """Which pieces of a version (by root) the signer holds, as a bitmap (bit i = piece i; a manifest
    without pieces: shard i)."""

    KIND: ClassVar[str] = "have"

    task_id: str = f(size=TASK_ID_HEX)
    root: bytes = f(size=HASH)
    version: int = f(min=0)
    bitmap: bytes = f(max=MAX_PIECES // 8)
    sent_at: float = f(min=0, max=MAX_TIME)

    def holds(self, index: int) -> bool:
        byte = index // 8
        return byte < len(self.bitmap) and bool(self.bitmap[byte] & (1 << (index % 8)))


@dataclass(frozen=True)
class ShardWant(Message):
    """Which shards of a version the signer is missing: lets holders push or prioritise."""

    KIND: ClassVar[str] = "want"

    task_id: str = f(size=TASK_ID_HEX)
    root: bytes = f(size=HASH)
    indices: tuple[int, ...] = f(max=512)
    sent_at: float = f(min=0, max=MAX_TIME)


@dataclass(frozen=True)
class TaskSummary(Message):
    """A task's state as its active trainer sees it, one message for the whole task instead of one
    heartbeat per member flooded to every peer: the workers whose batches it trained into its last
    versions (most recent first), the completions those versions trained, the task's trainers it hears
    alive, and its newest version and term (swarm/roles/summary.py). Peers take a listed worker as working
    on the task (swarm/evidence.py), and show the rest in status and metrics."""

    KIND: ClassVar[str] = "summary"
    MAX_BODY: ClassVar[int] = 64 * 1024  # 512 peer ids of 52 characters, and room to spare

    task_id: str = f(size=TASK_ID_HEX)
    version: int = f(min=0)
    term: int = f(min=0, max=MAX_TERM)
    workers: tuple[str, ...] = f(max=512, item_max=64)
    completions: int = f(min=0)
    trainers_alive: tuple[str, ...] = f(max=16, item_max=64)
    versions: int = f(min=0, max=1 << 10)  # how many versions back `workers` and `completions` reach
    sent_at: float = f(min=0, max=MAX_TIME)


@dataclass(frozen=True)
class Probe(Message):
    """A timestamped payload for measuring gossip delivery (latency, loss) between live peers."""

    KIND: ClassVar[str] = "probe"
    MAX_BODY: ClassVar[int] = 66 * 1024

    seq: int = f(min=0)
    sent_at: float = f(min=0, max=MAX_TIME)
    payload: bytes = f(max=64 * 1024)


MESSAGE_KINDS: dict[str, type[Message]] = {
    cls.KIND: cls
    for cls in (TaskAnnouncement, StatusHeartbeat, RolloutCommitment, Verdict, WeightManifest, TrainerCheckpoint,
                ShardHave, ShardWant, TaskSummary, Probe)
}
