"""The core's side of the shard exchange: `swarm.exchange` decisions turned into effects.

Every peer has one (`PeerCore.shards`), whatever its roles: it serves the pieces it holds on
`/swarm/shard/2` (swarm/pieces.py: of stored shards from disk, of shards still being fetched from
memory), publishes `ShardHave` piece bitmaps on the task's pieces topic, fetches what a follower
(worker, validator) or anyone else asked for, and blames peers that serve bad bytes through the
reputation ledger. Owners (a `PolicyFollower`, the trainer) register the versions they need with
`want` / `seed` and `release` them when they are old; a released version's shards are garbage-
collected (`KeepShards`) once no owner needs them.

The pieces topic is joined while the exchange holds a version of the task (downloading or seeding)
and left when it holds none: a relay that fetches nothing is never delivered a bitmap. Followers not
linked to each other still meet: each dials a holder (`reach_holders`), and holders are learnt from
manifests and heartbeats as well as from bitmaps.
"""

from __future__ import annotations

from gossip import errors, topics
from gossip.errors import Rejected
from gossip.messages import ShardHave, TrainerCheckpoint, WeightManifest
from swarm import protocols
from swarm.context import RoleContext
from swarm.exchange import Announce, Blame, Check, Done, ExchangeConfig, Fetch, ShardExchange, Store, Want
from swarm.shardwire import decode_request, encode_request
from swarm.io import CheckShards, Emit, KeepShards, Respond, RespondShard, StoreShard, Subscribe, Unsubscribe
from swarm.roles.base import Role

HOLDER_LINKS = 2  # extra links a peer may open to reach holders of a version it is missing
DIAL_PENDING = 30.0  # a holder dial that has not connected after this long no longer counts


def want_of(msg: WeightManifest | TrainerCheckpoint) -> Want:
    n = len(msg.shard_hashes)
    return Want(msg.root, msg.task_id, msg.version, tuple(msg.shard_hashes),
                tuple(msg.shard_length(i) for i in range(n)), msg.piece_size, tuple(msg.piece_hashes),
                state=isinstance(msg, TrainerCheckpoint))


