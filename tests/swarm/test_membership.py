"""Membership's heap-driven sweep and counted links give what a scan of the whole table gives."""

from __future__ import annotations

import copy

import pytest

from gossip.errors import Rejected
from gossip.messages import PeerAddrs, StatusHeartbeat
from swarm.io import Disconnect, Emit
from swarm.membership import ALIVE, GONE, Membership, MembershipConfig
from swarm.rng import Rng


def reference_sweep(m: Membership, now: float) -> list:
    """The table scan `sweep()` replaced, kept here as the specification."""
    effects: list = []
    for peer in sorted(m.peers):
        info = m.peers[peer]
        if info.state == ALIVE and info.last_seen is not None and now - info.last_seen > m.gone_threshold(info):
            info.state = GONE
            info.next_dial = now + m.config.dial_backoff
            effects.append(Emit("peer-gone", {"peer": peer, "silent_for": round(now - info.last_seen, 3)}))
            if info.connected:
                effects.append(Disconnect(peer, "silent"))
        elif info.state == GONE and not info.connected and now - (info.last_seen or 0.0) > m.config.forget_after:
            del m.peers[peer]
    return effects


def table(m: Membership) -> list:
    return [(p, i.state, i.connected, i.last_seen, i.next_dial) for p, i in sorted(m.peers.items())]


def test_sweep_matches_a_full_scan_under_random_traffic():
    cfg = MembershipConfig(gone_after=5.0, forget_after=40.0, max_peers=40)
    m = Membership("self", cfg)
    rng = Rng(7)
    peers = [f"p{i:02d}" for i in range(30)]
    seq = {p: 0 for p in peers}
    now = 1000.0
    changed = 0
    for step in range(3000):
        now += rng.uniform(0.0, 0.7)
        p = rng.choice(peers)
        roll = rng.random()
        if roll < 0.5:
            seq[p] += 1
            beat = StatusHeartbeat(seq=seq[p], sent_at=now, interval=rng.choice([1.0, 2.0, 4.0]), roles=("relay",),
                                   agent="t", listen_addrs=(f"/mem/{p}",), tasks=(), versions={},
                                   known_peers=tuple(PeerAddrs(rng.choice(peers + ["self"]), (f"/mem/x{step}",))
                                                     for _ in range(rng.randrange(3))))
            try:
                m.on_heartbeat(now, p, beat)
            except Rejected:
                pass
        elif roll < 0.65:
            m.on_connected(p, (f"/mem/{p}",))
        elif roll < 0.85:
            m.on_disconnected(p)
        if step % 5 == 0:
            ref = copy.deepcopy(m)
            expected = reference_sweep(ref, now)
            got = m.sweep(now)
            assert got == expected
            assert table(m) == table(ref)
            changed += len(got)
        assert len(m._linked) == sum(1 for i in m.peers.values() if i.connected)
    assert changed > 20  # peers did go gone and come back


def test_peer_exchange_relearns_a_peer_evicted_from_a_full_table():
    m = Membership("self", MembershipConfig(max_peers=2))

    def beat(seq, known):
        return StatusHeartbeat(seq=seq, sent_at=float(seq), interval=1.0, roles=(), agent="t",
                               listen_addrs=("/mem/a",), tasks=(), versions={},
                               known_peers=tuple(PeerAddrs(p, (f"/mem/{p}",)) for p in known))

    m.on_heartbeat(1.0, "a", beat(1, ["self", "b"]))
    assert m.peers["b"].addrs == ("/mem/b",) and "self" not in m.peers
    m.on_heartbeat(2.0, "a", beat(2, ["c"]))  # the table is full: b (never heard) makes room for c
    assert sorted(m.peers) == ["a", "c"]
    m.on_heartbeat(3.0, "a", beat(3, ["b"]))  # b is news again (c makes room)
    assert m.peers["b"].addrs == ("/mem/b",)



