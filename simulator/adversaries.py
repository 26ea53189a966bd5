"""Adversarial behaviours, one per malicious peer, chosen by `adversary = "<kind>"` in a scenario.

A malicious peer still runs a real `PeerCore` (it must look like a peer to be connected to at all);
its behaviour adds traffic the core would never make, pushed straight into its gossip links, or
changes what its router does (withholding). Each kind says whether the core can catch it
(`detectable`): honest peers are expected to ban every detectable adversary they are exposed to.

Network-level kinds implemented now:

* forged-signature: probes whose envelope names another peer as signer (signature does not verify)
* replay: re-sends valid messages it received, after gossipsub's seen-cache forgot them
* spam: valid self-signed probes far above the per-signer rate limit, in bursts
* oversized / malformed: envelopes over the size cap / bytes that are not msgpack
* sybil-flood: a group of identities (one controller) bursting spam together
* sybil-eclipse: a group of identities that all connect to one victim and never relay anything;
  not detectable by the current core (gossipsub 1.1's mesh-delivery scoring would be needed), so
  the scenario checks that lazy gossip still reaches the victim instead.

Role-level kinds run the honest protocol around dishonest jobs or shard answers, like
`swarm-node start --malicious KIND` (trainer/cheats.py); their jobs go through the cost model
(simulator/rolejobs.py), which forges the results and marks them `honest=False` in the trace:

* other-model (alias different-model): rollouts generated with other weights; a check fails `toploc`
* inflated-reward (alias inflated-rewards): every reward claimed as 1; a check fails `reward`
* cherry-pick (alias cherry-picked-prompts): the easiest prompts of a fixed pool instead of the
  assigned ones; a check fails `assignment`
  (these three need the worker role)
* lying-validator: verify jobs answer the opposite of the honest check (bad batches pass, good ones
  fail with a made-up reason); needs the validator role, and to hurt, a task that names its group in
  `validators`. Caught when a trainer's own check contradicts it.
* rubber-stamp: a worker or validator whose verify jobs pass everything (a checker colluding with a
  cheater, for check quorums: swarm/roles/quorum.py). Caught when the trainer's own check of a batch
  it passed fails; not `detectable` in every run (it must be asked about a bad batch first).
* corrupted-shards: serves weight shards with one byte flipped (blamed `bad-shard` by each
  downloader, which never asks it again)
* withheld-shards: announces the shards it holds, then answers every request "not-found" (blamed
  `withheld`; the exchange stops asking it). Neither shard kind is `detectable` (banned) by design:
  the exchange stops asking such a peer after the first bad answer rather than piling up penalties;
  scenarios check that versions still reach every peer. To hold shards a peer must follow the
  weights (worker or validator role); give it the validator role (untrusted unless the task names
  its group), since no-bad-training counts any adversary's rollouts as bad.

A scenario naming a kind whose role its group lacks is refused with that reason.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Protocol

import msgpack

from gossip import topics
from gossip.envelope import MAX_ENVELOPE, VERSION, seal
from gossip.identity import Identity
from gossip.messages import Probe, StatusHeartbeat
from swarm.rng import Rng

if TYPE_CHECKING:
    from simulator.sim import Node

PLANNED: dict[str, str] = {}  # kinds named by the issues that cannot run yet, and what they wait for


class World(Protocol):
    """All a behaviour may see of and do to the simulation (simulator/actions.py implements it)."""

    def now(self) -> float: ...  # virtual seconds since the start

    def after(self, delay: float, fn: Callable, *args) -> None: ...  # run fn(*args) `delay` s from now

    def attacks_allowed(self) -> bool: ...  # false in the scenario's settle time

    def rng_for(self, node: "Node") -> Rng: ...

    def core_now(self, node: "Node") -> float: ...  # the clock node's core reads

    def neighbours(self, i: int) -> list[int]: ...  # peers linked to peer i, in order

    def public_key(self, i: int) -> bytes: ...

    def is_up(self, i: int) -> bool: ...

    def live_honest(self) -> list[int]: ...

    def attack(self, node: "Node", topic: str, data: bytes) -> None: ...  # raw gossip to all its links

    def withhold(self, i: int) -> None: ...  # peer i's router relays nothing

    def dial(self, i: int, j: int) -> None: ...


class Behaviour:
    kind = ""
    detectable = True
    forges_jobs = False  # role-level adversaries set this: their job results are marked forged
    cheat = ""  # how their jobs lie (simulator/rolejobs.py)
    needs_role = ""  # the role a group of this kind must have
    PARAMS: dict[str, tuple[type, float, float, Any]] = {}  # name -> (type, min, max, default)

    def __init__(self, params: dict, group: "GroupController") -> None:
        self.params = {k: (v[0](params[k]) if k in params else v[3]) for k, v in self.PARAMS.items()}
        self.group = group

    # hooks, called by the simulation
    def start(self, world: "World", node: "Node") -> None:
        rate = self.params.get("rate")
        if rate:
            self._every(world, node, 1.0 / rate)

    def on_accepted(self, world: "World", node: "Node", topic: str, data: bytes) -> None:
        pass

    def act(self, world: "World", node: "Node") -> None:
        pass

    def serve_shard(self, world: "World", node: "Node", data: bytes) -> tuple[bytes, str | None]:
        """The answer to a shard request this peer's core agreed to serve: (bytes, error)."""
        return data, None

    def _every(self, world: "World", node: "Node", interval: float, first: float | None = None) -> None:
        world.after(interval if first is None else first, self._tick, world, node, node.incarnation, interval)

    def _tick(self, world: "World", node: "Node", incarnation: int, interval: float) -> None:
        if not node.up or node.incarnation != incarnation:
            return
        if world.attacks_allowed():
            self.act(world, node)
        world.after(interval, self._tick, world, node, incarnation, interval)


