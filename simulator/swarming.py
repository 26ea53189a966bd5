"""One policy version spreading over a virtual network: the real shard exchange vs a single origin.

    result = run_swarming(SwarmingConfig(peers=1000, size_mb=50, mbps=50, mode="swarm"))
    result["reach_95_s"], result["ratio_95"]   # seconds until 95% of peers hold every shard, / size/bw

Every downloader runs `swarm.exchange.ShardExchange`, the same state machine a `PeerCore` runs
(rarest first, per-peer bounds, endgame, hash checks, have bitmaps); this module only carries its
actions: a `Fetch` is a request (one-way latency), then a bulk transfer from the server's uplink to
the client's downlink, then the answer (one-way latency); an `Announce` reaches each linked peer
after one-way latency (gossip to the mesh neighbours). Peers link in a random graph of `degree`
links each; the manifest reaches each peer after its hop distance from the trainer times the latency.

`mode="star"` is the baseline a single HTTP origin gives: every peer links only to the trainer and
nobody else serves (its own timeouts are effectively off, as an HTTP client waits for a slow origin).

Bandwidth model (why not simulator/flows.py): max-min fair progressive filling over every flow is
O(resources^2) per flow event, far too slow for 1,000 peers x 48 shards. Here it is solved locally:
when a flow starts or ends, the flows of its two endpoints (the sender's uplink, the receiver's
downlink) are refilled max-min fairly against what every other flow leaves of each link they cross,
those other flows keeping their rates. Every link stays within its capacity at every moment, and
capacity a flow cannot use at one end goes to the others there (the old rule, min(uplink / flows
out, downlink / flows in), left it idle: a receiver of one fast and seven slow flows used 1/8 of
its downlink for the fast one). Flows away from the change are not rebalanced until an event
reaches their own endpoints, so times stay upper bounds of global max-min fairness.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from gossip.hashing import blake2b256
from swarm.exchange import Announce, Blame, Check, Done, ExchangeConfig, Fetch, ShardExchange, Store, Want
from swarm.pieces import Layout
from swarm.rng import Rng, stable_seed

REQUEST_BYTES = 36 + 200  # the request plus stream overhead (like simulator/streams.py's STREAM_OVERHEAD)


@dataclass(frozen=True)
class SwarmingConfig:
    peers: int = 100  # downloaders (the trainer is one more)
    size_mb: float = 50.0  # compressed version, 1e6 bytes
    shard_mb: float = 1.0  # shard size, MiB
    piece_kib: float = 256.0  # piece size, KiB (the unit peers request and relay; divides the shard size)
    mbps: float = 50.0  # each peer's uplink and downlink, Mbit/s
    latency_ms: float = 50.0  # one way
    degree: int = 16  # links per peer in the swarm
    mode: str = "swarm"  # "swarm" or "star"
    # exchange settings: ExchangeConfig's defaults (the node's), the best of this model's sweeps: pieces
    # relayed before their shard is complete shorten the time a unit takes per hop while links are shared,
    # which is what sets the ratio (measured sweeps: bench/results/2026-11-25-swarming-sweeps.json).
    per_peer: int = ExchangeConfig.per_peer
    max_in_flight: int = ExchangeConfig.max_in_flight
    open_shards: int = ExchangeConfig.open_shards
    have_interval: float = ExchangeConfig.have_interval
    spread: int = ExchangeConfig.spread  # the origin's super-seeding
    upload_slots: int = ExchangeConfig.upload_slots
    upload_queue: int = ExchangeConfig.upload_queue
    seed: int = 1
    until: float = 36_000.0

    def __post_init__(self) -> None:
        if self.mode not in ("swarm", "star"):
            raise ValueError("mode is 'swarm' or 'star'")


class _Flow:
    __slots__ = ("src", "dst", "remaining", "rate", "t", "gen", "done", "seq")

    def __init__(self, src, dst, size, done, seq):
        self.src, self.dst, self.remaining, self.rate, self.t, self.gen, self.done = src, dst, float(size), 0.0, 0.0, 0, done
        self.seq = seq  # creation order: flows are rerated in this order, never in set (memory address) order


def _seq(f: _Flow) -> int:
    return f.seq


class ExchangeNet:
    """Events plus local-fair-share transfers (module docstring)."""

    def __init__(self, n: int, Bps: float) -> None:
        self.now = 0.0
        self.heap: list = []
        self.seq = 0
        self.Bps = Bps
        self.out: list[set] = [set() for _ in range(n)]
        self.inn: list[set] = [set() for _ in range(n)]

    def at(self, when, fn, *args):
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, fn, args))

    def transfer(self, src, dst, size, done):
        self.seq += 1
        f = _Flow(src, dst, size, done, self.seq)
        f.t = self.now
        self.out[src].add(f)
        self.inn[dst].add(f)
        self._rerate(self.out[src] | self.inn[dst])

    def _rerate(self, flows):
        now = self.now
        ordered = sorted(flows, key=_seq)
        for f in ordered:
            f.remaining -= f.rate * (now - f.t)
            f.t = now
        for f, rate in zip(ordered, self._fill(ordered)):
            f.rate = rate
            f.gen += 1
            if rate > 0:  # a starved flow is refilled when a flow at its endpoints ends
                self.at(now + max(f.remaining, 0.0) / rate, self._finish, f, f.gen)

    def _fill(self, ordered: list) -> list[float]:
        """Max-min fair rates for `ordered` (progressive filling: the link whose equal share is smallest
        is saturated first), each link offering what the flows outside `ordered` leave of it."""
        mine = set(ordered)
        links: dict[tuple, list] = {}  # (direction, peer) -> [capacity left, unfrozen flows there]
        for f in ordered:
            for key, others in ((("up", f.src), self.out[f.src]), (("down", f.dst), self.inn[f.dst])):
                if key not in links:
                    # fsum: exact whatever the order, and a set of flows iterates in an order that
                    # depends on their addresses (a plain sum made runs differ between processes)
                    left = self.Bps - math.fsum(g.rate for g in others if g not in mine)
                    links[key] = [max(left, 0.0), 0]
                links[key][1] += 1
        rates: dict = {}
        while len(rates) < len(ordered):
            key = min((k for k, v in links.items() if v[1]), key=lambda k: links[k][0] / links[k][1])
            share = links[key][0] / links[key][1]
            for f in ordered:
                if f not in rates and key in (("up", f.src), ("down", f.dst)):
                    rates[f] = share
                    for k in (("up", f.src), ("down", f.dst)):
                        links[k][0] = max(links[k][0] - share, 0.0)
                        links[k][1] -= 1
        return [rates[f] for f in ordered]

    def _finish(self, f, gen):
        if gen != f.gen:
            return
        self.out[f.src].discard(f)
        self.inn[f.dst].discard(f)
        f.gen += 1
        self._rerate(self.out[f.src] | self.inn[f.dst])
        f.done()

    def run(self, until: float, stop) -> None:
        heap = self.heap
        while heap and not stop():
            when, _, fn, args = heapq.heappop(heap)
            if when > until:
                break
            self.now = when
            fn(*args)


def run_swarming(cfg: SwarmingConfig) -> dict:
    rng = Rng(stable_seed("swarming", cfg.seed))
    n = cfg.peers + 1  # peer 0 is the trainer
    shard = int(cfg.shard_mb * (1 << 20))
    piece = int(cfg.piece_kib * 1024)
    size = int(cfg.size_mb * 1e6)
    count = math.ceil(size / shard)
    sizes = tuple(shard if i < count - 1 else size - shard * (count - 1) for i in range(count))
    layout = Layout(sizes, piece)
    # one bytes object per piece, shared by every peer that holds it, so the memoised hasher hashes it once
    pieces = [bytes([i % 256]) * layout.length(i) for i in range(layout.pieces)]
    piece_digests = [blake2b256(b) for b in pieces]
    digests = {id(b): d for b, d in zip(pieces, piece_digests)}
    by_digest = dict(zip(piece_digests, pieces))
    hasher = lambda data: digests.get(id(data)) or blake2b256(data)  # noqa: E731
    shard_digests = tuple(blake2b256(b"".join(pieces[p] for p in layout.pieces_of(s))) for s in range(count))
    want = Want(blake2b256(b"version"), "0" * 16, 1, shard_digests, sizes, piece,
                tuple(piece_digests))
    star = cfg.mode == "star"
    xcfg = exchange_config(cfg)
    links = _graph(n, cfg.degree, rng) if not star else [set(range(1, n))] + [{0} for _ in range(1, n)]
    hops = _hops(links)
    lat = cfg.latency_ms / 1000.0
    net = ExchangeNet(n, cfg.mbps * 1e6 / 8)
    ex = [ShardExchange(Rng(stable_seed("swarming", cfg.seed, i)), xcfg, hasher) for i in range(n)]
    stores: list[set] = [set() for _ in range(n)]  # shard digests each peer has stored
    done_at: dict[int, float] = {}
    waiting: dict[int, tuple] = {}  # upload token -> (client, root, index)
    tick_at: dict[int, float] = {}
    counts = {"uploads": 0, "requests": 0, "bytes": 0, "blamed": 0, "announces": 0, "served_by_trainer": 0}
    target = math.ceil(0.95 * cfg.peers)

    def carry(i, actions):
        for a in actions:
            if isinstance(a, Fetch):
                counts["requests"] += 1
                net.at(net.now + lat, arrive, i, a.peer, a.root, a.index)
            elif isinstance(a, Store):
                stores[i].add(a.digest)
            elif isinstance(a, Check):
                carry(i, ex[i].on_present(net.now, a.root, frozenset(d for d in a.digests if d in stores[i])))
            elif isinstance(a, Announce):
                if star and i != 0:
                    continue
                counts["announces"] += 1
                for j in links[i]:
                    net.at(net.now + lat, lambda j=j, a=a: carry(j, ex[j].on_have(net.now, i, a.root, a.bitmap)))
            elif isinstance(a, Done):
                if i != 0 and i not in done_at:
                    done_at[i] = net.now
            elif isinstance(a, Blame):
                counts["blamed"] += 1
        deadline = ex[i].next_deadline()
        if deadline is not None and tick_at.get(i) != deadline:
            tick_at[i] = deadline
            net.at(deadline, tick, i, deadline)

    def tick(i, at):
        if tick_at.get(i) == at:
            del tick_at[i]
            carry(i, ex[i].on_tick(net.now))

    def arrive(client, server, root, index):
        counts["uploads"] += 1
        token = counts["uploads"]
        waiting[token] = (client, root, index)
        serving, why = (ex[server].serve(root, index, net.now, token, peer=client) if (server == 0 or not star)
                        else (None, "not-found"))
        if why != "queued":
            upload(server, token, serving, why)

    def upload(server, token, serving, why=""):
        client, root, index = waiting.pop(token)
        data = None
        if serving is not None:
            data = serving.data if serving.data is not None else (
                by_digest[serving.digest] if serving.shard in stores[server] else None)
        if data is None:
            net.at(net.now + lat, answer, client, server, root, index, b"", why or "not-found")
            return
        counts["bytes"] += len(data)
        counts["served_by_trainer"] += server == 0

        def sent():
            for t, d in ex[server].upload_done(token, net.now):
                upload(server, t, d)
            net.at(net.now + lat, answer, client, server, root, index, data, None)
        net.transfer(server, client, len(data) + 200, sent)

    def answer(client, server, root, index, data, error):
        carry(client, ex[client].on_response(net.now, server, root, index, data, error))

    def manifest(i):
        carry(i, ex[i].add(net.now, want))
        carry(i, ex[i].on_holder(net.now, 0, want.task_id, want.version) if 0 in links[i] else [])

    for i in range(n):
        for j in sorted(links[i]):
            ex[i].on_connected(0.0, j)
    stores[0] = set(shard_digests)
    carry(0, ex[0].add(0.0, want, held=True))
    for i in range(1, n):
        net.at(hops[i] * lat, manifest, i)
    net.run(cfg.until, stop=lambda: len(done_at) >= cfg.peers)
    times = sorted(done_at.values())
    bound = size * 8 / (cfg.mbps * 1e6)
    reach = times[target - 1] if len(times) >= target else None
    return {"mode": cfg.mode, "peers": cfg.peers, "size_mb": cfg.size_mb, "shard_mib": cfg.shard_mb,
            "shards": count, "piece_kib": cfg.piece_kib, "pieces": layout.pieces, "mbps": cfg.mbps, "latency_ms": cfg.latency_ms,
            "degree": cfg.degree if not star else None, "lower_bound_s": round(bound, 3),
            "reach_95_s": None if reach is None else round(reach, 3),
            "ratio_95": None if reach is None else round(reach / bound, 3),
            "reach_all_s": round(times[-1], 3) if len(times) == cfg.peers else None,
            "completed": len(times), "requests": counts["requests"],
            "trainer_upload_x": round(counts["served_by_trainer"] / layout.pieces, 2),
            "bytes_moved_x": round(counts["bytes"] / size, 2), "announces": counts["announces"]}


def exchange_config(cfg: SwarmingConfig) -> ExchangeConfig:
    """The exchange every simulated peer runs: the node's defaults with `cfg`'s settings; in the star,
    no timeouts (an HTTP client waits for a slow origin), no super-seeding, no upload slots, and four
    requests in flight to the origin (an HTTP download streams: with one piece at a time each client's
    share of the origin would idle a round trip per piece, 14x instead of 12x for 12 peers)."""
    star = cfg.mode == "star"
    return ExchangeConfig(per_peer=max(cfg.per_peer, 4) if star else cfg.per_peer, max_in_flight=cfg.max_in_flight,
                          open_shards=cfg.open_shards,
                          have_interval=cfg.have_interval,
                          timeout=1e9 if star else ExchangeConfig.timeout, spread=-1 if star else cfg.spread,
                          upload_slots=0 if star else cfg.upload_slots, upload_queue=cfg.upload_queue)


def _graph(n: int, degree: int, rng: Rng) -> list[set]:
    """A connected random graph: a random ring (connectivity) plus random chords up to ~`degree` each."""
    order = list(range(n))
    rng.shuffle(order)
    links = [set() for _ in range(n)]
    for k in range(n):
        a, b = order[k], order[(k + 1) % n]
        if a != b:
            links[a].add(b)
            links[b].add(a)
    for a in range(n):
        while len(links[a]) < min(degree, n - 1):
            b = rng.randrange(n)
            if b != a:
                links[a].add(b)
                links[b].add(a)
    return links


def _hops(links: list[set]) -> list[int]:
    dist = [-1] * len(links)
    dist[0], frontier = 0, [0]
    while frontier:
        nxt = []
        for a in frontier:
            for b in links[a]:
                if dist[b] < 0:
                    dist[b] = dist[a] + 1
                    nxt.append(b)
        frontier = nxt
    return [d if d >= 0 else 0 for d in dist]


def compare(peers: int, size_mb: float = 50.0, mbps: float = 50.0, seed: int = 1, **kw) -> dict:
    """Both modes in one invocation: {"swarm": ..., "star": ...}."""
    return {mode: run_swarming(SwarmingConfig(peers=peers, size_mb=size_mb, mbps=mbps, mode=mode, seed=seed, **kw))
            for mode in ("swarm", "star")}
