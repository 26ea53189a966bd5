"""Swarming download of weight shards: who holds what, what to ask whom, what to believe.

A policy version is a signed manifest plus content-addressed shards (trainer/weights). Every peer
that holds shards serves them; a peer missing shards asks several peers at once. This module is the
decision part only, with no I/O and no clock of its own (sans-IO, like the rest of `swarm/`):

    ex = ShardExchange(rng, ExchangeConfig())
    actions = ex.add(now, Want(root, task_id, version, hashes, sizes))  # -> [Check(root)]
    actions = ex.on_present(now, root, digests_on_disk)                 # resume, then Fetch...
    actions = ex.on_have(now, peer, root, bitmap)                       # a ShardHave arrived
    actions = ex.on_response(now, peer, root, index, data, error)       # -> Store, Blame, Done...

Actions are `Fetch` (ask `peer` for shard `index`), `Store` (these checked bytes are shard
`index`), `Announce` (publish our bitmap of `root`), `Done` (every shard of `root` is held),
`Blame` (`peer` misbehaved: a reason code for the reputation ledger). `swarm/roles/shards.py`
turns them into core effects; `simulator/swarming.py` carries them over the bandwidth model.

Policy:
  - rarest first: among missing shards not in flight, the one the fewest linked peers hold, ties
    broken by the peer's seeded rng; from the least loaded holder;
  - bounded: at most `per_peer` requests in flight to one peer and `max_in_flight` per download;
  - endgame: when every missing shard is in flight and capacity is left, a shard whose request has been
    out `endgame_slow` times as long as this download's answers take on average is asked of a second
    holder too (the first answer wins), so one slow peer does not hold up the tail; a request on time
    is not doubled (the loser's bytes still cross both links: doubling all of them wasted ~10% of the
    bytes moved and slowed the swarm's tail, simulator/swarming.py);
  - every answer is checked (exact length, blake2b-256 against the signed manifest) before it is
    stored or served: a wrong hash is `bad-shard`, a wrong length `truncated`; such a peer is never
    asked again (by this exchange, for any version); the shard is asked of someone else;
  - a peer that announced a shard and then answers not-found, an error or nothing is `withheld`;
    after `strikes` of those it is skipped for that version and the shard is asked elsewhere;
  - a download starts by asking the runtime which shards are already stored (`Check`), so a
    restarted peer resumes where it stopped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

from gossip import errors

ROOT = 32
MAX_EARLY_ROOTS = 16
MAX_EARLY_PEERS = 256
REQUEST_SIZE = ROOT + 4  # root, then the shard index as 4 big-endian bytes


def blake2b256(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def encode_request(root: bytes, index: int) -> bytes:
    return bytes(root) + index.to_bytes(4, "big")


def decode_request(data: bytes) -> tuple[bytes, int]:
    """(root, index); raises Rejected(MALFORMED) for anything but exactly 36 bytes."""
    if len(data) != REQUEST_SIZE:
        raise errors.Rejected(errors.MALFORMED, f"shard request of {len(data)} bytes, expected {REQUEST_SIZE}")
    return bytes(data[:ROOT]), int.from_bytes(data[ROOT:], "big")


# On the wire (node/driver.py), a /swarm/shard/1 answer is SHARD_OK then the shard, or SHARD_ERROR then
# a reason: in band, so "busy" and "not-found" reach the asker (a stream reset says nothing). The core
# sees the shard as `ResponseReceived.data` and the reason as `.error`.
SHARD_OK = b"\x00"
SHARD_ERROR = b"\x01"


def encode_error(why: str) -> bytes:
    return SHARD_ERROR + why.encode()[:64]


def decode_response(data: bytes) -> tuple[bytes, str | None]:
    """(shard bytes, None) or (b"", the server's reason); anything else is a malformed answer."""
    if data[:1] == SHARD_OK:
        return data[1:], None
    if data[:1] == SHARD_ERROR:
        return b"", data[1:65].decode("ascii", "replace") or "error"
    return b"", "malformed answer"


def bitmap_of(mask: int, n: int) -> bytes:
    """Bit i of byte i // 8 (least significant first) is shard i, as `ShardHave.holds` reads it."""
    return mask.to_bytes((n + 7) // 8, "little")


def mask_of(bitmap: bytes, n: int) -> int:
    return int.from_bytes(bitmap[: (n + 7) // 8], "little") & ((1 << n) - 1)


@dataclass(frozen=True)
class ExchangeConfig:
    # The node (swarm/roles/shards.py) and simulator/swarming.py both use these defaults: the best of the
    # simulator's sweeps (SwarmingConfig's comment). The previous ones (per_peer 2, haves every 0.5 s,
    # unlimited slots, a queue of 32) took 2.90x size/bandwidth at 100 peers and 1.65x at 8 peers with
    # 1 ms latency; these 1.79x and 1.19x (1.72x at 100 peers since the endgame doubles only late requests).
    per_peer: int = 1  # requests in flight to one peer: one per source, spread over up to max_in_flight sources
    max_in_flight: int = 8  # requests in flight for one download
    timeout: float = 20.0  # one shard request (the runtime reports it; we also enforce it)
    have_interval: float = 0.1  # at most one ShardHave per download per this (and one when done): new shards
    # are announced soon so neighbours fetch them on (pipelining). Haves go to the whole task topic, but
    # there are at most one per shard per peer and version; in the simulator 0.25 s gave 2.14x instead of
    # 2.03x at 1,000 peers (the same 1.79x at 100), 0.5 s 1.85x at 100
    strikes: int = 2  # withheld/failed answers from one peer before it is skipped for that version...
    skip_for: float = 10.0  # ...for this long (it may have been overloaded, restarted or partitioned)
    endgame: bool = True
    endgame_slow: float = 1.5  # ...for a request out this many times this download's mean answer time (0: any;
    # before the first answer, half the timeout). In the simulator no request is that late: 1.79x -> 1.72x
    busy_backoff: float = 1.0  # after a "busy" answer, that peer is not asked for that shard this long
    upload_slots: int = 8  # shards we send at once (more are answered "busy"): a few fast uploads spread
    # shards sooner than many slow ones sharing one uplink; needs a runtime that reports `ShardSent`
    # when an answer has left (the simulators do; node/driver.py reports it once the answer is handed to
    # the stream, so there a slot bounds answers being prepared, not bytes on the wire); 0 = unlimited
    upload_timeout: float = 30.0  # a slot is freed after this even if the runtime never reports the upload
    upload_queue: int = 0  # requests waiting for a slot (answered when one frees); more are "busy": with none,
    # a peer whose slots are full says so at once and the asker turns to another holder
    spread: int = 1  # an origin serves a shard only while it has served it at most this many times more than
    # its least-served shard (super-seeding): the first copies of every shard leave the origin once each,
    # and peers fetch the repeats from each other; -1 turns it off


@dataclass(frozen=True)
class Want:
    """A version to download (or, with `held=True`, one we produced and hold in full)."""

    root: bytes
    task_id: str
    version: int
    hashes: tuple[bytes, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Fetch:
    peer: str
    root: bytes
    index: int
    timeout: float


@dataclass(frozen=True)
class Store:
    root: bytes
    index: int
    digest: bytes
    data: bytes


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


@dataclass
class Download:
    want: Want
    started: float
    held: int = 0  # bitmask of shards we hold
    checking: bool = True  # waiting for the runtime's answer to Check
    holders: dict[str, int] = field(default_factory=dict)  # peer -> bitmask it announced
    in_flight: dict[int, dict[str, float]] = field(default_factory=dict)  # index -> {peer: deadline}
    abandoned: dict[tuple[int, str], float] = field(default_factory=dict)  # endgame losers still sending
    refused: dict[tuple[int, str], float] = field(default_factory=dict)  # (shard, peer) answered busy: until
    served: list[int] | None = None  # how often each shard was served, for a version we originated
    strikes: dict[str, int] = field(default_factory=dict)
    skip: dict[str, float] = field(default_factory=dict)  # peers not asked for this version until then
    announce_at: float | None = None  # when the next ShardHave may go out (None: nothing new)
    last_announce: float = float("-inf")
    finished: float | None = None
    answered: int = 0  # shards received, and the seconds their requests took (the endgame's yardstick)
    answer_s: float = 0.0
    endgame_at: float | None = None  # when an in-flight request becomes slow enough to double
    bytes_in: int = 0
    rejected: int = 0

    @property
    def n(self) -> int:
        return len(self.want.hashes)

    @property
    def full(self) -> int:
        return (1 << self.n) - 1

    @property
    def complete(self) -> bool:
        return self.held == self.full

    def count(self) -> int:
        return bin(self.held).count("1")


class ShardExchange:
    def __init__(self, rng, config: ExchangeConfig | None = None,
                 hasher: Callable[[bytes], bytes] = blake2b256) -> None:
        self.rng = rng
        self.config = config or ExchangeConfig()
        self.hasher = hasher  # the simulator passes a memoised one: the same bytes object is hashed once
        self.downloads: dict[bytes, Download] = {}
        self.links: set[str] = set()  # peers we may ask (connected, not banned)
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
            d = self.downloads[want.root] = Download(want, now)
            self.by_version[(want.task_id, want.version)] = want.root
            for peer, bitmap in sorted(self.early.pop(want.root, {}).items()):
                d.holders[peer] = mask_of(bitmap, d.n)
        if held:
            d.held, d.checking, d.finished = d.full, False, d.finished or now
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
                d.held |= 1 << i
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
        self.links.add(peer)
        return self._schedule_all(now)

    def on_disconnected(self, peer: str) -> None:
        self.links.discard(peer)

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
        d.holders[peer] = d.holders.get(peer, 0) | mask_of(bitmap, d.n)
        return self._schedule(now, d)

    def on_holder(self, now: float, peer: str, task_id: str, version: int) -> list:
        """`peer` says (heartbeat) it holds all of this version."""
        root = self.by_version.get((task_id, version))
        d = self.downloads.get(root) if root else None
        if d is None or peer in self.bad or d.complete or d.holders.get(peer) == d.full:
            return []
        d.holders[peer] = d.full
        return self._schedule(now, d)

    # ------------------------------------------------------------------ serving

    def serve(self, root: bytes, index: int, now: float = 0.0, token: object = None) -> tuple[bytes | None, str]:
        """(hash of shard `index` of `root`, "") if we serve it now (the runtime reads and re-checks
        the bytes); (None, "not-found") if we do not hold it; (None, "busy") when we originated this
        version and other shards have gone out fewer times, or every upload slot is taken (the asker gets
        it from a peer, or later). With a `token`, the slot is held until `upload_done(token)`."""
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
        return d.want.hashes[index], ""

    def upload_done(self, token: object, now: float = 0.0) -> list[tuple[object, bytes | None]]:
        """Free `token`'s slot; returns the queued requests that may go now: (token, shard hash or None
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
            out.append((t, d.want.hashes[index]))
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
        if not asked:
            d.in_flight.pop(index, None)
        out: list = []
        if error == "busy":
            d.refused[(index, peer)] = now + self.config.busy_backoff
        elif error is not None:
            out += self._strike(now, d, peer, index, error)
        elif len(data) != d.want.sizes[index]:
            out += self._bad(d, peer, errors.TRUNCATED, f"shard {index}: {len(data)} bytes, "
                                                        f"manifest says {d.want.sizes[index]}")
        elif self.hasher(data) != d.want.hashes[index]:
            out += self._bad(d, peer, errors.BAD_SHARD, f"shard {index} does not hash to the signed manifest's")
        elif not (d.held >> index) & 1:
            d.held |= 1 << index
            d.bytes_in += len(data)
            d.answered += 1
            d.answer_s += max(now - (asked_at - self.config.timeout), 0.0)
            d.strikes.pop(peer, None)
            for other, deadline in list(asked.items()):  # endgame duplicate still out: counted until it ends
                d.abandoned[(index, other)] = deadline
                asked.pop(other)
            d.in_flight.pop(index, None)
            out.append(Store(root, index, d.want.hashes[index], data))
            if d.complete:
                d.finished = now
                d.in_flight.clear()
                d.abandoned.clear()
                return out + [self._announce(now, d), Done(root)]
            if d.announce_at is None:
                d.announce_at = max(now, d.last_announce + self.config.have_interval)
        return out + self._flush(now, d) + self._schedule(now, d)

    def _strike(self, now: float, d: Download, peer: str, index: int, error: str) -> list:
        d.refused[(index, peer)] = now + self.config.skip_for  # not asked for this shard for a while
        d.strikes[peer] = d.strikes.get(peer, 0) + 1
        if d.strikes[peer] >= self.config.strikes:
            d.skip[peer] = now + self.config.skip_for
            d.strikes[peer] = 0
        return [Blame(peer, errors.WITHHELD, f"shard {index}: {error[:80]}")]

    def _bad(self, d: Download, peer: str, reason: str, detail: str) -> list:
        self.bad.add(peer)
        d.rejected += 1
        for other in self.downloads.values():
            other.holders.pop(peer, None)
        return [Blame(peer, reason, detail)]

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> float | None:
        times = [d.announce_at for d in self.downloads.values() if d.announce_at is not None]
        times += [t for d in self.downloads.values() for asked in d.in_flight.values() for t in asked.values()]
        times += [t for d in self.downloads.values() for t in d.abandoned.values()]
        times += [t for d in self.downloads.values() if not d.complete for t in d.refused.values()]
        times += [t for d in self.downloads.values() if not d.complete for t in d.skip.values()]
        times += [d.endgame_at for d in self.downloads.values() if not d.complete and d.endgame_at is not None]
        return min(times) if times else None

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

    def _schedule(self, now: float, d: Download) -> list:
        d.endgame_at = None
        if d.checking or d.complete:
            return []
        cfg = self.config
        flying = sum(len(a) for a in d.in_flight.values())
        if flying >= cfg.max_in_flight:
            return []
        peers = [p for p in sorted(d.holders) if p in self.links and p not in self.bad and p not in d.skip]
        if not peers:
            return []
        load = {p: 0 for p in peers}
        for asked in d.in_flight.values():
            for p in asked:
                if p in load:
                    load[p] += 1
        for _, p in d.abandoned:
            if p in load:
                load[p] += 1
        masks = {p: d.holders[p] for p in peers}
        missing = [i for i in range(d.n) if not (d.held >> i) & 1]
        out: list = []
        for endgame in (False, True):
            if endgame and (not cfg.endgame or any(i not in d.in_flight for i in missing)):
                break
            order = [i for i in missing if (i in d.in_flight) == endgame]
            if endgame and cfg.endgame_slow > 0:
                # only requests late against this download's mean answer time (before any: half the timeout)
                wait = cfg.endgame_slow * d.answer_s / d.answered if d.answered else cfg.timeout / 2
                due = {i: min(d.in_flight[i].values()) - cfg.timeout + wait for i in order}
                late = [i for i in order if due[i] <= now]
                if len(late) < len(order):
                    d.endgame_at = min(due[i] for i in order if due[i] > now)
                order = late
            self.rng.shuffle(order)
            order.sort(key=lambda i: sum((m >> i) & 1 for m in masks.values()))
            for i in order:
                if flying >= cfg.max_in_flight:
                    return out
                asked = d.in_flight.get(i, {})
                if endgame and len(asked) >= 2:
                    continue
                free = [p for p in peers if (masks[p] >> i) & 1 and load[p] < cfg.per_peer and p not in asked
                        and (i, p) not in d.refused]
                if not free:
                    continue
                low = min(load[p] for p in free)
                free = [p for p in free if load[p] == low]
                peer = free[self.rng.randrange(len(free))]
                load[peer] += 1
                flying += 1
                d.in_flight.setdefault(i, {})[peer] = now + cfg.timeout
                out.append(Fetch(peer, d.want.root, i, cfg.timeout))
        return out

    # ------------------------------------------------------------------ status

    def snapshot(self, now: float) -> list[dict]:
        out = []
        for root in sorted(self.downloads, key=lambda r: (self.downloads[r].want.task_id, self.downloads[r].want.version)):
            d = self.downloads[root]
            out.append({"task_id": d.want.task_id, "version": d.want.version, "root": root.hex()[:16],
                        "shards": d.n, "held": d.count(), "bytes": sum(d.want.sizes),
                        "bytes_in": d.bytes_in, "in_flight": sum(len(a) for a in d.in_flight.values()),
                        "sources": len([p for p in d.holders if p in self.links and p not in self.bad]),
                        "rejected": d.rejected, "complete": d.complete,
                        "seconds": round((d.finished if d.finished is not None else now) - d.started, 3)})
        return out