def _probe(world: "World", node: "Node", size: int) -> Probe:
    node.attack_seq += 1
    return Probe(seq=node.attack_seq, sent_at=world.core_now(node), payload=bytes(size))


class ForgedSignature(Behaviour):
    kind = "forged-signature"
    PARAMS = {"rate": (float, 0.01, 1000, 1.0)}

    def act(self, world, node):
        victims = world.neighbours(node.index)
        if not victims:
            return
        victim = world.rng_for(node).choice(victims)
        body = _probe(world, node, 32).body_bytes()
        sig = node.identity.sign(b"forged" + body)  # a signature, but not by the named signer over this body
        wire = msgpack.packb({"v": VERSION, "kind": "probe", "body": body, "signer": world.public_key(victim),
                              "sig": sig}, use_bin_type=True)
        world.attack(node, topics.PROBE, wire)


class Replay(Behaviour):
    kind = "replay"
    PARAMS = {"rate": (float, 0.01, 1000, 5.0), "min_age": (float, 0, 86400, 130.0),
              "max_age": (float, 0, 86400, 600.0), "keep": (int, 1, 100_000, 2000)}

    def __init__(self, params, group):
        super().__init__(params, group)
        if self.params["max_age"] < self.params["min_age"]:
            raise ValueError("replay: max_age must be >= min_age")
        self.store: deque = deque(maxlen=self.params["keep"])

        self._next_store = 0.0

    def on_accepted(self, world, node, topic, data):
        # Keep about `rate` messages per second, so the store spans keep/rate seconds of history
        # whatever the traffic (a burst of spam would otherwise flush every old message out).
        now = world.now()
        if now >= self._next_store:
            self._next_store = now + 1.0 / self.params["rate"]
            self.store.append((now, topic, data))

    def act(self, world, node):
        now = world.now()
        lo, hi = now - self.params["max_age"], now - self.params["min_age"]
        while self.store and self.store[0][0] < lo:
            self.store.popleft()
        ripe = [item for item in self.store if item[0] <= hi]
        if ripe:
            _, topic, data = world.rng_for(node).choice(ripe)
            world.attack(node, topic, data)


