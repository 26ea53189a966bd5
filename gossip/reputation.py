"""Each peer's local opinion of every other peer: counts, reasons, a score, and bans.

Nothing here is shared or trusted from others: a peer's ledger changes only through what the peer
itself observed (a bad message, a failed check with evidence). A score below `ban_below` bans, and
so does proven cheating at once.

Bounded so that fresh keys cannot grow it: at most `capacity` peers are tracked. When full, the
oldest record *without history* (fewer than `HISTORY` accepted messages, no rejection, no ban: what
a key minted for one message looks like) is forgotten; records with history are passed over and
kept, so a key-per-message flood only recycles the neutral part of the table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import islice

from gossip import errors

# How much each rejection reason costs the sender. Garbage that an honest implementation never
# produces costs a lot; what honest peers can trip over (a late message, a gossip echo) costs little.
PENALTIES: dict[str, float] = {
    errors.MALFORMED: 10.0,
    errors.OVERSIZED: 10.0,
    errors.BAD_SIGNATURE: 10.0,
    errors.SCHEMA: 10.0,
    errors.UNKNOWN_KIND: 5.0,
    errors.OTHER_MAJOR: 0.0,  # a peer of another major is refused politely (the intake meters the volume)
    errors.NEWER_KIND: 0.0,  # a newer minor's message: ignored, counted
    errors.WRONG_TOPIC: 5.0,
    errors.UNAUTHORIZED: 10.0,
    errors.REPLAYED: 1.0,
    errors.DUPLICATE: 0.2,
    errors.STALE: 0.0,
    errors.OUT_OF_WINDOW: 1.0,
    errors.RATE_LIMITED: 2.0,
    errors.UNKNOWN_TASK: 0.5,
    errors.BANNED: 0.0,
    errors.CAPACITY: 0.0,
    errors.TOO_OLD: 0.0,
    errors.SUPERSEDED: 0.0, errors.OTHER_CHAIN: 0.0, errors.STANDBY_PUBLISHED: 5.0,  # trainer chains
    errors.TERM_BACKWARDS: 10.0, errors.NOT_ON_CHAIN: 10.0, errors.EQUIVOCATED: 100.0,
    errors.CHECKPOINT_MISMATCH: 10.0,
    errors.UNKNOWN_COMMITMENT: 0.5,  # gossip may deliver a verdict before its commitment
    errors.BAD_SHARD: 30.0,  # provable (hash against a signed manifest); two and the peer is banned
    errors.TRUNCATED: 10.0,
    errors.WITHHELD: 1.0,  # an honest peer can lose a shard (restart, gc) or time out under load
    errors.STREAM_ABUSE: 5.0,  # one can be an accident (a request cut off by a reset link); repeats add up
    errors.FLOODING: 10.0,  # the link is cut each time too; five cuts and the peer is banned
    errors.CHEATED: 100.0,  # honest workers finish late sometimes
}
DEFAULT_PENALTY = 5.0
ACCEPT_REWARD = 0.1
MAX_SCORE = 20.0
HISTORY = 8  # accepted messages after which a record is kept before neutral ones
EVICTION_SCAN = 64  # records looked at per eviction (those with history move to the back)
VOUCHED = "*"  # PeerRecord.via once a signer's messages reached us by two paths (never a peer id)


@dataclass(slots=True)  # one per (peer, peer) pair: a 1,000-peer simulation holds a million
class PeerRecord:
    accepted: int = 0
    _rejected: Counter | None = None  # made on the first rejection: most records never see one
    score: float = 0.0
    banned: bool = False
    ban_reason: str = ""
    last_event: float = 0.0
    via: str = ""  # the first path (forwarder) its signed messages came by, VOUCHED once a second one did

    @property
    def rejected(self) -> Counter:
        if self._rejected is None:
            self._rejected = Counter()
        return self._rejected

    def as_dict(self) -> dict:
        return {"accepted": self.accepted, "rejected": dict(sorted((self._rejected or {}).items())),
                "score": round(self.score, 3), "banned": self.banned, "ban_reason": self.ban_reason}


class ReputationLedger:
    def __init__(self, ban_below: float = -50.0, capacity: int = 4096) -> None:
        self.ban_below = ban_below
        self.capacity = capacity
        self._peers: dict[str, PeerRecord] = {}
        self._banned: set[str] = set()  # asked about on every message: a small set, not the big table
        self.totals_accepted = 0
        self.totals_rejected: Counter = Counter()

    def _record(self, peer: str, now: float) -> PeerRecord:
        rec = self._peers.get(peer)
        if rec is None:
            if len(self._peers) >= self.capacity:
                self._forget_one()
            rec = self._peers[peer] = PeerRecord()
        rec.last_event = now
        return rec

    def _forget_one(self) -> None:
        """Forget the oldest record without history. Records with history met on the way get a second
        chance (moved to the back), so each eviction looks at a bounded number of records."""
        peers = self._peers
        victim = fallback = None
        passed = []
        for peer in islice(peers, EVICTION_SCAN):
            rec = peers[peer]
            if not rec.banned:
                if rec._rejected is None and rec.accepted < HISTORY:
                    victim = peer
                    break
                fallback = fallback or peer
            passed.append(peer)
        for peer in passed:
            peers[peer] = peers.pop(peer)
        victim = victim or fallback or next(iter(peers))
        del peers[victim]
        self._banned.discard(victim)

    def accept(self, peer: str, now: float) -> PeerRecord:
        self.totals_accepted += 1
        return self._credit(peer, now)

    def _credit(self, peer: str, now: float) -> PeerRecord:
        """One accepted message's credit to `peer` (the signer's, or a vouched forwarder's)."""
        rec = self._peers.get(peer)  # once per accepted message: the known peer's path is kept short
        if rec is None:
            rec = self._record(peer, now)
        else:
            rec.last_event = now
        rec.accepted += 1
        score = rec.score + ACCEPT_REWARD
        rec.score = score if score < MAX_SCORE else MAX_SCORE
        return rec

    def accept_relayed(self, signer: str, forwarder: str, now: float) -> None:
        """One accepted message, counted once: the signer earns credit, and the forwarder (when it is not
        the signer) only for content someone else vouched for, i.e. once the signer's messages have
        reached us by a second path (another forwarder, or the signer itself on its own link).

        Why this rule: relay credit exists so an honest relay recovers from the small penalties gossip
        races cost it, and it must not be mintable. A peer that signs messages with throwaway keys and
        delivers them itself is the only path those keys ever have, so it earns nothing for them and its
        garbage costs it in full; real swarm traffic reaches us through several neighbours as the mesh
        changes. The limit: two colluding links can vouch for each other's keys (each link is then a
        separate identity the per-forwarder limits in swarm/intake.py meter)."""
        rec = self.accept(signer, now)
        via = rec.via
        if via != forwarder and via != VOUCHED:
            rec.via = forwarder if via == "" else VOUCHED
        if forwarder != signer and rec.via == VOUCHED:
            self._credit(forwarder, now)

    def reject(self, peer: str, reason: str, now: float) -> bool:
        """Count a rejection against `peer`; True if this pushed the peer into a ban just now."""
        rec = self._record(peer, now)
        rec.rejected[reason] += 1
        self.totals_rejected[reason] += 1
        rec.score -= PENALTIES.get(reason, DEFAULT_PENALTY)
        if not rec.banned and rec.score <= self.ban_below:
            rec.banned, rec.ban_reason = True, f"score below {self.ban_below} ({reason})"
            self._banned.add(peer)
            return True
        return False

    def ban(self, peer: str, reason: str, now: float) -> bool:
        """Ban for proven cheating; True if the peer was not banned before."""
        rec = self._record(peer, now)
        if rec.banned:
            return False
        rec.banned, rec.ban_reason = True, reason
        self._banned.add(peer)
        rec.score = min(rec.score, self.ban_below)
        return True

    def is_banned(self, peer: str) -> bool:
        return peer in self._banned

    def score(self, peer: str) -> float:
        rec = self._peers.get(peer)
        return rec.score if rec else 0.0

    def get(self, peer: str) -> PeerRecord | None:
        return self._peers.get(peer)

    def banned_peers(self) -> list[str]:
        return sorted(p for p, r in self._peers.items() if r.banned)

    def snapshot(self) -> dict:
        return {
            "accepted": self.totals_accepted,
            "rejected": dict(sorted(self.totals_rejected.items())),
            "peers": {p: r.as_dict() for p, r in sorted(self._peers.items())},
        }
