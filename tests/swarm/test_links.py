"""Liveness judged on our links (swarm/links.py): a neighbour that stops is gone in seconds whatever
heartbeat interval the swarm's size (or a flood of fake signers) stretched it to, and a newcomer knows
its neighbours one round trip after connecting."""

from gossip.envelope import seal
from gossip.identity import Identity
from swarm import protocols
from swarm.core import CoreConfig, PeerCore
from swarm.io import PeerConnected, RequestReceived, Respond, ResponseReceived, SendRequest, Started, Tick
from swarm.links import LinkConfig, Links
from swarm.membership import MembershipConfig
from swarm.stall import StallWatch
from tests.swarm.harness import MemoryNet
from tests.swarm.test_core import T0

SLOW = MembershipConfig(status_budget=0.01)  # 3 peers: heartbeats every 300 s, as at 3,000 peers by default


def cores(n: int, membership: MembershipConfig = SLOW, links: LinkConfig | None = None,
          roles: tuple[str, ...] = ("worker",)) -> list[PeerCore]:
    """Workers: they gossip heartbeats, as these tests need (a relay does not, test_relays.py)."""
    cfg = CoreConfig(roles=roles, membership=membership, links=links or LinkConfig())
    return [PeerCore(Identity(bytes([i + 1]) * 32), cfg, seed=i) for i in range(n)]


def star(n: int, **kw) -> tuple[MemoryNet, list[str]]:
    net = MemoryNet(cores(n, **kw), T0)
    ids = sorted(net.cores)
    net.start()
    for p in ids[1:]:
        net.connect(ids[0], p)
    return net, ids


def pings(net: MemoryNet) -> list[tuple[str, str]]:
    """Record every ping sent from now on, as (from, to)."""
    sent: list[tuple[str, str]] = []
    carry = net._carry_out

    def carry_out(peer, inp, effect):
        if isinstance(effect, SendRequest) and effect.protocol == protocols.PING:
            sent.append((peer, effect.peer))
        carry(peer, inp, effect)
    net._carry_out = carry_out
    return sent


def test_a_frozen_neighbour_is_gone_within_the_link_deadline_however_long_the_heartbeat_interval():
    net, ids = star(3)
    net.run_for(30)
    hub = net.cores[ids[0]]
    assert hub.membership.heartbeat_interval() >= 300 and set(hub.snapshot(net.now)["alive"]) == set(ids[1:])
    net.freeze(ids[2])  # SIGSTOP: its link stays open, it says nothing and answers nothing
    frozen_at = net.now
    net.run_for(20)
    gone = {p: f for p, f in net.events_named("peer-gone") if f["peer"] == ids[2]}
    assert set(gone) == set(net.cores) - {ids[2]}, "both of its neighbours (they found each other too)"
    assert all(f["link"] is True for f in gone.values())
    assert hub.snapshot(net.now)["alive"] == [ids[1]]
    assert {p["peer_id"]: p["state"] for p in hub.snapshot(net.now)["peers"]}[ids[2]] == "gone"
    assert net.now - frozen_at >= 10
    net.thaw(ids[2])
    net.connect(ids[0], ids[2])  # it dials back (maintain); the ping on connecting says it is alive at once
    assert set(hub.snapshot(net.now)["alive"]) == set(ids[1:])


def test_the_frozen_neighbour_is_gone_between_10_and_12_seconds_after_it_last_spoke():
    net, ids = star(2)
    net.run_for(30)
    net.freeze(ids[1])
    last_heard = net.cores[ids[0]].links.heard[ids[1]]
    while not net.events_named("peer-gone"):
        net.run_for(0.5)
    assert 10 <= net.now - last_heard <= 12.5


def test_a_newcomer_knows_its_neighbour_and_is_known_one_round_trip_after_connecting():
    net, ids = star(3, roles=("relay",))
    net.run_for(30)  # relays gossip no heartbeat: what a newcomer knows of them, it learns on the link
    newcomer = PeerCore(Identity(bytes([9]) * 32), CoreConfig(membership=SLOW), seed=9)
    net.cores[newcomer.peer_id] = newcomer
    net.subs[newcomer.peer_id], net.gossip_seen[newcomer.peer_id] = set(), set()
    net.blobs[newcomer.peer_id], net.shards[newcomer.peer_id] = {}, {}
    net.start(newcomer.peer_id)
    net.connect(newcomer.peer_id, ids[0])  # the harness delivers the pings and answers at once
    mine = {p["peer_id"]: p for p in newcomer.snapshot(net.now)["peers"]}
    assert mine[ids[0]]["state"] == "alive" and mine[ids[0]]["roles"] == ["relay"]
    assert newcomer.peer_id in net.cores[ids[0]].snapshot(net.now)["alive"]


