"""The shard exchange with no sockets: several `ShardExchange`s wired together in memory, then whole
cores (MemoryNet) with a peer that corrupts, truncates or withholds pieces, a restart and a gc.

`WHOLE` is a version whose shards are their own pieces (index = shard: the simplest to reason about);
`CUT` the same shards cut into 25-byte pieces (four a shard, two for the short last one)."""

import hashlib

import pytest

from gossip.identity import Identity
from swarm import jobs, protocols
from swarm.core import CoreConfig, PeerCore
from swarm.exchange import Announce, Blame, Check, Done, ExchangeConfig, Fetch, ShardExchange, Store, Want
from swarm.pieces import Layout, bitmap_of, mask_of
from swarm.shardwire import decode_request, encode_request
from swarm.pieceset import EMPTY, PieceSet
from swarm.sources import Backoff, Sources
from swarm.io import LocalCommand, SendRequest
from swarm.rng import Rng
from tests.samples import T0, task
from tests.swarm import test_roles
from tests.swarm import harness
from tests.swarm.harness import MemoryNet


def h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


SHARDS = [bytes([i]) * (100 if i < 9 else 37) for i in range(10)]
WANT = WHOLE = Want(h(b"root"), "t" * 16, 3, tuple(h(s) for s in SHARDS), tuple(len(s) for s in SHARDS))
STREAM = b"".join(SHARDS)
PIECES = [STREAM[i:i + 25] for i in range(0, len(STREAM), 25)]
CUT = Want(h(b"cut"), "t" * 16, 4, WHOLE.hashes, WHOLE.sizes, 25, tuple(h(p) for p in PIECES))


class Wire:
    """Exchanges by name; each Fetch is answered, after 0.1 s, with what the server's exchange says to
    serve (from its stored shards, or from memory for a shard it has not completed), unless the
    server's `behaviour` says otherwise."""

    def __init__(self, names, seeders, config=None, want=WHOLE):
        self.now = 0.0
        self.want = want
        self.ex = {n: ShardExchange(Rng(i + 1), config or ExchangeConfig(timeout=2.0)) for i, n in enumerate(names)}
        self.stored = {n: {} for n in names}
        self.behaviour = {n: "honest" for n in names}
        self.queue = []  # (at, seq, client, server, index)
        self.blamed = []
        self.done = set()
        self.max_load = {}
        self.asked = []
        self.relayed_early = 0  # pieces served from a shard the server had not completed yet
        for n in names:
            for other in names:
                if other != n:
                    self.ex[n].on_connected(0.0, other)
        for n in names:
            if n in seeders:
                self.stored[n] = {h(s): s for s in SHARDS}
                self.run(n, self.ex[n].add(0.0, want, held=True))
            else:
                self.run(n, self.ex[n].add(0.0, want))

    def run(self, peer, actions):
        for a in actions:
            if isinstance(a, Check):
                self.run(peer, self.ex[peer].on_present(self.now, a.root, frozenset(self.stored[peer]) & set(a.digests)))
            elif isinstance(a, Announce):
                for other, ex in self.ex.items():
                    if other != peer:
                        self.run(other, ex.on_have(self.now, peer, a.root, a.bitmap))
            elif isinstance(a, Fetch):
                self.asked.append((peer, a.peer, a.index))
                self.queue.append((self.now + 0.1, len(self.asked), peer, a.peer, a.index))
                flying = sum(1 for _, _, c, s, _ in self.queue if (c, s) == (peer, a.peer))
                self.max_load[(peer, a.peer)] = max(self.max_load.get((peer, a.peer), 0), flying)
            elif isinstance(a, Store):
                data = b"".join(a.parts)
                assert h(data) == a.digest == self.want.hashes[a.index] == h(SHARDS[a.index])
                self.stored[peer][a.digest] = data
            elif isinstance(a, Blame):
                self.blamed.append((peer, a.peer, a.reason))
            elif isinstance(a, Done):
                self.done.add(peer)

    def step(self):
        if not self.queue:
            deadline = min([d for d in (ex.next_deadline() for ex in self.ex.values()) if d is not None], default=None)
            if deadline is None:
                return False
            self.now = max(self.now, deadline)
            for n, ex in self.ex.items():
                self.run(n, ex.on_tick(self.now))
            return True
        self.queue.sort()
        at, _, client, server, index = self.queue.pop(0)
        self.now = max(self.now, at)
        serving, error = self.ex[server].serve(self.want.root, index, self.now)
        data = b""
        if serving is not None:
            error = None
            if serving.data is not None:
                data = serving.data
                self.relayed_early += 1
            else:
                data = self.stored[server][serving.shard][serving.offset:serving.offset + serving.length]
        how = self.behaviour[server]
        if how == "silent":
            for n, ex in self.ex.items():
                self.run(n, ex.on_tick(self.now))
            return True
        if serving is None or how == "withhold":
            data, error = b"", error or "not-found"
        elif how == "corrupt":
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        elif how == "truncate":
            data = data[:-1]
        self.run(client, self.ex[client].on_response(self.now, server, self.want.root, index, data, error))
        return True

    def settle(self, limit=5000):
        for _ in range(limit):
            if not self.step():
                break