def test_a_table_full_of_live_strangers_still_takes_our_neighbours():
    """Issue 27, attack 1: heartbeats from fresh keys filled the table with live entries, and a peer that
    then linked to us got none, so its heartbeats were dropped and it never showed alive. A linked peer
    now takes the place of the stranger heard from least recently."""
    m = Membership("self", MembershipConfig(max_peers=4))
    for i in range(6):  # the last two find the table full of live entries: not kept
        m.on_heartbeat(10.0 + i, f"fake{i}", beat(1, 10.0 + i, 3599.5, 0))
    assert sorted(m.peers) == ["fake0", "fake1", "fake2", "fake3"]
    m.on_connected("neighbour", ())
    assert "neighbour" in m.peers and "fake0" not in m.peers
    m.on_heartbeat(20.0, "neighbour", beat(1, 20.0, 2.0, 2))
    assert "neighbour" in m.alive_peers() and m.connected_peers() == ["neighbour"]
    assert len(m.peers) == 4
    for i in range(6, 12):  # the flood goes on: our neighbour keeps its place
        m.on_heartbeat(20.0 + i, f"fake{i}", beat(1, 20.0 + i, 3599.5, 0))
    assert "neighbour" in m.peers

def test_a_key_declaring_an_hour_is_believed_for_four_of_our_intervals():
    """Issue 27, attack 1: each fake heartbeat declared 3,599.5 s, so one heartbeat kept a fresh key alive
    for three hours. A declared interval now counts up to 4 times our own; an honest peer's, stretched
    for the same swarm, is near ours and counts in full."""
    m = Membership("self", MembershipConfig())
    m.on_heartbeat(100.0, "honest", beat(1, 100.0, 2.0, 2))
    interval, _ = m.pace()
    assert interval == 2.0
    m.on_heartbeat(100.0, "fake", beat(1, 100.0, 3599.5, 0))
    m.on_heartbeat(100.0, "slow", beat(1, 100.0, 7.5, 2))  # a peer that counted a bigger swarm: believed
    assert m.gone_threshold(m.peers["fake"]) == 3 * 8.0 + 1 and m.gone_threshold(m.peers["slow"]) == 3 * 7.5 + 1
    m.on_heartbeat(124.0, "honest", beat(2, 124.0, 2.0, 2))
    m.sweep(124.5)
    assert m.alive_peers() == ["fake", "honest"]
    m.sweep(125.5)
    assert m.alive_peers() == ["honest"], "25 s of silence, where 3 hours were allowed before"


def test_maintain_dials_only_while_short_of_links():
    cfg = MembershipConfig(target_connections=2)
    m = Membership("self", cfg)
    for i in range(5):
        m.learn_addrs(f"p{i}", (f"/mem/p{i}",))
    dials, short = m.maintain(0.0, Rng(1), lambda p: False)
    assert len(dials) == 2 and not short
    m.on_connected("p0", ())
    m.on_connected("p1", ())
    assert m.maintain(100.0, Rng(1), lambda p: False) == ([], False)
    m.on_disconnected("p1")
    dials, short = m.maintain(100.0, Rng(1), lambda p: False)
    assert len(dials) == 1 and not short
    lonely = Membership("self", MembershipConfig(target_connections=3))
    lonely.learn_addrs("p0", ("/mem/p0",))
    dials, short = lonely.maintain(0.0, Rng(1), lambda p: False)
    assert len(dials) == 1 and short, "3 links wanted, 1 address known: ask the neighbours for more"


def beat(seq: int, now: float, interval: float, peers: int) -> StatusHeartbeat:
    return StatusHeartbeat(seq=seq, sent_at=now, interval=interval, roles=("relay",), agent="t", listen_addrs=(),
                           tasks=(), versions={}, known_peers=(), peers=peers)


def hearing(declared: list[int], budget: float = 0.3) -> Membership:
    m = Membership("self", MembershipConfig(status_budget=budget))
    for i, size in enumerate(declared):
        m.on_heartbeat(100.0, f"p{i:02d}", beat(1, 100.0, 3000.0, size))
    return m