def test_a_busy_link_is_never_pinged():
    # (one link is all either wants: a peer short of peers to dial also pings to swap peer samples)
    net, ids = star(2, membership=MembershipConfig(target_connections=1))
    sent = pings(net)
    net.run_for(120)  # heartbeats every 1.8-2 s each way: the link is never silent for 5 s
    assert sent == []


def test_a_quiet_link_is_pinged_once_per_silence():
    net, ids = star(2)
    sent = pings(net)
    net.run_for(60)
    # each side pings when the link has been silent 5 s; the other's ping is itself traffic, so the
    # two sides take turns rather than both asking every time
    assert 6 <= len(sent) <= 14 and not net.events_named("peer-gone")


def test_a_ping_holding_another_peers_heartbeat_is_refused_and_charged():
    a, b, c = cores(3)
    a.handle(T0, Started(("/mem/a",)))
    a.handle(T0, PeerConnected(b.peer_id))
    forged = seal(c.identity, c._heartbeat(T0, 300.0, 3)).wire
    out = a.handle(T0 + 1, RequestReceived(b.peer_id, protocols.PING, 7, forged))
    assert isinstance(out[0], Respond) and out[0].request_id == 7
    assert a.ledger.get(b.peer_id).rejected == {"unauthorized": 1}
    assert c.peer_id not in a.membership.peers


def test_our_heartbeat_goes_over_a_link_once_and_an_empty_ping_gets_an_empty_answer():
    """A signature, and the other side's opening of it, is what a ping costs: each side's heartbeat goes
    over a link once, and a neighbour that keeps sending its own gets empty answers."""
    a, b = cores(2)
    a.handle(T0, Started(("/mem/a",)))
    a.handle(T0, PeerConnected(b.peer_id))  # a's own first ping (with its heartbeat) is not answered yet
    beats = [seal(b.identity, b._heartbeat(T0 + t, 300.0, 2)).wire for t in (1, 2)]
    assert a.handle(T0 + 0.5, RequestReceived(b.peer_id, protocols.PING, 1, b""))[0] == Respond(1, b"")
    first = a.handle(T0 + 1, RequestReceived(b.peer_id, protocols.PING, 2, beats[0]))[0]
    again = a.handle(T0 + 2, RequestReceived(b.peer_id, protocols.PING, 3, beats[1]))[0]
    assert first == Respond(2, b"") and again == Respond(3, b""), "a's heartbeat went in its own ping"
    assert a.membership.peers[b.peer_id].last_seq == b._heartbeat_seq, "each of b's heartbeats was taken"
    c, d = cores(2)
    c.handle(T0, Started(("/mem/c",)))
    c.links.opened(T0, d.peer_id)  # linked, but its PeerConnected (and so its ping) not handled yet
    beat = seal(d.identity, d._heartbeat(T0, 300.0, 2)).wire
    assert c.handle(T0 + 1, RequestReceived(d.peer_id, protocols.PING, 1, beat))[0].data, "c's goes in its answer"
    assert c.links.introduce(d.peer_id, T0 + 1) is False


def test_a_links_first_ping_carries_our_heartbeat_and_later_ones_nothing():
    a, b = cores(2)
    a.handle(T0, Started(("/mem/a",)))
    [first] = [e for e in a.handle(T0, PeerConnected(b.peer_id)) if isinstance(e, SendRequest)]
    later = a.pings.ping(T0 + 5, b.peer_id)[0]
    assert first.protocol == later.protocol == protocols.PING and first.data and later.data == b""


def test_a_silence_we_slept_through_counts_from_when_we_woke():
    stall = StallWatch(after=5.0, excuse_after=30.0)
    links = Links(LinkConfig(), 10.0, stall)
    links.opened(100.0, "n")
    stall.observe(160.0, 101.0)  # we slept 59 s
    assert links.due(160.0) == ([], [])
    assert links.due(164.9) == ([], [])
    assert links.due(165.0) == (["n"], [])  # ping_after: 5 s
    links.pinged(165.0, "n")
    assert links.due(169.9) == ([], [])
    assert links.due(170.0) == ([], ["n"])