class ShardsRole(Role):
    name = "shards"

    def __init__(self, ctx: RoleContext, rng, config: ExchangeConfig | None = None) -> None:
        self.ctx = ctx
        self.exchange = ShardExchange(rng, config)
        self.owners: dict[bytes, set[int]] = {}  # root -> ids of the owners that need it
        self.waiting: dict[bytes, list] = {}  # root -> owners to tell when it is complete
        self.served = 0  # pieces answered
        self.bytes_served = 0  # their bytes (operators graph weight traffic: node/metrics.py)
        self.refused = 0
        self.serves = not ctx.runs_role("leech")  # a leech (bench baseline) only downloads
        self.dialed: dict[str, float] = {}  # holders we dialed to fetch from -> when
        self.joined: set[str] = set()  # tasks whose pieces topic we are subscribed to

    # ---- what owners ask

    def want(self, now: float, msg: WeightManifest, owner, source: str = "") -> list:
        """Download `msg`'s version; `owner.on_shards_done(now, root)` is called when all are held.
        `source`: the manifest's signer (a trainer: it holds every shard)."""
        self.owners.setdefault(msg.root, set()).add(id(owner))
        if self.exchange.holds(msg.root):
            return owner.on_shards_done(now, msg.root)
        if owner not in self.waiting.setdefault(msg.root, []):
            self.waiting[msg.root].append(owner)
        joined = self._join(msg.task_id)
        actions = self.exchange.add(now, want_of(msg))
        if source and source != self.ctx.peer_id:
            actions += self.exchange.on_holder_of(now, source, msg.root)
        return joined + self._carry(now, actions)

    def seed(self, now: float, msg: WeightManifest, owner) -> list:
        """We made this version (its shards are in our store): serve it."""
        self.owners.setdefault(msg.root, set()).add(id(owner))
        return self._join(msg.task_id) + self._carry(now, self.exchange.add(now, want_of(msg), held=True))

    def release(self, now: float, root: bytes, owner) -> list:
        users = self.owners.get(root)
        if users is None:
            return []
        users.discard(id(owner))
        if users:
            return []
        d = self.exchange.downloads.get(root)
        self._drop(root)
        left = []
        if d is not None and (task_id := d.want.task_id) in self.joined and not any(
                other.want.task_id == task_id for other in self.exchange.downloads.values()):
            self.joined.discard(task_id)
            left = [Unsubscribe(topics.task_topic(task_id, topics.PIECES))]
        return [KeepShards(self.exchange.keep())] + left

    def forget_task(self, task_id: str) -> list:
        """The task left the table (its topics, the pieces topic too, were left with it): every version of
        it goes, whoever owned it."""
        self.joined.discard(task_id)
        roots = [root for root, d in self.exchange.downloads.items() if d.want.task_id == task_id]
        for root in roots:
            self._drop(root)
        return [KeepShards(self.exchange.keep())] if roots else []

    def _drop(self, root: bytes) -> None:
        """A version nobody here needs any more: its owners, its waiters and its download go."""
        self.owners.pop(root, None)
        self.waiting.pop(root, None)
        self.exchange.drop(root)

    def _join(self, task_id: str) -> list:
        if task_id in self.joined or not self.ctx.follows_task(task_id):
            return []
        self.joined.add(task_id)
        return [Subscribe(topics.task_topic(task_id, topics.PIECES))]

    # ---- inputs the core routes here

    def on_have(self, now: float, msg: ShardHave, signer: str) -> list:
        return self._carry(now, self.exchange.on_have(now, signer, msg.root, msg.bitmap))

    def on_heartbeat(self, now: float, signer: str, versions: dict) -> list:
        if not self.exchange.downloads:  # nothing to fetch or time (a relay): what _carry([]) would do
            self.ctx.cancel_timer("shards:tick")
            return []
        out: list = []
        for task_id, version in sorted(versions.items()):
            out += self.exchange.on_holder(now, signer, task_id, version)
        return self._carry(now, out)

    def on_connected(self, now: float, peer: str) -> list:
        if self.ctx.is_banned(peer):
            return []
        return self._carry(now, self.exchange.on_connected(now, peer))

    def on_disconnected(self, peer: str) -> None:
        self.exchange.on_disconnected(peer)

    def on_banned(self, peer: str) -> None:
        self.exchange.on_disconnected(peer)
        self.exchange.bad.add(peer)

    def on_present(self, now: float, root: bytes, present) -> list:
        return self._carry(now, self.exchange.on_present(now, root, frozenset(present)))

    def on_request(self, now: float, peer: str, request_id: int, data: bytes) -> list:
        try:
            root, index = decode_request(data)
        except Rejected as rej:
            self.refused += 1
            return [Respond(request_id, error=rej.reason)] + self.ctx.penalise(now, peer, rej)
        if not self.serves:
            self.refused += 1
            return [Respond(request_id, error="not-found")]
        serve, why = self.exchange.serve(root, index, now, token=request_id, peer=peer)
        if why == "queued":
            return []  # answered when an upload slot frees (on_sent)
        if serve is None:
            self.refused += 1
            return [Respond(request_id, error=why)]
        self.served += 1
        self.bytes_served += serve.length
        return [_respond(request_id, serve)]

    def on_sent(self, now: float, request_id: int) -> list:
        out = []
        for t, s in self.exchange.upload_done(request_id, now):
            if s is None:
                out.append(Respond(t, error="not-found"))
            else:
                self.served += 1
                self.bytes_served += s.length
                out.append(_respond(t, s))
        return out

    def on_response(self, now, tag, response) -> list:
        root, index = tag
        return self._carry(now, self.exchange.on_response(now, response.peer, root, index, response.data,
                                                          response.error))

    def on_timer(self, now, name) -> list:
        return self._carry(now, self.exchange.on_tick(now))

    # ---- reaching holders

    def reach_holders(self, now: float) -> list:
        """Dial a holder of each version we are downloading from no linked peer.

        The exchange asks only linked peers, and links are random: in a 1,000-peer swarm with 8 links
        each, a follower is rarely linked to the trainer or to another follower, so it would never get a
        shard. Holders are learnt from the manifest's signer, ShardHave and heartbeats; one is picked
        at random (not always the trainer, so followers spread over the peers that already hold) and
        dialed with the membership's backoff. At most `HOLDER_LINKS` such links (or dials pending for
        `DIAL_PENDING` s) at a time; a relay, with nothing to download, never dials."""
        ex = self.exchange
        if not ex.downloads:
            return []
        links, dialed = ex.links, self.dialed
        for peer in [p for p, at in dialed.items() if p not in links and now - at >= DIAL_PENDING]:
            del dialed[peer]
        if len(dialed) >= HOLDER_LINKS:
            return []
        ctx = self.ctx
        effects: list = []
        for root in sorted(ex.downloads):
            d = ex.downloads[root]
            if d.complete or d.checking:
                continue
            holders = [p for p in sorted(d.holders) if p not in ex.bad and p not in d.skip]
            if any(p in links or p in dialed for p in holders):
                continue
            candidates = []
            for peer in holders:
                info = ctx.peer_info(peer)
                if info is not None and ctx.dialable(info, now):
                    candidates.append(info)
            if not candidates:
                continue
            info = candidates[ex.rng.randrange(len(candidates))]
            dialed[info.peer_id] = now
            effects.append(ctx.dial(info, now))
            if len(dialed) >= HOLDER_LINKS:
                break
        return effects

    # ---- actions -> effects

    def _carry(self, now: float, actions: list) -> list:
        effects: list = []
        for a in actions:
            if isinstance(a, Fetch):
                effects.append(self.ctx.request(now, self, (a.root, a.index), a.peer, protocols.SHARD,
                                                encode_request(a.root, a.index), timeout=a.timeout))
            elif isinstance(a, Store):
                effects.append(StoreShard(a.digest, a.parts))
            elif isinstance(a, Check):
                effects.append(CheckShards(a.root, a.digests))
            elif isinstance(a, Announce):
                if not self.serves:
                    continue
                have = ShardHave(task_id=a.task_id, root=a.root, version=a.version, bitmap=a.bitmap, sent_at=now)
                if self.ctx.follows_task(a.task_id):
                    effects += self.ctx.publish(now, topics.task_topic(a.task_id, topics.PIECES), have)
            elif isinstance(a, Done):
                d = self.exchange.downloads.get(a.root)
                if d is not None:
                    effects.append(Emit("shards-complete", {"task_id": d.want.task_id, "version": d.want.version,
                                                            "shards": d.layout.shards, "pieces": d.n,
                                                            "bytes_in": d.bytes_in,
                                                            "seconds": round(now - d.started, 3),
                                                            **({"state": True} if d.want.state else {})}))
                for owner in self.waiting.pop(a.root, []):
                    effects += owner.on_shards_done(now, a.root)
            elif isinstance(a, Blame):
                effects.append(Emit("shard-rejected", {"peer": a.peer, "reason": a.reason, "detail": a.detail}))
                # withheld: capped (an honest holder times out under load), and not charged while we work
                # through a stall's backlog (it names versions its holders have since let go)
                if a.reason != errors.WITHHELD or (self.ctx.reputation(a.peer) > -40 and not self.ctx.excused(now)):
                    effects += self.ctx.penalise(now, a.peer, Rejected(a.reason, a.detail))
        if self.exchange.downloads:
            effects += self.reach_holders(now)
        deadline = self.exchange.next_deadline()
        if deadline is not None:
            self.ctx.timer("shards:tick", max(deadline, now))
        else:
            self.ctx.cancel_timer("shards:tick")
        return effects

    def snapshot(self, now: float) -> list[dict]:
        return self.exchange.snapshot(now)

    def byte_counts(self) -> dict:
        """Weight and checkpoint traffic since start: checked piece bytes received, piece bytes served."""
        return {"received": self.exchange.bytes_received, "served": self.bytes_served, "pieces_served": self.served}


def _respond(request_id: int, serve) -> RespondShard:
    return RespondShard(request_id, serve.digest, serve.shard, serve.offset, serve.length, serve.data)