def test_request_codec_and_bitmaps():
    assert decode_request(encode_request(WANT.root, 7)) == (WANT.root, 7)
    with pytest.raises(Exception) as info:
        decode_request(b"short")
    assert info.value.reason == "malformed"
    mask = 0b1000000101
    assert mask_of(bitmap_of(mask, 10), 10) == mask
    from gossip.messages import ShardHave
    have = ShardHave(task_id="t" * 16, root=WANT.root, version=3, bitmap=bitmap_of(mask, 10), sent_at=T0)
    assert [i for i in range(10) if have.holds(i)] == [0, 2, 9]


def test_pieceset_is_a_set_of_indices():
    s = PieceSet([0, 2, 9])
    assert list(s) == [0, 2, 9] and len(s) == 3 and s and not EMPTY and len(EMPTY) == 0
    assert 2 in s and 1 not in s and 64 not in s and -1 not in s
    assert s.mask == 0b1000000101 == mask_of(s.bitmap(10), 10)
    assert s.add(1) == PieceSet([0, 1, 2, 9]) and s.add(2) == s
    assert s.discard(2) == PieceSet([0, 9]) and s.discard(5) == s
    t = PieceSet([2, 3])
    assert s | t == PieceSet([0, 2, 3, 9]) and s & t == PieceSet([2]) and s - t == PieceSet([0, 9])
    assert s.missing(10) == PieceSet([1, 3, 4, 5, 6, 7, 8]) and PieceSet.full(10).missing(10) == EMPTY
    assert PieceSet.full(4) == PieceSet(range(4)) and PieceSet.span(range(3, 6)) == PieceSet([3, 4, 5])
    assert PieceSet.span(range(2, 2)) == EMPTY and PieceSet.from_mask(0b101) == PieceSet([0, 2])
    assert PieceSet([2]) <= s and not t <= s
    assert {PieceSet([1]): "a"}[PieceSet([1])] == "a" and s != s.mask and repr(t) == "PieceSet([2, 3])"
    with pytest.raises(ValueError):
        PieceSet([-1])


def test_pieceset_is_immutable_and_reads_wire_bitmaps():
    s = PieceSet([1])
    s.add(5)  # a new set; s is unchanged
    assert s == PieceSet([1])
    with pytest.raises(AttributeError):
        s._bits = 3
    # bits beyond the version's pieces are ignored; a bitmap is bit i of byte i // 8, low bit first
    assert PieceSet.from_bitmap(bytes([0b00000101, 0xFF]), 10) == PieceSet([0, 2, 8, 9])
    assert PieceSet([0, 2, 8, 9]).bitmap(10) == bytes([0b00000101, 0b11])
    assert Layout((100, 100, 50), 25).shard_pieces(2) == PieceSet([8, 9])