def test_nobody_is_gone_without_being_asked_and_given_time_to_answer():
    """Checked once a second, a link may be found silent past `dead_after` before it was ever pinged (a
    short `gone_after`, a late tick): it is pinged first, and dead only `dead_after - ping_after` later."""
    links = Links(LinkConfig(), 3.0)  # ping_after 1.5 s
    links.opened(100.0, "n")
    assert links.due(103.4) == (["n"], [])
    links.pinged(103.4, "n")
    assert links.due(104.8) == ([], [])
    assert links.due(104.9) == ([], ["n"])


def test_a_neighbour_that_does_not_speak_ping_is_left_to_its_heartbeats_one_that_never_answers_is_not():
    """A plain libp2p peer refuses /swarm/ping/1: that shows it running, and its link is not pinged again
    (each refusal costs both sides a failed stream); a timeout shows nothing, and leaves the question
    open: the link is dead once silent long enough, without a second ping first."""
    a, b, c = cores(3)
    a.handle(T0, Started(("/mem/a",)))
    [ping] = [e for e in a.handle(T0, PeerConnected(b.peer_id)) if isinstance(e, SendRequest)]
    a.handle(T0, PeerConnected(c.peer_id))
    a.handle(T0 + 1, ResponseReceived(b.peer_id, protocols.PING, ping.request_id, error="open_failed: /swarm/ping/1"))
    assert b.peer_id not in a.links.heard
    ping = a.pings.ping(T0 + 9, c.peer_id)[0]
    a.handle(T0 + 14, ResponseReceived(c.peer_id, protocols.PING, ping.request_id, error="timeout: after 5s"))
    assert a.links.heard[c.peer_id] == T0 and a.links.asking[c.peer_id] == T0  # since connecting, unanswered
    # (a took the 5 s gap before T0 + 14 for a stall of its own: the silence counts from then)
    assert a.links.due(T0 + 20) == ([], []) and a.links.due(T0 + 25) == ([], [c.peer_id]), \
        "b is never pinged, nor judged by its link"


def _pings_between_two_ends(checked_every: float, phase: float, until: float) -> tuple[int, list[str]]:
    """Two ends of one quiet link, each checking it every `checked_every` (`phase` apart); a ping is
    answered at once, so each end hears the other when a ping or its answer arrives."""
    ends = {name: Links(LinkConfig(), 10.0, checked_every=checked_every) for name in ("a", "b")}
    ends["a"].opened(0.0, "b")
    ends["b"].opened(0.0, "a")
    checks = sorted([(t * checked_every, "a") for t in range(1, int(until / checked_every))]
                    + [(t * checked_every + phase, "b") for t in range(1, int(until / checked_every))])
    pings, dead = 0, []
    for now, name in checks:
        other = "b" if name == "a" else "a"
        ping, gone = ends[name].due(now)
        dead += gone
        for peer in ping:
            pings += 1
            ends[name].pinged(now, peer)
            ends[other].heard_from(now, name)  # the ping arrives
            ends[name].heard_from(now, peer)  # and its answer
            ends[name].ping_ended(peer)
    return pings, dead


def test_a_link_checked_every_30_s_costs_at_most_one_ping_a_period_not_one_from_each_end():
    """A core that sweeps every 30 s (`scale`) found a quiet link silent past 5 s at every check, from
    both ends: two pings a period. Pinged once silent for a whole period, one end's ping shows both
    ends alive to each other, and the other end does not ask."""
    for phase in (7.0, 13.0, 29.0):
        pings, dead = _pings_between_two_ends(30.0, phase, 3000.0)
        assert not dead
        assert pings <= 100, (phase, pings)  # at most one per 30 s period for the link, not one per end
    pings, dead = _pings_between_two_ends(1.0, 0.5, 300.0)  # a node's default sweep: every 5 s, as before
    assert not dead and 50 <= pings <= 62


def test_a_link_checked_every_30_s_is_pinged_after_a_silent_period_and_dead_one_check_later():
    links = Links(LinkConfig(), 10.0, checked_every=30.0)
    links.opened(100.0, "n")
    assert links.due(129.0) == ([], [])  # quiet for less than a check period: not asked yet
    assert links.due(130.0) == (["n"], [])
    links.pinged(130.0, "n")
    assert links.due(160.0) == ([], ["n"])  # the ping had a whole period to come back


