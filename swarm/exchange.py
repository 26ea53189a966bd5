"""Swarming download of weight pieces: who holds what, what to ask whom, what to believe.

A policy version is a signed manifest plus content-addressed shards, each cut into pieces whose
hashes the manifest also lists (swarm/pieces.py). Every peer that holds pieces serves them; a peer
missing pieces asks several peers at once. This module is the decision part only, with no I/O and
no clock of its own (sans-IO, like the rest of `swarm/`):

    ex = ShardExchange(rng, ExchangeConfig())
    actions = ex.add(now, Want(root, task_id, version, hashes, sizes, piece_size, pieces))  # -> [Check]
    actions = ex.on_present(now, root, shard_digests_on_disk)               # resume, then Fetch...
    actions = ex.on_have(now, peer, root, bitmap)                           # a ShardHave arrived
    actions = ex.on_response(now, peer, root, piece, data, error)           # -> Store, Blame, Done...

Actions are `Fetch` (ask `peer` for piece `index`), `Store` (shard `index` is complete: its checked
pieces, in order), `Announce` (publish our piece bitmap of `root`), `Done` (every shard of `root` is
held), `Blame` (`peer` misbehaved: a reason code for the reputation ledger). `swarm/roles/shards.py`
turns them into core effects; `simulator/swarming.py` carries them over the bandwidth model.

Policy:
  - peer by peer, rarest first: each linked holder with a free request slot (taken from a random
    start, so no peer is always first) is asked for the rarest piece it holds that we miss and have
    not asked for, ties broken by the seeded rng; rarity counts every peer that announced a piece;
  - memory bounded: pieces wait in memory until their shard is complete and stored, and at most
    `open_shards` shards may be started (a piece held or asked) and not complete; at the bound only
    pieces of open shards are asked for. Below it shards get no priority: finishing started shards
    first (BitTorrent's strict priority) made every downloader want the same few pieces at once
    (simulator/swarming.py, 100 peers: 1.60x size/bandwidth against 1.33x without);
  - bounded: at most `per_peer` requests in flight to one peer and `max_in_flight` per download;
  - endgame: when every missing piece is in flight and capacity is left, a piece whose request has been
    out `endgame_slow` times as long as this download's answers take on average is asked of a second
    holder too (the first answer wins), so one slow peer does not hold up the tail; a request on time
    is not doubled (the loser's bytes still cross both links: doubling all of them wasted ~10% of the
    bytes moved and slowed the swarm's tail, simulator/swarming.py);
  - every answer is checked (exact length, blake2b-256 against the signed manifest) before it is
    kept or served: a wrong hash is `bad-shard`, a wrong length `truncated`; such a peer is never
    asked again (by this exchange, for any version); the piece is asked of someone else;
  - a peer that announced a piece and then answers not-found, an error or nothing is `withheld`;
    after `strikes` of those it is skipped for that version and the piece is asked elsewhere;
  - a download starts by asking the runtime which shards are already stored (`Check`), so a
    restarted peer resumes where it stopped (pieces of a shard it had not completed are fetched again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

from gossip import errors
from swarm.pieces import Layout, bitmap_of, bits, mask_of, pick_bit

MAX_EARLY_ROOTS = 16
MAX_EARLY_PEERS = 256


def blake2b256(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


@dataclass(frozen=True)
class ExchangeConfig:
    # The node (swarm/roles/shards.py) and simulator/swarming.py both use these defaults: the best of the
    # simulator's sweeps (SwarmingConfig's comment).
    per_peer: int = 1  # requests in flight to one peer: one per source, spread over up to max_in_flight sources
    max_in_flight: int = 16  # requests in flight for one download
    open_shards: int = 64  # shards started (a piece held or asked) and not complete: their pieces wait in memory
    # (64 MiB a version at 1 MiB shards); 32: 1.39x, 16: 1.50x against 1.33x size/bandwidth at 100 simulated peers
    timeout: float = 20.0  # one piece request (the runtime reports it; we also enforce it)
    have_interval: float = 0.1  # at most one ShardHave per download per this (and one when done): new pieces
    # are announced soon so neighbours fetch them on (pipelining). Haves go to the whole task topic, but
    # there are at most one per piece per peer and version, and at most 1 / have_interval a second
    strikes: int = 2  # withheld/failed answers from one peer before it is skipped for that version...
    skip_for: float = 10.0  # ...for this long (it may have been overloaded, restarted or partitioned)
    endgame: bool = True
    endgame_slow: float = 1.5  # ...for a request out this many times this download's mean answer time (0: any;
    # before the first answer, half the timeout)
    busy_backoff: float = 1.0  # after a "busy" answer, that peer is not asked for that piece this long
    upload_slots: int = 8  # pieces we send at once (more are answered "busy"): a few fast uploads spread
    # pieces sooner than many slow ones sharing one uplink; needs a runtime that reports `ShardSent`
    # when an answer has left (the simulators do; node/driver.py reports it once the answer is handed to
    # the stream, so there a slot bounds answers being prepared, not bytes on the wire); 0 = unlimited
    upload_timeout: float = 30.0  # a slot is freed after this even if the runtime never reports the upload
    upload_queue: int = 0  # requests waiting for a slot (answered when one frees); more are "busy": with none,
    # a peer whose slots are full says so at once and the asker turns to another holder
    spread: int = 1  # an origin serves a piece only while it has served it at most this many times more than
    # its least-served piece (super-seeding): the first copies of every piece leave the origin once each,
    # and peers fetch the repeats from each other; -1 turns it off


@dataclass(frozen=True)
class Want:
    """A version to download (or, with `held=True`, one we produced and hold in full): its shards
    (hash and size each) and its pieces (`piece_size`, and the hashes in stream order; with no piece
    hashes, every shard is one piece)."""

    root: bytes
    task_id: str
    version: int
    hashes: tuple[bytes, ...]
    sizes: tuple[int, ...]
    piece_size: int = 0
    pieces: tuple[bytes, ...] = ()

    def layout(self) -> Layout:
        if not self.pieces:
            return Layout(self.sizes, self.sizes[0])
        return Layout(self.sizes, self.piece_size)

    def piece_hashes(self) -> tuple[bytes, ...]:
        return self.pieces or self.hashes


@dataclass(frozen=True)
class Fetch:
    peer: str
    root: bytes
    index: int  # a piece
    timeout: float


@dataclass(frozen=True)
class Store:
    """Shard `index` is complete: `parts` are its checked pieces in order (joined, they hash to `digest`
    when the manifest is honest; the runtime's store checks that before it writes)."""

    root: bytes
    index: int
    digest: bytes
    parts: tuple[bytes, ...]


@dataclass(frozen=True)
class Check:
    root: bytes
    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class Announce:
    root: bytes
    task_id: str
    version: int
    bitmap: bytes


@dataclass(frozen=True)
class Done:
    root: bytes


@dataclass(frozen=True)
class Blame:
    peer: str
    reason: str  # gossip.errors code: bad-shard, truncated, withheld
    detail: str


@dataclass(frozen=True)
class Serve:
    """What to answer a piece request with: bytes at `offset` of stored shard `shard` (re-read and
    checked against `digest` by the runtime), or, for a shard not complete yet, the checked `data`."""

    digest: bytes  # the piece's hash
    shard: bytes  # its shard's hash
    offset: int
    length: int
    data: bytes | None = None


@dataclass
class Download:
    want: Want
    layout: Layout
    pieces: tuple[bytes, ...]  # piece hashes
    started: float
    held: int = 0  # bitmask of pieces we hold (checked)
    stored: int = 0  # bitmask of shards complete (stored by the runtime)
    parts: dict[int, dict[int, bytes]] = field(default_factory=dict)  # open shard -> {piece: checked bytes}
    opened: int = 0  # bitmask of the pieces of open shards (started, not complete)
    asked: int = 0  # bitmask of pieces with a request in flight
    checking: bool = True  # waiting for the runtime's answer to Check
    holders: dict[str, int] = field(default_factory=dict)  # peer -> bitmask it announced
    rarity: dict[int, int] = field(default_factory=lambda: {})  # holders -> bitmask of pieces that many hold
    in_flight: dict[int, dict[str, float]] = field(default_factory=dict)  # piece -> {peer: deadline}
    requests: int = 0  # requests in flight (endgame duplicates count twice)
    abandoned: dict[tuple[int, str], float] = field(default_factory=dict)  # endgame losers still sending
    refused: dict[tuple[int, str], float] = field(default_factory=dict)  # (piece, peer) answered busy: until
    served: list[int] | None = None  # how often each piece was served, for a version we originated
    strikes: dict[str, int] = field(default_factory=dict)
    skip: dict[str, float] = field(default_factory=dict)  # peers not asked for this version until then
    announce_at: float | None = None  # when the next ShardHave may go out (None: nothing new)
    last_announce: float = float("-inf")
    finished: float | None = None
    answered: int = 0  # pieces received, and the seconds their requests took (the endgame's yardstick)
    answer_s: float = 0.0
    endgame_at: float | None = None  # when an in-flight request becomes slow enough to double
    bytes_in: int = 0
    rejected: int = 0

    @property
    def n(self) -> int:
        """Pieces."""
        return len(self.pieces)

    @property
    def full(self) -> int:
        return (1 << self.n) - 1

    @property
    def complete(self) -> bool:
        return self.held == self.full

    def count(self) -> int:
        return self.held.bit_count()

    def shards_held(self) -> int:
        return self.stored.bit_count()

    # ---- rarity: how many holders announced each piece, as bitmasks per count

    def add_holder_bits(self, new: int) -> None:
        """Every piece in `new` has one more holder."""
        rarity = self.rarity
        for c in sorted(rarity, reverse=True):  # highest first, so a piece moves up one class only
            moved = rarity[c] & new
            if moved:
                rarity[c] ^= moved
                rarity[c + 1] = rarity.get(c + 1, 0) | moved
                if not rarity[c]:
                    del rarity[c]

    def drop_holder_bits(self, gone: int) -> None:
        rarity = self.rarity
        for c in sorted(rarity):
            moved = rarity[c] & gone
            if moved and c > 0:
                rarity[c] ^= moved
                rarity[c - 1] = rarity.get(c - 1, 0) | moved
                if not rarity[c]:
                    del rarity[c]

    def rarest(self, candidates: int, rng) -> int:
        for c in sorted(self.rarity):
            found = self.rarity[c] & candidates
            if found:
                return pick_bit(found, self.n, rng)
        return pick_bit(candidates, self.n, rng)


class ShardExchange:
    def __init__(self, rng, config: ExchangeConfig | None = None,
                 hasher: Callable[[bytes], bytes] = blake2b256) -> None:
        self.rng = rng
        self.config = config or ExchangeConfig()
        self.hasher = hasher  # the simulator passes a memoised one: the same bytes object is hashed once
        self.downloads: dict[bytes, Download] = {}
        self.links: set[str] = set()  # peers we may ask (connected, not banned)
        self._sorted_links: list[str] | None = None
        self.bad: set[str] = set()  # served bytes that failed a check: never asked again
        self.by_version: dict[tuple[str, int], bytes] = {}  # (task, version) -> root
        self.early: dict[bytes, dict[str, bytes]] = {}  # haves for roots we have no manifest for yet
        self.uploads: dict[object, float] = {}  # upload token (the runtime's request id) -> slot expiry
        self.queue: list[tuple[object, bytes, int]] = []  # requests waiting for a slot: (token, root, index)

    # ------------------------------------------------------------------ versions

    def add(self, now: float, want: Want, held: bool = False) -> list:
        """Start downloading `want` (answer: `Check` the store first), or seed it when `held`."""
        if len(want.hashes) != len(want.sizes) or not want.hashes:
            raise ValueError("a version has one size per shard hash and at least one shard")
        d = self.downloads.get(want.root)
        if d is None:
            layout = want.layout()
            pieces = want.piece_hashes()
            if len(pieces) != layout.pieces:
                raise ValueError(f"{len(pieces)} piece hashes for {layout.pieces} pieces")
            d = self.downloads[want.root] = Download(want, layout, pieces, now, rarity={0: (1 << len(pieces)) - 1})
            self.by_version[(want.task_id, want.version)] = want.root
            for peer, bitmap in sorted(self.early.pop(want.root, {}).items()):
                self._holds(d, peer, mask_of(bitmap, d.n))
        if held:
            d.held, d.stored, d.checking, d.finished = d.full, (1 << d.layout.shards) - 1, False, d.finished or now
            d.parts.clear()
            d.opened = d.asked = d.requests = 0
            d.in_flight.clear()
            if d.served is None:
                d.served = [0] * d.n
            return [self._announce(now, d)]
        if d.complete or not d.checking:
            return []
        return [Check(want.root, want.hashes)]

    def on_present(self, now: float, root: bytes, present: frozenset[bytes] | set[bytes]) -> list:
        """The runtime's answer to `Check`: these shard hashes are already stored (checked on read)."""
        d = self.downloads.get(root)
        if d is None or not d.checking:
            return []
        d.checking = False
        for i, digest in enumerate(d.want.hashes):
            if digest in present:
                d.stored |= 1 << i
                d.held |= d.layout.shard_mask(i)
        if d.complete:
            d.finished = now
            return [self._announce(now, d), Done(root)]
        if d.held:
            d.announce_at = now
        return self._flush(now, d) + self._schedule(now, d)

    def drop(self, root: bytes) -> None:
        d = self.downloads.pop(root, None)
        if d is not None:
            self.by_version.pop((d.want.task_id, d.want.version), None)

    def keep(self) -> frozenset[bytes]:
        """Every shard hash of every version still tracked (what a gc must spare)."""
        return frozenset(h for d in self.downloads.values() for h in d.want.hashes)

    def holds(self, root: bytes) -> bool:
        d = self.downloads.get(root)
        return d is not None and d.complete

    # ------------------------------------------------------------------ peers

    def on_connected(self, now: float, peer: str) -> list:
        if peer not in self.links:
            self.links.add(peer)
            self._sorted_links = None
        return self._schedule_all(now)

    def on_disconnected(self, peer: str) -> None:
        if peer in self.links:
            self.links.discard(peer)
            self._sorted_links = None

    def _holds(self, d: Download, peer: str, mask: int) -> None:
        old = d.holders.get(peer, 0)
        new = mask & ~old
        if new:
            d.holders[peer] = old | new
            d.add_holder_bits(new)

    def on_have(self, now: float, peer: str, root: bytes, bitmap: bytes) -> list:
        d = self.downloads.get(root)
        if peer in self.bad:
            return []
        if d is None:  # gossip may bring a have before the manifest: remember a few
            if root not in self.early and len(self.early) >= MAX_EARLY_ROOTS:
                del self.early[next(iter(self.early))]
            early = self.early.setdefault(root, {})
            if peer in early or len(early) < MAX_EARLY_PEERS:
                early[peer] = bytes(bitmap)
            return []
        self._holds(d, peer, mask_of(bitmap, d.n))
        return self._schedule(now, d)

    def on_holder(self, now: float, peer: str, task_id: str, version: int) -> list:
        """`peer` says (heartbeat) it holds all of this version."""
        root = self.by_version.get((task_id, version))
        d = self.downloads.get(root) if root else None
        if d is None or peer in self.bad or d.complete or d.holders.get(peer) == d.full:
            return []
        self._holds(d, peer, d.full)
        return self._schedule(now, d)

    # ------------------------------------------------------------------ serving

    def serve(self, root: bytes, index: int, now: float = 0.0, token: object = None) -> tuple[Serve | None, str]:
        """(what to send for piece `index` of `root`, "") if we serve it now; (None, "not-found") if we do
        not hold it; (None, "busy") when we originated this version and other pieces have gone out fewer
        times, or every upload slot is taken (the asker gets it from a peer, or later); (None, "queued")
        when it waits for a slot. With a `token`, the slot is held until `upload_done(token)`."""
        d = self.downloads.get(root)
        if d is None or not 0 <= index < d.n or not (d.held >> index) & 1:
            return None, "not-found"
        if d.served is not None:
            if self.config.spread >= 0 and d.served[index] > min(d.served) + self.config.spread - 1:
                return None, "busy"
        if token is not None and self.config.upload_slots:
            for t in [t for t, until in self.uploads.items() if until <= now]:
                del self.uploads[t]
            if len(self.uploads) >= self.config.upload_slots:
                if len(self.queue) >= self.config.upload_queue:
                    return None, "busy"
                self.queue.append((token, root, index))
                if d.served is not None:
                    d.served[index] += 1  # counted when promised, so the queue does not fill with repeats
                return None, "queued"  # answered by `upload_done` when a slot frees
            self.uploads[token] = now + self.config.upload_timeout
        if d.served is not None:
            d.served[index] += 1
        return self._serving(d, index), ""

    def _serving(self, d: Download, index: int) -> Serve:
        layout = d.layout
        shard = layout.shard_of(index)
        data = None if (d.stored >> shard) & 1 else d.parts[shard][index]
        return Serve(d.pieces[index], d.want.hashes[shard], layout.offset(index), layout.length(index), data)

    def upload_done(self, token: object, now: float = 0.0) -> list[tuple[object, Serve | None]]:
        """Free `token`'s slot; returns the queued requests that may go now: (token, what to send, or None
        when we no longer hold it)."""
        self.uploads.pop(token, None)
        out = []
        while self.queue and len(self.uploads) < self.config.upload_slots:
            t, root, index = self.queue.pop(0)
            d = self.downloads.get(root)
            if d is None or not (d.held >> index) & 1:
                out.append((t, None))
                continue
            self.uploads[t] = now + self.config.upload_timeout
            out.append((t, self._serving(d, index)))
        return out

    # ------------------------------------------------------------------ answers

    def on_response(self, now: float, peer: str, root: bytes, index: int, data: bytes,
                    error: str | None) -> list:
        d = self.downloads.get(root)
        if d is None:
            return []
        asked = d.in_flight.get(index, {})
        if peer not in asked:
            # an endgame duplicate whose twin won: the peer is free again; or one we already expired
            return self._schedule(now, d) if d.abandoned.pop((index, peer), None) is not None else []
        asked_at = asked.pop(peer)  # the request's deadline
        d.requests -= 1
        if not asked:
            d.in_flight.pop(index, None)
            d.asked &= ~(1 << index)
        out: list = []
        if error == "busy":
            d.refused[(index, peer)] = now + self.config.busy_backoff
        elif error is not None:
            out += self._strike(now, d, peer, index, error)
        elif len(data) != d.layout.length(index):
            out += self._bad(d, peer, errors.TRUNCATED, f"piece {index}: {len(data)} bytes, "
                                                        f"manifest says {d.layout.length(index)}")
        elif self.hasher(data) != d.pieces[index]:
            out += self._bad(d, peer, errors.BAD_SHARD, f"piece {index} does not hash to the signed manifest's")
        elif not (d.held >> index) & 1:
            d.held |= 1 << index
            d.bytes_in += len(data)
            d.answered += 1
            d.answer_s += max(now - (asked_at - self.config.timeout), 0.0)
            d.strikes.pop(peer, None)
            for other, deadline in list(asked.items()):  # endgame duplicate still out: counted until it ends
                d.abandoned[(index, other)] = deadline
                asked.pop(other)
                d.requests -= 1
            d.in_flight.pop(index, None)
            d.asked &= ~(1 << index)
            out += self._keep(d, index, data)
            if d.complete:
                d.finished = now
                d.in_flight.clear()
                d.abandoned.clear()
                d.asked = d.requests = 0
                return out + [self._announce(now, d), Done(root)]
            if d.announce_at is None:
                d.announce_at = max(now, d.last_announce + self.config.have_interval)
        return out + self._flush(now, d) + self._schedule(now, d)

    def _keep(self, d: Download, index: int, data: bytes) -> list:
        """Hold a checked piece; when its shard is whole, hand the shard to the store."""
        layout = d.layout
        shard = layout.shard_of(index)
        parts = d.parts.setdefault(shard, {})
        parts[index] = data
        span = layout.pieces_of(shard)
        if len(parts) < len(span):
            self._open(d, shard)
            return []
        del d.parts[shard]
        d.opened &= ~layout.shard_mask(shard)
        d.stored |= 1 << shard
        # a Serve of an open shard handed out its bytes already; from now on pieces are read from the store
        return [Store(d.want.root, shard, d.want.hashes[shard], tuple(parts[i] for i in span))]

    def _open(self, d: Download, shard: int) -> None:
        mask = d.layout.shard_mask(shard)
        if not d.opened & mask:
            d.opened |= mask & ~d.held

    def _strike(self, now: float, d: Download, peer: str, index: int, error: str) -> list:
        d.refused[(index, peer)] = now + self.config.skip_for  # not asked for this piece for a while
        d.strikes[peer] = d.strikes.get(peer, 0) + 1
        if d.strikes[peer] >= self.config.strikes:
            d.skip[peer] = now + self.config.skip_for
            d.strikes[peer] = 0
        return [Blame(peer, errors.WITHHELD, f"piece {index}: {error[:80]}")]

    def _bad(self, d: Download, peer: str, reason: str, detail: str) -> list:
        self.bad.add(peer)
        d.rejected += 1
        for other in self.downloads.values():
            mask = other.holders.pop(peer, 0)
            if mask:
                other.drop_holder_bits(mask)
        return [Blame(peer, reason, detail)]

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> float | None:
        times: list[float] = []
        for d in self.downloads.values():
            if d.announce_at is not None:
                times.append(d.announce_at)
            times.extend(t for asked in d.in_flight.values() for t in asked.values())
            times.extend(d.abandoned.values())
            if not d.complete:
                times.extend(d.refused.values())
                times.extend(d.skip.values())
                if d.endgame_at is not None:
                    times.append(d.endgame_at)
        return min(times, default=None)

    def on_tick(self, now: float) -> list:
        out: list = []
        for root in sorted(self.downloads):
            d = self.downloads[root]
            expired = [(i, p) for i, asked in sorted(d.in_flight.items()) for p, t in sorted(asked.items()) if t <= now]
            for key in [k for k, t in d.abandoned.items() if t <= now]:
                del d.abandoned[key]
            for key in [k for k, t in d.refused.items() if t <= now]:
                del d.refused[key]
            for peer in [p for p, t in d.skip.items() if t <= now]:
                del d.skip[peer]
            for index, peer in expired:
                out += self.on_response(now, peer, root, index, b"", "timeout (no answer)")
            out += self._flush(now, d)
            if not expired:
                out += self._schedule(now, d)
        return out

    def _flush(self, now: float, d: Download) -> list:
        if d.announce_at is None or d.announce_at > now:
            return []
        return [self._announce(now, d)]

    def _announce(self, now: float, d: Download) -> Announce:
        d.announce_at, d.last_announce = None, now
        return Announce(d.want.root, d.want.task_id, d.want.version, bitmap_of(d.held, d.n))

    # ------------------------------------------------------------------ choosing

    def _schedule_all(self, now: float) -> list:
        out: list = []
        for root in sorted(self.downloads):
            out += self._schedule(now, self.downloads[root])
        return out

    def _links(self) -> list[str]:
        if self._sorted_links is None:
            self._sorted_links = sorted(self.links)
        return self._sorted_links

    def _schedule(self, now: float, d: Download) -> list:
        d.endgame_at = None
        if d.checking or d.complete:
            return []
        cfg = self.config
        if d.requests >= cfg.max_in_flight:
            return []
        load: dict[str, int] = {}
        for asked in d.in_flight.values():
            for p in asked:
                load[p] = load.get(p, 0) + 1
        for _, p in d.abandoned:
            load[p] = load.get(p, 0) + 1
        holders, bad, skip = d.holders, self.bad, d.skip
        free = [p for p in self._links() if p in holders and p not in bad and p not in skip
                and load.get(p, 0) < cfg.per_peer]
        if not free:
            return []
        refused: dict[str, int] = {}
        for (i, p), _ in d.refused.items():
            refused[p] = refused.get(p, 0) | (1 << i)
        need = d.full & ~d.held & ~d.asked
        if not need:
            return self._endgame(now, d, free, load, refused)
        out: list = []
        start = self.rng.randrange(len(free))
        for k in range(len(free)):
            peer = free[(start + k) % len(free)]
            for _ in range(cfg.per_peer - load.get(peer, 0)):
                x = holders[peer] & need & ~refused.get(peer, 0)
                if x and len(d.parts) + self._opening(d) >= cfg.open_shards:
                    x &= d.opened  # as many shards open as memory allows: finish those first
                if not x:
                    break
                i = d.rarest(x, self.rng)
                self._ask(now, d, peer, i, out)
                need &= ~(1 << i)
                if d.requests >= cfg.max_in_flight or not need:
                    return out
        return out

    def _opening(self, d: Download) -> int:
        """Open shards with no piece held yet (asked only): they count against `open_shards` too."""
        layout, count = d.layout, 0
        for shard in {layout.shard_of(i) for i in d.in_flight}:
            if shard not in d.parts:
                count += 1
        return count

    def _ask(self, now: float, d: Download, peer: str, index: int, out: list) -> None:
        d.in_flight.setdefault(index, {})[peer] = now + self.config.timeout
        d.asked |= 1 << index
        d.requests += 1
        self._open(d, d.layout.shard_of(index))
        out.append(Fetch(peer, d.want.root, index, self.config.timeout))

    def _endgame(self, now: float, d: Download, free: list[str], load: dict, refused: dict) -> list:
        """Every missing piece is in flight: double the late ones (module docstring)."""
        cfg = self.config
        if not cfg.endgame:
            return []
        order = sorted(d.in_flight)
        if cfg.endgame_slow > 0:
            # only requests late against this download's mean answer time (before any: half the timeout)
            wait = cfg.endgame_slow * d.answer_s / d.answered if d.answered else cfg.timeout / 2
            due = {i: min(d.in_flight[i].values()) - cfg.timeout + wait for i in order}
            late = [i for i in order if due[i] <= now]
            if len(late) < len(order):
                d.endgame_at = min(due[i] for i in order if due[i] > now)
            order = late
        out: list = []
        self.rng.shuffle(order)
        for i in order:
            if d.requests >= cfg.max_in_flight:
                break
            asked = d.in_flight[i]
            if len(asked) >= 2:
                continue
            options = [p for p in free if (d.holders[p] >> i) & 1 and p not in asked
                       and not (refused.get(p, 0) >> i) & 1 and load.get(p, 0) < cfg.per_peer]
            if not options:
                continue
            peer = options[self.rng.randrange(len(options))]
            load[peer] = load.get(peer, 0) + 1
            self._ask(now, d, peer, i, out)
        return out

    # ------------------------------------------------------------------ status

    def snapshot(self, now: float) -> list[dict]:
        out = []
        for root in sorted(self.downloads, key=lambda r: (self.downloads[r].want.task_id, self.downloads[r].want.version)):
            d = self.downloads[root]
            out.append({"task_id": d.want.task_id, "version": d.want.version, "root": root.hex()[:16],
                        "shards": d.layout.shards, "held": d.shards_held(), "pieces": d.n,
                        "pieces_held": d.count(), "bytes": d.layout.total,
                        "bytes_in": d.bytes_in, "in_flight": d.requests,
                        "sources": len([p for p in d.holders if p in self.links and p not in self.bad]),
                        "rejected": d.rejected, "complete": d.complete,
                        "seconds": round((d.finished if d.finished is not None else now) - d.started, 3)})
        return out