def test_pieceset_pick_is_one_draw_from_a_random_start():
    class Draws:
        def __init__(self, starts):
            self.starts = list(starts)

        def randrange(self, n):
            return self.starts.pop(0)

    s = PieceSet([2, 5, 9])
    assert [s.pick(10, Draws([k])) for k in (0, 2, 3, 6, 9)] == [2, 2, 5, 9, 9]
    assert s.pick(12, Draws([10])) == 2, "past the last member it wraps to the first"
    for seed in range(20):  # a member always, whatever the rng
        assert s.pick(10, Rng(seed)) in s


def test_rarity_classes_match_the_holders_however_pieces_arrive():
    """`Sources` moves a few new pieces one by one and many a class at a time: either way every piece
    sits in the class of its holder count, and only non-empty classes exist."""
    rng = Rng(7)
    src = Sources(30)
    for step in range(300):
        peer = rng.randrange(12)
        if rng.randrange(10) == 0:
            src.forget(peer)
        else:
            size = 1 + rng.randrange(3) if rng.randrange(3) else 1 + rng.randrange(30)
            src.add(peer, PieceSet(rng.randrange(30) for _ in range(size)))
        counts = [sum(1 for held in src.holders.values() if i in held) for i in range(30)]
        expected = {c: PieceSet(i for i in range(30) if counts[i] == c) for c in set(counts)}
        assert src.rarity == expected and src.counts == counts, step
    least = min(src.rarity)
    assert src.rarest(PieceSet.full(30), rng) in src.rarity[least]


def test_backoff_keeps_refusals_by_peer_in_step():
    b = Backoff()
    b.refuse(3, "p", until=5.0)
    b.strike(4, "p", until=10.0, limit=2)
    b.refuse(3, "q", until=10.0)
    assert b.by_peer == {"p": PieceSet([3, 4]), "q": PieceSet([3])} and b.strikes == {"p": 1} and not b.skip
    b.expire(5.0)
    assert b.by_peer == {"p": PieceSet([4]), "q": PieceSet([3])} and set(b.refused) == {(4, "p"), (3, "q")}
    b.strike(5, "p", until=20.0, limit=2)
    assert b.skip == {"p": 20.0} and b.strikes == {"p": 0}, "the second strike skips the peer"
    b.expire(10.0)
    assert b.by_peer == {"p": PieceSet([5])} and b.skip == {"p": 20.0}
    b.expire(20.0)
    assert not b.by_peer and not b.refused and not b.skip


def test_everyone_gets_every_shard_from_several_peers_within_bounds():
    wire = Wire(["seed", "a", "b", "c", "d"], seeders={"seed"}, config=ExchangeConfig(per_peer=2, timeout=2.0))
    wire.settle()
    assert wire.done == {"a", "b", "c", "d"}
    for peer in "abcd":
        assert set(wire.stored[peer]) == set(WANT.hashes)
    servers = {s for _, s, _ in wire.asked}
    assert servers - {"seed"}, "peers served each other, not only the seed"
    assert max(wire.max_load.values()) <= 2, "never more than per_peer requests in flight to one peer"
    assert not wire.blamed


def test_rarest_first():
    """Each free holder is asked for the rarest piece it holds: z for the one only z has."""
    ex = ShardExchange(Rng(3), ExchangeConfig(per_peer=1, max_in_flight=3))
    for p in ("x", "y", "z"):
        ex.on_connected(0.0, p)
    ex.add(0.0, WANT)
    full, rare = (1 << 10) - 1, 1 << 9
    ex.on_have(0.0, "x", WANT.root, bitmap_of(full & ~rare, 10))
    ex.on_have(0.0, "y", WANT.root, bitmap_of(full & ~rare, 10))
    ex.on_have(0.0, "z", WANT.root, bitmap_of(full, 10))
    actions = ex.on_present(0.0, WANT.root, frozenset())
    fetches = {a.peer: a.index for a in actions if isinstance(a, Fetch)}
    assert fetches["z"] == 9, "the rarest piece of the only peer that holds it"
    assert set(fetches) == {"x", "y", "z"} and len(set(fetches.values())) == 3


