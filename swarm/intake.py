"""The intake: the checks every gossip message passes, in one order, before any handler sees it.

Forwarder not banned, known topic, a well-formed envelope with a good signature (size and schema
are checked in `open_envelope`), the kind allowed on that topic, signer not banned, not seen
before, forwarder within its rate of new signers, signer within its rate. A failure is a
`MessageVerdict(False, reason)` and a penalty for whoever is to blame (the signer once its signature
is good, else the forwarder), never an exception: the network decides nothing, the core only answers.

Messages of other releases (gossip/release.py): an unknown kind whose signer announced a newer minor
(or that capability) is ignored and counted (`newer-kind`), from anyone else it is `unknown-kind`; a
message of another major is refused (`other-major`) at no cost, within `FOREIGN_RATE` per forwarder.

Two rate limits, because a key costs nothing to make: per signer (`sender_rate`), and per forwarder
on messages whose signer we have no record of (`fresh_signer_rate`). Honest gossip brings new signers
at the rate peers join the swarm, spread over every neighbour; a flood of keys minted one per message
all arrive through the spammer's own link, so it is throttled there and pays the penalty itself.
Forwarder ids are free too, so the same budget also holds for all forwarders of one source network
(`MessageReceived.from_net`, where the runtime knows it); that refusal is `capacity`, unpenalised,
since honest peers may share a network with the spammer.

A handler may take a message and still stop it here (`KEPT`: a heartbeat nothing vouches for,
swarm/core.py `_on_heartbeat`): it counts as accepted, and gossip is told not to relay it. It earns no
reputation: nothing vouches for its signer, and a flood of keys minted one per heartbeat made a ledger
record per key (each evicting another) and credited nobody but the flooder's own keys.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from gossip import errors, topics
from gossip.errors import Rejected, UnknownKind
from gossip.identity import peer_id_from_public_key
from gossip.release import CURRENT, Announced, Release
from gossip.reputation import ReputationLedger
from gossip.seen import SeenCache
from swarm.io import MessageReceived, MessageVerdict
from swarm.ratelimit import TokenBuckets
from swarm.stall import StallWatch
from swarm.stats import GossipStats

ACCEPTED = MessageVerdict(True)  # frozen: one instance serves every accepted message
# What a handler returns first for a message it took but that must go no further (a newcomer's
# heartbeat: swarm/membership.py): counted as accepted, answered as not valid so gossip does not relay it.
KEPT = MessageVerdict(False, errors.KEPT)
FOREIGN_RATE, FOREIGN_BURST = 1.0, 20.0  # other-major messages/s one forwarder may hand us for free
# Refusals a backlog after our own stall produces from honest peers' traffic (swarm/stall.py): late,
# repeated, or about something we dropped while catching up.
LATENESS = frozenset({errors.DUPLICATE, errors.OUT_OF_WINDOW, errors.STALE, errors.UNKNOWN_COMMITMENT})


class Intake:
    def __init__(self, peer_id: str, config, open_envelope: Callable, ledger: ReputationLedger, seen: SeenCache,
                 stats: GossipStats, penalise: Callable, release: Release = CURRENT,
                 announced: Callable[[str], Announced | None] = lambda peer: None,
                 stall: StallWatch | None = None) -> None:
        self.peer_id = peer_id
        self.stall = stall or StallWatch()  # after our own stall, lateness is ours: refused, not penalised
        self.release = release
        self.announced = announced  # what a peer's last heartbeat said it speaks (None: never heard)
        self.foreign = TokenBuckets(FOREIGN_RATE, FOREIGN_BURST)  # keyed by forwarder
        self.config = config  # a CoreConfig: message_window, clock_skew, sender_rate, sender_burst
        self._open = open_envelope
        self.ledger = ledger
        self.seen = seen
        self.buckets = TokenBuckets(config.sender_rate, config.sender_burst)
        self.fresh = TokenBuckets(config.fresh_signer_rate, config.fresh_signer_burst)  # keyed by forwarder
        self.fresh_by_net = TokenBuckets(config.fresh_signer_rate, config.fresh_signer_burst)  # by its network
        self.stats = stats
        self.penalise = penalise
        # One count per message and verdict, as the host counts its validator's answers (status shows both).
        self.accepted = 0
        self.rejected: Counter = Counter()  # reason -> messages
        self.excused = 0  # refusals for lateness not penalised because we had stalled (swarm/stall.py)
        self.kept = 0  # accepted messages we did not relay (KEPT)

    def receive(self, now: float, inp: MessageReceived, dispatch: Callable) -> list:
        """The verdict on one message, then what `dispatch(now, topic, signed, signer, forwarder, net)` made
        of it (`net`: the forwarder's source network, or the forwarder itself where the runtime cannot tell)."""
        blame = forwarder = inp.from_peer
        ledger = self.ledger
        try:
            if ledger.is_banned(forwarder):
                raise Rejected(errors.BANNED, f"forwarder {forwarder} is banned")
            allowed = self.release.topics.get(inp.topic) or topics.allowed_kinds(inp.topic)
            if not allowed:
                raise Rejected(errors.WRONG_TOPIC, f"unknown topic {inp.topic[:80]!r}")
            try:
                signed = self._open(inp.data)
            except UnknownKind as unknown:
                blame = peer_id_from_public_key(unknown.signer)  # the signature is good: the signer's doing
                raise self._unknown_kind(now, unknown, blame) from None
            except Rejected as rej:
                if rej.reason == errors.OTHER_MAJOR and not self.foreign.take(forwarder, now):
                    raise Rejected(errors.RATE_LIMITED, f"{forwarder} relays over {FOREIGN_RATE:g} messages/s "
                                                        "of another protocol major") from None
                raise
            signer = peer_id_from_public_key(signed.signer)
            if signer == self.peer_id:
                self.accepted += 1
                return [ACCEPTED]  # our own message echoed back: nothing to learn
            if signed.kind not in allowed:
                raise Rejected(errors.WRONG_TOPIC, f"{signed.kind} on {inp.topic}")
            if signed.kind == "status" and inp.topic != topics.STATUS \
                    and topics.task_of_topic(inp.topic) not in signed.message.tasks:
                raise Rejected(errors.WRONG_TOPIC, f"a heartbeat on {inp.topic} that does not name its task")
            if ledger.is_banned(signer):
                raise Rejected(errors.BANNED, f"signer {signer} is banned")
            if not self.seen.add(signed.msg_id, now):
                # py-libp2p validates concurrent copies of one message before marking it seen, so an
                # honest forwarder can trip this now and then: it costs little, a replayer pays in bulk.
                raise Rejected(errors.DUPLICATE, f"{signed.kind} {signed.msg_id.hex()[:16]} seen before")
            if ledger.get(signer) is None:
                if not self.fresh.take(forwarder, now):
                    raise Rejected(errors.RATE_LIMITED, f"{forwarder} relays over "
                                                        f"{self.config.fresh_signer_rate:g} new signers/s")
                if inp.from_net and not self.fresh_by_net.take(inp.from_net, now):
                    raise Rejected(errors.CAPACITY, f"the peers of {inp.from_net} relay over "
                                                    f"{self.config.fresh_signer_rate:g} new signers/s")
            blame = signer
            if not self.buckets.take(signer, now):
                raise Rejected(errors.RATE_LIMITED, f"{signer} above {self.config.sender_rate} msg/s")
            effects = dispatch(now, inp.topic, signed, signer, forwarder, inp.from_net or forwarder)
        except Rejected as rej:
            if rej.reason in (errors.OUT_OF_WINDOW, errors.STALE):
                blame = forwarder  # signed in its window; whoever delivers it late is at fault
            self.rejected[rej.reason] += 1
            self.stats.on_received(inp.topic, len(inp.data), accepted=False)
            if rej.reason in LATENESS and self.stall.excused(now):
                self.excused += 1
                return [MessageVerdict(False, rej.reason)]
            return [MessageVerdict(False, rej.reason)] + self.penalise(now, blame, rej)
        self.accepted += 1
        self.stats.on_received(inp.topic, len(inp.data), accepted=True)
        if effects and effects[0] is KEPT:
            self.kept += 1
            return effects
        ledger.accept_relayed(signer, forwarder, now)  # relaying valid traffic is good behaviour too
        return [ACCEPTED] + effects

    def _unknown_kind(self, now: float, unknown: UnknownKind, signer: str) -> Rejected:
        """Why a message of a kind we lack is refused: `newer-kind` (free) when its signer announced a
        newer release, within its rate like any message; `unknown-kind` (penalised) otherwise."""
        if self.ledger.is_banned(signer):
            return Rejected(errors.BANNED, f"signer {signer} is banned")
        theirs = self.announced(signer)
        if not self.release.unknown_kind_is_newer(unknown.kind, theirs):
            return Rejected(errors.UNKNOWN_KIND, f"{unknown.kind[:32]!r} from {signer}, who announced "
                                                 f"{theirs or 'nothing'}; this peer speaks {self.release.announced}")
        if not self.buckets.take(signer, now):
            return Rejected(errors.RATE_LIMITED, f"{signer} above {self.config.sender_rate} msg/s")
        return Rejected(errors.NEWER_KIND, f"{unknown.kind[:32]!r} from {signer} ({theirs}): ignored")

    def check_window(self, now: float, at: float, what: str) -> None:
        """A timestamped message is refused outside [now - message_window, now + clock_skew]."""
        if at < now - self.config.message_window or at > now + self.config.clock_skew:
            raise Rejected(errors.OUT_OF_WINDOW, f"{what} stamped {at:.3f}, now {now:.3f}")