def test_a_newcomer_borrows_the_swarm_size_others_declare():
    """CORE_CHANGES item 8: seconds after joining a 1,000-peer swarm we have heard a handful of peers;
    our own count would give a short interval (and a second heartbeat soon), the declared size does not."""
    m = hearing([1000, 990, 1000, 0, 0])  # 0: peers that knew nobody, ignored
    interval, size = m.pace(uptime=3.0)
    assert size == 1000 and interval == pytest.approx(1000 / 0.3)
    assert m.heartbeat_interval(3.0) == interval


def test_a_settled_peer_goes_by_its_own_count():
    """Once our table has had time to fill, we count for ourselves: when the swarm shrinks, the sizes
    others declared earlier must not keep everyone's interval long (borrowed sizes would sustain each
    other forever)."""
    m = hearing([1000] * 5)
    interval, size = m.pace(uptime=10_000.0)
    assert size == 6 and interval == pytest.approx(6 / 0.3)
    assert m.heartbeat_interval() == interval  # no uptime given: a settled peer


def test_a_lying_minority_cannot_move_the_borrowed_size():
    m = hearing([1 << 20] * 3 + [100] * 5)
    assert m.pace(uptime=1.0)[1] == 100


def test_a_peer_that_heard_nobody_declares_no_size():
    m = Membership("self", MembershipConfig(status_budget=0.3))
    interval, size = m.pace(uptime=0.0)
    assert size == 0 and interval == pytest.approx(1 / 0.3)


def test_a_neighbours_sample_replaces_only_addresses_that_failed():
    """Peer exchange names a peer with the addresses the namer holds for it. They never override ours
    while ours may work (a neighbour could name bogus ones), but once our dial failed they replace them:
    a peer behind NAT is reachable only by the relay circuit address it took after we first heard of it."""
    m = Membership("self", MembershipConfig())
    m.learn_addrs("natted", ("/ip4/10.0.0.5/tcp/1",))
    m.learn_addrs("natted", ("/ip4/6.6.6.6/tcp/1",))
    assert m.peers["natted"].addrs == ("/ip4/10.0.0.5/tcp/1",)
    m.on_dial_failed(0.0, "natted")
    circuit = ("/ip4/1.2.3.4/tcp/1/p2p/relay/p2p-circuit/p2p/natted",)
    m.learn_addrs("natted", circuit)
    assert m.peers["natted"].addrs == circuit
    m.on_connected("natted", ())
    m.learn_addrs("natted", ("/ip4/6.6.6.6/tcp/1",))
    assert m.peers["natted"].addrs == circuit, "a link proves them: no longer replaced"


def test_peer_exchange_names_our_linked_relays_and_our_other_links_only_without_any():
    """A peer named is dialled by whoever hears it: naming task members would put them at their
    connection limit with relays' links, where the trainer that needs a worker's batch cannot reach it."""
    from gossip.messages import StatusHeartbeat

    def beat(roles):
        return StatusHeartbeat(seq=1, sent_at=0.0, interval=2.0, roles=roles, agent="x", listen_addrs=("/mem/x",),
                               tasks=(), versions={}, known_peers=(), peers=0)

    m = Membership("self", MembershipConfig(exchange_size=8))
    for peer, roles in (("r1", ("relay",)), ("r2", ("relay",)), ("w1", ("worker",)), ("t1", ("trainer",))):
        m.on_connected(peer, ())
        m.on_heartbeat(0.0, peer, beat(roles))
    m.on_heartbeat(0.0, "far", beat(("relay",)))  # alive, but not linked: never named
    assert {p.peer_id for p in m.exchange_sample(Rng(1))} == {"r1", "r2"}
    m.on_disconnected("r1")
    m.on_disconnected("r2")
    assert {p.peer_id for p in m.exchange_sample(Rng(1))} == {"w1", "t1"}, "a swarm of task members only"