@pytest.mark.parametrize("how,reason", [("corrupt", "bad-shard"), ("truncate", "truncated"),
                                        ("withhold", "withheld"), ("silent", "withheld")])
def test_a_bad_server_is_blamed_and_the_shard_fetched_elsewhere(how, reason):
    # endgame off: a silent peer must be noticed by its timeout, not rescued by a duplicate request
    wire = Wire(["seed", "bad", "a"], seeders={"seed", "bad"}, config=ExchangeConfig(per_peer=1, timeout=2.0, endgame=False))
    wire.behaviour["bad"] = how
    wire.settle()
    assert "a" in wire.done and set(wire.stored["a"]) == set(WANT.hashes), "fetched elsewhere"
    assert ("a", "bad", reason) in wire.blamed
    assert {s for (c, s, r) in wire.blamed} == {"bad"}
    asked_bad = [i for c, s, i in wire.asked if (c, s) == ("a", "bad")]
    if how in ("corrupt", "truncate"):
        assert len(asked_bad) == 1, "a peer that served bad bytes is never asked again"
    else:
        assert len(asked_bad) <= ExchangeConfig().strikes + 1


def test_a_download_resumes_from_what_is_already_stored():
    wire = Wire(["seed", "a"], seeders={"seed"})
    ex = ShardExchange(Rng(9), ExchangeConfig())
    ex.on_connected(0.0, "seed")
    actions = ex.add(0.0, WANT)
    assert actions == [Check(WANT.root, WANT.hashes)], "first ask the store what survived the restart"
    present = frozenset(WANT.hashes[:7])
    actions = ex.on_present(0.0, WANT.root, present) + ex.on_have(0.0, "seed", WANT.root, bitmap_of((1 << 10) - 1, 10))
    fetched = {a.index for a in actions if isinstance(a, Fetch)}
    assert fetched and fetched <= {7, 8, 9}
    assert any(isinstance(a, Announce) for a in actions), "what survived is announced"


def test_keep_and_drop():
    ex = ShardExchange(Rng(1))
    ex.add(0.0, WANT, held=True)
    serving, why = ex.serve(WANT.root, 3)
    assert ex.keep() == frozenset(WANT.hashes) and why == "" and serving.shard == WANT.hashes[3]
    ex.drop(WANT.root)
    assert ex.keep() == frozenset() and ex.serve(WANT.root, 3) == (None, "not-found")


def test_an_origin_serves_a_refused_piece_to_an_asker_that_comes_back_for_it():
    """Pieces 0 and 1 went out to a peer that then left; the two peers still downloading both lack them
    and hold every other piece, so none of the least-served pieces is ever asked for again: each asker
    is refused once, and served when it comes back after its rest (before, refused forever)."""
    ex = ShardExchange(Rng(1), ExchangeConfig(spread=1))
    ex.add(0.0, WANT, held=True)
    for i in (0, 1):
        assert ex.serve(WANT.root, i, peer="gone")[0] is not None
    assert ex.serve(WANT.root, 0, peer="a") == (None, "busy")
    assert ex.serve(WANT.root, 1, peer="b") == (None, "busy")
    assert ex.serve(WANT.root, 1, peer="a") == (None, "busy"), "refused per piece: a has not asked for 1"
    assert ex.serve(WANT.root, 0, peer="a")[0].shard == WANT.hashes[0]
    assert ex.serve(WANT.root, 1, peer="b")[0].shard == WANT.hashes[1]
    assert ex.serve(WANT.root, 0, peer="b") == (None, "busy")


