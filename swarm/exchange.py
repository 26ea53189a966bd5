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
    first (BitTorrent's strict priority) made every downloader want the same few pieces at once, and
    the simulated swarm spread a version markedly slower (bench/results/exchange-sweep.json);
  - bounded: at most `per_peer` requests in flight to one peer and `max_in_flight` per download;
  - endgame: when every missing piece is in flight and capacity is left, a piece whose request has been
    out `endgame_slow` times as long as this download's answers take on average is asked of a second
    holder too (the first answer wins), so one slow peer does not hold up the tail; a request on time
    is not doubled (the loser's bytes still cross both links: doubling all of them wasted bytes and
    slowed the simulated swarm's tail, bench/results/exchange-sweep.json);
  - every answer is checked (exact length, blake2b-256 against the signed manifest) before it is
    kept or served: a wrong hash is `bad-shard`, a wrong length `truncated`; such a peer is never
    asked again (by this exchange, for any version); the piece is asked of someone else;
  - a peer that announced a piece and then answers not-found, an error or nothing is `withheld`;
    after `strikes` of those it is skipped for that version and the piece is asked elsewhere;
  - a download starts by asking the runtime which shards are already stored (`Check`), so a
    restarted peer resumes where it stopped (pieces of a shard it had not completed are fetched again).

Layout: this module is the facade and the steps of each event; the state of one version is
`swarm/download.py` (split by owner), what to ask whom is `swarm/scheduler.py`, what to answer is
`swarm/uploads.py`, the values in and out are `swarm/exchangeio.py`, and every set of pieces is a
`swarm/pieceset.PieceSet`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gossip import errors
from gossip.hashing import blake2b256
from swarm.download import Download
from swarm.exchangeio import Announce, Blame, Check, Done, Fetch, Serve, Store, Want
from swarm.pieceset import PieceSet
from swarm.scheduler import Scheduler
from swarm.uploads import Uploader

__all__ = ["Announce", "Blame", "Check", "Done", "ExchangeConfig", "Fetch", "Serve", "ShardExchange", "Store",
           "Want"]

MAX_EARLY_ROOTS = 16
MAX_EARLY_PEERS = 256


@dataclass(frozen=True)
class ExchangeConfig:
    # The node (swarm/roles/shards.py) and simulator/swarming.py both use these defaults: the best of the
    # simulator's sweeps (SwarmingConfig's comment).
    per_peer: int = 1  # requests in flight to one peer: one per source, spread over up to max_in_flight sources
    max_in_flight: int = 16  # requests in flight for one download
    open_shards: int = 64  # shards started (a piece held or asked) and not complete: their pieces wait in memory
    # (64 MiB a version at 1 MiB shards); fewer slowed the simulated swarm (bench/results/exchange-sweep.json)
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


class ShardExchange:
    """The exchange of one peer, for every version it downloads or serves: the API its runtimes call
    (module docstring), each event taken in a few steps by the parts it names."""

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
        self.scheduler = Scheduler(self.config, rng)
        self.uploader = Uploader(self.config)
        self.bytes_received = 0  # checked piece bytes kept, every download together (never decreases)

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
            d = self.downloads[want.root] = Download(want, layout, pieces, now)
            if not want.state:
                self.by_version[(want.task_id, want.version)] = want.root
            for peer, bitmap in sorted(self.early.pop(want.root, {}).items()):
                d.sources.add(peer, PieceSet.from_bitmap(bitmap, d.n))
        if held:
            d.have.fill()
            d.checking, d.finished = False, d.finished or now
            d.flying.stop()
            self.uploader.originated(want.root, d.n)
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
                d.have.found(i)
        if d.complete:
            d.finished = now
            return [self._announce(now, d), Done(root)]
        if d.have.held:
            d.announcer.due = now
        return self._flush(now, d) + self._schedule(now, d)

    def drop(self, root: bytes) -> None:
        d = self.downloads.pop(root, None)
        if d is not None:
            if self.by_version.get((d.want.task_id, d.want.version)) == root:
                del self.by_version[(d.want.task_id, d.want.version)]
            self.uploader.forget(root)

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
        d.sources.add(peer, PieceSet.from_bitmap(bitmap, d.n))
        return self._schedule(now, d)

    def on_holder(self, now: float, peer: str, task_id: str, version: int) -> list:
        """`peer` says (heartbeat) it holds all of this version."""
        root = self.by_version.get((task_id, version))
        return self.on_holder_of(now, peer, root) if root else []

    def on_holder_of(self, now: float, peer: str, root: bytes) -> list:
        """`peer` holds all of `root` (it made it)."""
        d = self.downloads.get(root)
        if d is None or peer in self.bad or d.complete or d.sources.holders.get(peer) == d.full:
            return []
        d.sources.add(peer, d.full)
        return self._schedule(now, d)

    # ------------------------------------------------------------------ serving (swarm/uploads.py)

    def serve(self, root: bytes, index: int, now: float = 0.0, token: object = None,
              peer: object = None) -> tuple[Serve | None, str]:
        """(what to send for piece `index` of `root`, "") if we serve it now; (None, "not-found") if we do
        not hold it; (None, "busy") when we originated this version and other pieces have gone out fewer
        times (once per `peer` and piece: swarm/uploads.py), or every upload slot is taken (the asker gets it from a peer, or later); (None, "queued")
        when it waits for a slot. With a `token`, the slot is held until `upload_done(token)`."""
        d = self._holding(root, index)
        if d is None:
            return None, "not-found"
        return self.uploader.serve(d, index, now, token, peer)

    def upload_done(self, token: object, now: float = 0.0) -> list[tuple[object, Serve | None]]:
        """Free `token`'s slot; returns the queued requests that may go now: (token, what to send, or None
        when we no longer hold it)."""
        return self.uploader.done(token, now, self._holding)

    def _holding(self, root: bytes, index: int) -> Download | None:
        """The download of `root` if it holds piece `index`."""
        d = self.downloads.get(root)
        if d is None or not 0 <= index < d.n or index not in d.have.held:
            return None
        return d

    # ------------------------------------------------------------------ answers

    def on_response(self, now: float, peer: str, root: bytes, index: int, data: bytes,
                    error: str | None) -> list:
        """A piece request ended: judge the answer, keep a good piece, then ask for more."""
        d = self.downloads.get(root)
        if d is None:
            return []
        deadline = d.flying.end(index, peer)
        if deadline is None:  # an endgame duplicate whose twin won (the peer is free again), or one we expired
            return self._schedule(now, d) if d.flying.release(index, peer) else []
        out = self._judge(now, d, peer, index, data, error)
        if out is None and index not in d.have.held:
            out = self._accept(now, d, peer, index, data, deadline)
            if d.complete:
                return out + self._finish(now, d)
        return (out or []) + self._flush(now, d) + self._schedule(now, d)

    def _judge(self, now: float, d: Download, peer: str, index: int, data: bytes, error: str | None) -> list | None:
        """None for the right bytes of piece `index`; else what to say about `peer` (the piece is asked
        of someone else: a busy peer later, one that withheld it after a rest, a liar never)."""
        if error == "busy":
            self.scheduler.busy(now, d, peer, index)
            return []
        if error is not None:
            return [self.scheduler.withheld(now, d, peer, index, error)]
        if len(data) != d.layout.length(index):
            return self._bad(d, peer, errors.TRUNCATED, f"piece {index}: {len(data)} bytes, "
                                                        f"manifest says {d.layout.length(index)}")
        if self.hasher(data) != d.pieces[index]:
            return self._bad(d, peer, errors.BAD_SHARD, f"piece {index} does not hash to the signed manifest's")
        return None

    def _accept(self, now: float, d: Download, peer: str, index: int, data: bytes, deadline: float) -> list:
        """Keep checked piece `index` (a `Store` when it completes its shard), credit its answer, and
        announce it soon (neighbours fetch it on from us)."""
        d.bytes_in += len(data)
        self.bytes_received += len(data)
        d.flying.won(index, max(now - (deadline - self.config.timeout), 0.0))
        d.backoff.forgive(peer)
        d.announcer.soon(now, self.config.have_interval)
        parts = d.have.keep(index, data)
        if parts is not None:
            return [d.store(d.layout.shard_of(index), parts)]
        return []

    def _finish(self, now: float, d: Download) -> list:
        """The last piece is in: stop asking, say so."""
        d.finished = now
        d.flying.finish()
        return [self._announce(now, d), Done(d.want.root)]

    def _bad(self, d: Download, peer: str, reason: str, detail: str) -> list:
        """`peer` sent bytes that failed a check: never asked again, for any version."""
        self.bad.add(peer)
        d.rejected += 1
        for other in self.downloads.values():
            other.sources.forget(peer)
        return [Blame(peer, reason, detail)]

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> float | None:
        times: list[float] = []
        for d in self.downloads.values():
            self.scheduler.deadlines(d, times)
        return min(times, default=None)

    def on_tick(self, now: float) -> list:
        out: list = []
        for root in sorted(self.downloads):
            d = self.downloads[root]
            expired = self.scheduler.expire(now, d)
            for index, peer in expired:
                out += self.on_response(now, peer, root, index, b"", "timeout (no answer)")
            out += self._flush(now, d)
            if not expired:
                out += self._schedule(now, d)
        return out

    def _flush(self, now: float, d: Download) -> list:
        if not d.announcer.ready(now):
            return []
        return [self._announce(now, d)]

    def _announce(self, now: float, d: Download) -> Announce:
        d.announcer.sent(now)
        return Announce(d.want.root, d.want.task_id, d.want.version, d.have.held.bitmap(d.n))

    # ------------------------------------------------------------------ choosing (swarm/scheduler.py)

    def _schedule_all(self, now: float) -> list:
        out: list = []
        for root in sorted(self.downloads):
            out += self._schedule(now, self.downloads[root])
        return out

    def _schedule(self, now: float, d: Download) -> list:
        if self._sorted_links is None:
            self._sorted_links = sorted(self.links)
        return self.scheduler.schedule(now, d, self._sorted_links, self.bad)

    # ------------------------------------------------------------------ status

    def snapshot(self, now: float) -> list[dict]:
        out = []
        for root in sorted(self.downloads, key=lambda r: (self.downloads[r].want.task_id, self.downloads[r].want.version)):
            d = self.downloads[root]
            out.append({"task_id": d.want.task_id, "version": d.want.version, "root": root.hex()[:16],
                        "shards": d.layout.shards, "held": d.shards_held(), "pieces": d.n,
                        "pieces_held": d.count(), "bytes": d.layout.total,
                        "bytes_in": d.bytes_in, "in_flight": d.flying.count,
                        "sources": len([p for p in d.holders if p in self.links and p not in self.bad]),
                        "rejected": d.rejected, "complete": d.complete,
                        "seconds": round((d.finished if d.finished is not None else now) - d.started, 3)})
        return out