class Spam(Behaviour):
    kind = "spam"
    PARAMS = {"rate": (float, 1, 100_000, 500.0), "burst": (float, 0.1, 3600, 3.0),
              "every": (float, 1, 86400, 60.0), "size": (int, 0, 60_000, 256)}

    def start(self, world, node):
        first = self.group.shared_start(world, node, self.params["every"])
        world.after(first, self._burst, world, node, node.incarnation)

    def _burst(self, world, node, incarnation):
        if not node.up or node.incarnation != incarnation:
            return
        if world.attacks_allowed():
            n = int(self.params["rate"] * self.params["burst"])
            for k in range(n):
                world.after(k / self.params["rate"], self._one, world, node, incarnation)
        world.after(self.params["every"], self._burst, world, node, incarnation)

    def _one(self, world, node, incarnation):
        if node.up and node.incarnation == incarnation:
            world.attack(node, topics.PROBE, seal(node.identity, _probe(world, node, self.params["size"])).wire)

    def is_detectable(self, sender_rate: float, sender_burst: float) -> bool:
        """Only bursts that overflow the core's per-signer token bucket get rate-limited (and banned)."""
        rate, burst = self.params["rate"], self.params["burst"]
        return rate > sender_rate and rate * burst > sender_burst + sender_rate * burst


class SybilFlood(Spam):
    """Spam from many identities at once: the controller starts every member's bursts together."""

    kind = "sybil-flood"
    PARAMS = {"rate": (float, 1, 100_000, 400.0), "burst": (float, 0.1, 3600, 3.0),
              "every": (float, 1, 86400, 60.0), "size": (int, 0, 60_000, 256)}


class HeartbeatFlood(Behaviour):
    """Issue 27's attack 1: valid heartbeats, each signed by a key minted for it, declaring the worker
    role, an hour's interval and a swarm of 1,000, at `rate` a second (the real attack's 18/s sits
    under a forwarder's 20 new signers/s). Nothing it sends is invalid, so it is never banned: what
    holds is the newcomer budget and that no peer relays a heartbeat nothing vouches for
    (swarm/membership.py, swarm/core.py `_on_heartbeat`). `name_task` 1: the fakes name every task the
    flooder holds, which is free, so it earns them nothing more (swarm/evidence.py)."""

    kind = "heartbeat-flood"
    detectable = False
    PARAMS = {"rate": (float, 0.01, 1000, 18.0), "name_task": (int, 0, 1, 0)}

    def act(self, world, node):
        rng = world.rng_for(node)
        key = Identity(rng.next_u64().to_bytes(8, "big") * 4)  # minted from the run's seed: traces repeat
        now = world.core_now(node)
        tasks = node.core.tasks.ids() if self.params["name_task"] else ()
        beat = StatusHeartbeat(seq=int(now * 1000), sent_at=now, interval=3599.5, roles=("worker",), agent="fake",
                               listen_addrs=(), tasks=tasks, versions={}, known_peers=(), peers=1000)
        world.attack(node, topics.STATUS, seal(key, beat).wire)


class Oversized(Behaviour):
    kind = "oversized"
    PARAMS = {"rate": (float, 0.01, 100, 0.5)}

    def act(self, world, node):
        # Distinct bytes each time: identical ones would be dropped by gossipsub's seen-cache.
        node.attack_seq += 1
        world.attack(node, topics.PROBE, b"\x81" + node.attack_seq.to_bytes(8, "big") + bytes(MAX_ENVELOPE - 8))


class Malformed(Behaviour):
    kind = "malformed"
    PARAMS = {"rate": (float, 0.01, 1000, 1.0), "size": (int, 1, 60_000, 200)}

    def act(self, world, node):
        rng = world.rng_for(node)
        # 0xc1 is never valid msgpack: the bytes fail to decode whatever follows.
        world.attack(node, topics.PROBE, b"\xc1" + bytes(rng.randrange(256) for _ in range(self.params["size"] - 1)))


class SybilEclipse(Behaviour):
    kind = "sybil-eclipse"
    detectable = False
    PARAMS = {"redial_every": (float, 1, 3600, 10.0)}

    def start(self, world, node):
        world.withhold(node.index)
        self._every(world, node, self.params["redial_every"], first=0.5)

    def act(self, world, node):
        victim = self.group.victim(world)
        if victim is not None and victim not in world.neighbours(node.index):
            world.dial(node.index, victim)