def test_an_origin_spreads_first_copies_before_repeats():
    ex = ShardExchange(Rng(1), ExchangeConfig(spread=1))
    ex.add(0.0, WANT, held=True)
    assert ex.serve(WANT.root, 3)[0].shard == WANT.hashes[3]
    assert ex.serve(WANT.root, 3) == (None, "busy"), "shard 3 went out once; others not yet"
    for i in range(10):
        if i != 3:
            assert ex.serve(WANT.root, i)[0].shard == WANT.hashes[i]
    assert ex.serve(WANT.root, 3)[0].shard == WANT.hashes[3], "every shard out once: repeats allowed"
    # a client told "busy" asks someone else, or the same peer again after a backoff, without blame
    client = ShardExchange(Rng(2), ExchangeConfig(per_peer=1, max_in_flight=1, busy_backoff=1.0))
    client.on_connected(0.0, "origin")
    client.add(0.0, WANT)
    client.on_have(0.0, "origin", WANT.root, bitmap_of((1 << 10) - 1, 10))
    (fetch,) = [a for a in client.on_present(0.0, WANT.root, frozenset()) if isinstance(a, Fetch)]
    again = client.on_response(0.1, "origin", WANT.root, fetch.index, b"", "busy")
    assert not [a for a in again if isinstance(a, Blame)]
    assert [a.index for a in again if isinstance(a, Fetch)] != [fetch.index]



def test_the_endgame_doubles_only_a_late_request():
    """Every missing shard in flight: a request on time is not asked of a second holder (its bytes
    would cross two links for one shard); once it is out `endgame_slow` times the mean answer time,
    it is, and the first answer wins."""
    ex = ShardExchange(Rng(4), ExchangeConfig(per_peer=1, max_in_flight=4, timeout=20.0, endgame_slow=2.0))
    for p in ("p", "q", "r"):
        ex.on_connected(0.0, p)
    ex.add(0.0, WANT)
    ex.on_present(0.0, WANT.root, frozenset(WANT.hashes[:8]))
    first = [a for a in ex.on_have(0.0, "p", WANT.root, bitmap_of((1 << 10) - 1, 10)) if isinstance(a, Fetch)]
    assert len(first) == 1 and first[0].peer == "p"
    # q and r hold everything: the other missing shard goes to one of them, then every shard is in flight
    more = [a for a in ex.on_have(0.0, "q", WANT.root, bitmap_of((1 << 10) - 1, 10)) if isinstance(a, Fetch)]
    assert [a.index for a in more] == [({8, 9} - {first[0].index}).pop()]
    done = more[0]
    out = ex.on_response(1.0, done.peer, WANT.root, done.index, SHARDS[done.index], None)  # answers take 1 s
    assert [a for a in out if isinstance(a, Store)]
    assert not [a for a in out + ex.on_have(1.0, "r", WANT.root, bitmap_of((1 << 10) - 1, 10))
                if isinstance(a, Fetch)], "the last request is 1 s old: on time, not doubled"
    assert ex.next_deadline() == pytest.approx(2.0), "it is late at twice the mean answer time"
    late = [a for a in ex.on_tick(2.0) if isinstance(a, Fetch)]
    assert [a.index for a in late] == [first[0].index] and late[0].peer in ("q", "r")
    out = ex.on_response(2.5, late[0].peer, WANT.root, late[0].index, SHARDS[late[0].index], None)
    assert Done(WANT.root) in out

def test_pieces_are_relayed_before_their_shard_is_complete():
    wire = Wire(["seed", "a", "b", "c", "d"], seeders={"seed"}, want=CUT)
    wire.settle()
    assert wire.done == {"a", "b", "c", "d"}
    for peer in "abcd":
        assert wire.stored[peer] == {h(s): s for s in SHARDS}, "every shard whole and checked in the store"
        assert not wire.ex[peer].downloads[CUT.root].have.parts, "no piece left in memory"
    assert wire.relayed_early, "a peer served a piece of a shard it had not completed"
    assert {s for _, s, _ in wire.asked} - {"seed"}, "peers served each other"
    assert not wire.blamed


@pytest.mark.parametrize("how,reason", [("corrupt", "bad-shard"), ("truncate", "truncated")])
def test_a_bad_piece_is_blamed_and_fetched_elsewhere(how, reason):
    wire = Wire(["seed", "bad", "a"], seeders={"seed", "bad"}, config=ExchangeConfig(timeout=2.0, endgame=False),
                want=CUT)
    wire.behaviour["bad"] = how
    wire.settle()
    assert "a" in wire.done and wire.stored["a"] == {h(s): s for s in SHARDS}
    assert ("a", "bad", reason) in wire.blamed
    assert len([i for c, s, i in wire.asked if (c, s) == ("a", "bad")]) == 1