def test_what_the_transport_heard_on_a_link_counts_as_traffic_and_spares_its_ping():
    """A neighbour whose gossip reaches us second (copies of messages we had, IHAVEs) is handed to the
    core by nobody but its transport (`Tick.heard`): such a link is busy, not silent. What was heard
    before the last traffic, or from a peer we hold no link to, changes nothing."""
    links = Links(LinkConfig(), 10.0, checked_every=30.0)
    links.opened(100.0, "n")
    links.heard_by_transport((("n", 125.0), ("stranger", 126.0)))
    assert links.due(130.0) == ([], []) and "stranger" not in links.heard
    links.heard_by_transport((("n", 120.0),))  # older than what we had: kept as it was
    assert links.heard["n"] == 125.0
    assert links.due(155.0) == (["n"], [])  # silent 30 s since the transport last heard it


def test_a_core_takes_what_its_transport_heard_with_a_tick():
    net, ids = star(2)
    hub = net.cores[ids[0]]
    later = net.now + 4.0
    hub.handle(later, Tick(((ids[1], later - 0.5),)))
    assert hub.links.heard[ids[1]] == later - 0.5


def test_a_newcomers_link_heartbeat_declares_no_size_and_a_settled_peers_its_estimate_now():
    """Newcomers borrow the median of the swarm sizes others declare (Membership.pace). In a flash crowd
    most links are to newcomers, whose count of the few peers heard so far pulled that median down (in
    `scale`: first heartbeats declared 164 peers, not about 400), so a link's heartbeat declares 0 before
    our first gossiped one, and our estimate as it is now after it (not the smaller one we gossiped)."""
    from gossip.envelope import open_envelope
    from swarm.io import Publish, Tick

    a, b, c, d, e = cores(5)
    a.handle(T0, Started(("/mem/a",)))
    a.membership.on_heartbeat(T0, c.peer_id, c._heartbeat(T0, 300.0, 3))  # a has heard of one peer

    def link_beat(effects):
        [ping] = [x for x in effects if isinstance(x, SendRequest) and x.protocol == protocols.PING]
        return open_envelope(ping.data).message

    first = link_beat(a.handle(T0 + 1, PeerConnected(b.peer_id)))
    assert first.peers == 0 and a.membership.pace(1.0)[1] > 0  # an estimate, but not yet one we gossiped
    assert any(isinstance(x, Publish) for x in a.handle(T0 + 1, Tick()))  # our first gossiped heartbeat
    gossiped = a._pace
    a.membership.on_heartbeat(T0 + 2, d.peer_id, d._heartbeat(T0 + 2, 300.0, 4))  # then we hear one more
    later = link_beat(a.handle(T0 + 3, PeerConnected(e.peer_id)))
    assert later.interval == gossiped[0] and later.peers == a.membership.pace(3.0)[1] > gossiped[1]


def test_links_opened_in_a_burst_share_one_signed_heartbeat_until_it_is_old_or_says_something_stale():
    """Signing a heartbeat per link (and opening each at the other end) was a tenth of a big simulated
    run: links opened within our heartbeat interval (at most 10 s) get the same signed one, unless what it
    says of us changed (versions held, tasks, addresses) or a newer heartbeat was signed since. A shuffle's
    is always signed now (its point is a sample of our links as they are now)."""
    from swarm.linkbeat import REUSE_FOR

    def beat(core, at, peer):
        [ping] = [x for x in core.handle(at, PeerConnected(peer.peer_id)) if isinstance(x, SendRequest)]
        return ping.data

    a, *others = cores(7)  # SLOW: a's interval is 300 s, so the window is REUSE_FOR
    a.handle(T0, Started(("/mem/a",)))
    b, c, d, e, f, g = others
    first = beat(a, T0 + 1, b)
    assert beat(a, T0 + 1.5, c) == first, "a burst of links shares one signature"
    later = beat(a, T0 + 1 + REUSE_FOR, d)
    assert later != first, "at most REUSE_FOR old"
    a.versions["t" * 16] = 3
    changed = beat(a, T0 + 2 + REUSE_FOR, e)
    assert changed != later, "a beat that no longer says what we hold is signed anew"
    shuffle = a._signed_beat(T0 + 2.5 + REUSE_FOR, fresh=True)
    assert shuffle not in (changed, later)
    assert beat(a, T0 + 3 + REUSE_FOR, f) == shuffle, "...and serves the links after it"
    assert (a.link_beat.signed, a.link_beat.reused) == (4, 2)
    fast, h = cores(2, membership=MembershipConfig())  # a small swarm's 2-s interval bounds the window
    fast.handle(T0, Started(("/mem/fast",)))
    assert beat(fast, T0 + 1, h) != beat(fast, T0 + 3.5, g)