class RolloutCheat(Behaviour):
    """A worker whose generate jobs forge their batches (the core commits them honestly)."""

    forges_jobs = True
    needs_role = "worker"


class OtherModel(RolloutCheat):
    kind = cheat = "other-model"


class DifferentModel(OtherModel):
    kind = "different-model"


class InflatedReward(RolloutCheat):
    kind = cheat = "inflated-reward"


class InflatedRewards(InflatedReward):
    kind = "inflated-rewards"


class CherryPick(RolloutCheat):
    kind = cheat = "cherry-pick"


class CherryPickedPrompts(CherryPick):
    kind = "cherry-picked-prompts"


class LyingValidator(Behaviour):
    kind = cheat = "lying-validator"
    forges_jobs = True
    needs_role = "validator"


class RubberStamp(Behaviour):
    """A colluding checker: generates honestly, passes every batch it checks. Banned only once the
    trainer's own check contradicts a pass it gave a bad batch, which needs it to be asked about one
    that is then spot-checked: not `detectable` in every run."""

    kind = cheat = "rubber-stamp"
    forges_jobs = True
    detectable = False


class CorruptedShards(Behaviour):
    kind = "corrupted-shards"
    detectable = False

    def serve_shard(self, world, node, data):
        if not world.attacks_allowed():
            return data, None
        return bytes([data[0] ^ 0xFF]) + data[1:], None  # same length, wrong hash


class WithheldShards(Behaviour):
    kind = "withheld-shards"
    detectable = False

    def serve_shard(self, world, node, data):
        return (data, None) if not world.attacks_allowed() else (b"", "not-found")


KINDS: dict[str, type[Behaviour]] = {cls.kind: cls for cls in
                                     (ForgedSignature, Replay, Spam, SybilFlood, HeartbeatFlood, Oversized, Malformed, SybilEclipse,
                                      OtherModel, DifferentModel, InflatedReward, InflatedRewards, CherryPick,
                                      CherryPickedPrompts, LyingValidator, RubberStamp, CorruptedShards, WithheldShards)}


class GroupController:
    """What the members of one adversary group share: one adversary behind many identities."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = Rng(seed)
        self._start: float | None = None
        self._victim: int | None = None

    def shared_start(self, world: "World", node: "Node", every: float) -> float:
        """Delay until the group's next common burst (members joining later fall into step)."""
        if self._start is None:
            self._start = world.now() + 5.0 + self.rng.uniform(0, every)
        now = world.now()
        if self._start >= now:
            return self._start - now
        return every - ((now - self._start) % every)

    def victim(self, world: "World") -> int | None:
        if self._victim is None or not world.is_up(self._victim):
            honest = world.live_honest()
            self._victim = honest[0] if honest else None
        return self._victim


def check_params(kind: str, params: dict) -> None:
    """ValueError naming what is wrong with an adversary kind or its params."""
    if kind in PLANNED:
        raise ValueError(f"{kind!r} needs the {PLANNED[kind]}, which does not exist yet")
    cls = KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown adversary kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    for key, value in params.items():
        if key not in cls.PARAMS:
            raise ValueError(f"{kind}: unknown param {key!r} (known: {', '.join(sorted(cls.PARAMS)) or 'none'})")
        tp, lo, hi, _ = cls.PARAMS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (tp is int and not isinstance(value, int)):
            raise ValueError(f"{kind}: param {key!r} must be {'an integer' if tp is int else 'a number'}")
        if not lo <= value <= hi:
            raise ValueError(f"{kind}: param {key!r} must be in [{lo:g}, {hi:g}]")
    cls(params, GroupController("check", 0))  # cross-param checks


def make(kind: str, params: dict, group: GroupController) -> Behaviour:
    return KINDS[kind](params, group)


def detectable(behaviour: Behaviour, sender_rate: float, sender_burst: float) -> bool:
    if isinstance(behaviour, Spam):
        return behaviour.is_detectable(sender_rate, sender_burst)
    return behaviour.detectable