def test_open_shards_bound_the_pieces_held_in_memory():
    """At most `open_shards` shards are started and not complete, whatever the holders offer."""
    wire = Wire(["seed", "p", "q", "a"], seeders={"seed", "p", "q"}, want=CUT,
                config=ExchangeConfig(timeout=2.0, open_shards=2, max_in_flight=8, spread=-1))
    d = wire.ex["a"].downloads[CUT.root]
    widest = 0
    for _ in range(5000):
        open_now = set(d.have.parts) | {d.layout.shard_of(i) for i in d.flying.pieces}
        widest = max(widest, len(open_now))
        assert len(open_now) <= 2
        if not wire.step():
            break
    assert "a" in wire.done and widest == 2


def test_a_resumed_download_fetches_only_the_pieces_of_shards_not_stored():
    ex = ShardExchange(Rng(9), ExchangeConfig())
    ex.on_connected(0.0, "seed")
    assert ex.add(0.0, CUT) == [Check(CUT.root, CUT.hashes)], "the store is asked by shard"
    present = frozenset(CUT.hashes[:7])
    actions = ex.on_present(0.0, CUT.root, present) + ex.on_have(0.0, "seed", CUT.root,
                                                                 bitmap_of((1 << len(PIECES)) - 1, len(PIECES)))
    (fetch,) = [a for a in actions if isinstance(a, Fetch)]  # one per source
    assert fetch.index >= CUT.layout().pieces_of(7).start
    (announce,) = [a for a in actions if isinstance(a, Announce)]
    assert mask_of(announce.bitmap, len(PIECES)) == (1 << CUT.layout().pieces_of(7).start) - 1


def test_serving_a_piece_of_a_stored_shard_and_of_an_open_one():
    ex = ShardExchange(Rng(1), ExchangeConfig(spread=-1))
    ex.on_connected(0.0, "seed")
    ex.add(0.0, CUT)
    ex.on_present(0.0, CUT.root, frozenset(CUT.hashes[:1]))
    serving, _ = ex.serve(CUT.root, 2)  # shard 0 is stored: read from the store, checked there
    assert (serving.shard, serving.offset, serving.length, serving.data) == (CUT.hashes[0], 50, 25, None)
    assert serving.digest == h(PIECES[2])
    assert ex.serve(CUT.root, 5) == (None, "not-found")
    actions = ex.on_have(0.0, "seed", CUT.root, bitmap_of((1 << len(PIECES)) - 1, len(PIECES)))
    index = next(a.index for a in actions if isinstance(a, Fetch))
    out = ex.on_response(0.1, "seed", CUT.root, index, PIECES[index], None)
    assert not [a for a in out if isinstance(a, Store)], "one piece of four: the shard is not complete"
    serving, _ = ex.serve(CUT.root, index)
    assert serving.data is PIECES[index] and serving.digest == h(PIECES[index])


# ---------------------------------------------------------------- whole cores


def cores(n_workers):
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
    workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2)
               for i in range(n_workers)]
    net = MemoryNet([trainer, *workers], T0)
    net.jobs = test_roles.fake_jobs
    return net, trainer, workers


def announce(net, trainer, params=None):
    t = task(trainer_keys=(trainer.identity.public_key,),
             params=params or {"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
    net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    return t.task_id


def record_shard_requests(net):
    sent = []
    carry = net._carry_out

    def carry_out(peer, inp, effect):
        if isinstance(effect, SendRequest) and effect.protocol == protocols.SHARD:
            sent.append((peer, effect.peer, decode_request(effect.data)))
        carry(peer, inp, effect)
    net._carry_out = carry_out
    return sent


def test_a_peer_serving_corrupt_pieces_is_penalised_and_the_version_comes_from_another(monkeypatch):
    monkeypatch.setattr(harness, "FAKE_PIECE", 64)  # four pieces a shard, relayed before it is complete
    net, trainer, (relay, bad, late) = cores(3)
    sent = record_shard_requests(net)
    net.start()
    net.connect(trainer.peer_id, relay.peer_id)
    net.connect(trainer.peer_id, bad.peer_id)
    task_id = announce(net, trainer)
    net.run_for(4)  # relay and bad hold version 0 now
    assert {f["version"] for p, f in net.events_named("version-installed") if p == bad.peer_id}
    net.serve_hook = lambda server, digest, data: (
        bytes([data[0] ^ 1]) + data[1:] if server == bad.peer_id and data else data)
    net.connect(late.peer_id, bad.peer_id)  # the late peer first only reaches the corrupting one
    net.run_for(2)
    net.connect(late.peer_id, relay.peer_id)
    net.run_for(6)
    blamed = [f for p, f in net.events_named("shard-rejected") if p == late.peer_id]
    assert blamed and {f["peer"] for f in blamed} == {bad.peer_id} and {f["reason"] for f in blamed} == {"bad-shard"}
    assert late.ledger.get(bad.peer_id).rejected["bad-shard"] >= 1
    assert late.snapshot(net.now)["work"]["worker"][task_id]["held_versions"], "installed from the honest relay"
    asked_bad = [r for c, s, r in sent if (c, s) == (late.peer_id, bad.peer_id)]
    assert 1 <= len(asked_bad) <= 2, "asked at most what was in flight (per_peer) when it failed, never again"
    assert all(h(d) == k for k, d in net.shards[late.peer_id].items()), "nothing bad stored"


def test_restart_resumes_and_old_versions_are_collected():
    net, trainer, (worker,) = cores(1)
    sent = record_shard_requests(net)
    net.start()
    net.connect(trainer.peer_id, worker.peer_id)
    task_id = announce(net, trainer)
    net.run_for(30)
    v = trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"]
    assert v >= 5
    held = worker.snapshot(net.now)["work"]["worker"][task_id]["held_versions"]
    # gc: the worker's store holds only the shards of versions it still tracks (window + margin)
    tracked = {d["version"] for d in worker.snapshot(net.now)["downloads"]}
    assert min(tracked) >= v - 6 and len(held) <= 5
    shards = {k for k, data in net.shards[worker.peer_id].items() if b"#" in data}  # (not job outputs)
    assert shards == set(worker.shards.exchange.keep()), "released versions' shards are deleted"
    assert len(trainer.shards.exchange.downloads) <= 2 + 2 + 8, "the trainer releases versions too"
    # restart: a fresh core with the same identity and the same shard store resumes
    net.stop(worker.peer_id)
    stored = set(net.shards[worker.peer_id])
    fresh = PeerCore(worker.identity, CoreConfig(roles=("worker",)), seed=99)
    net.cores[worker.peer_id] = fresh
    before = len(sent)
    net.start(worker.peer_id)
    net.connect(trainer.peer_id, worker.peer_id)
    net.run_for(15)
    assert fresh.snapshot(net.now)["work"]["worker"][task_id]["held_versions"]
    asked = [r for c, s, r in sent[before:] if c == worker.peer_id]
    for d in fresh.shards.exchange.downloads.values():
        already = {p for i, k in enumerate(d.want.hashes) if k in stored for p in d.layout.pieces_of(i)}
        assert not [r for r in asked if r[0] == d.want.root and r[1] in already], "stored shards are not fetched again"


def test_a_download_recovers_when_a_struck_out_source_comes_back():
    wire = Wire(["seed", "a"], seeders={"seed"}, config=ExchangeConfig(per_peer=1, timeout=2.0, skip_for=3.0))
    wire.behaviour["seed"] = "withhold"  # overloaded or restarting: answers not-found for a while
    for _ in range(6):
        wire.step()
    assert ("a", "seed", "withheld") in wire.blamed and "a" not in wire.done
    wire.behaviour["seed"] = "honest"
    wire.settle()
    assert "a" in wire.done, "the skip expires and the only source is asked again"
