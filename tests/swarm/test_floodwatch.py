"""A link that keeps introducing strangers' heartbeats nobody vouches for is cut (swarm/floodwatch.py):
issue 27's attack 1 left the flooder linked to every peer that would take it, each judging 18 fakes a
second for as long as it stayed. Honest neighbours introduce the swarm's peers once each, and bring
other traffic; neither is cut."""

from __future__ import annotations

from gossip import errors, topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat
from swarm.core import CoreConfig, PeerCore
from swarm.floodwatch import FloodConfig, FloodWatch
from swarm.io import Disconnect, MessageReceived, PeerConnected, Started, Tick
from swarm.membership import MembershipConfig
from tests.samples import T0

LINKS = ("flooder", "honest1", "honest2", "honest3")


def strangers(watch: FloodWatch, peer: str, count: int, prefix: str) -> None:
    for i in range(count):
        watch.kept_from(0.0, peer, f"{prefix}{i:05d}")


def test_a_link_introducing_a_stranger_per_heartbeat_is_judged_flooding_after_a_window():
    watch = FloodWatch(FloodConfig())
    assert watch.judge(T0, LINKS) == []  # the first window starts
    strangers(watch, "flooder", 180, "fake")  # 18 a second for 10 s
    for peer in LINKS[1:]:
        strangers(watch, peer, 3, peer)
        for _ in range(20):
            watch.accepted_from(peer)
    assert watch.judge(T0 + 9.0, LINKS) == []  # not a whole window yet: nothing judged, nothing reset
    assert watch.judge(T0 + 10.0, LINKS) == ["flooder"]
    assert watch.last_fresh["flooder"] == 180
    assert watch.judge(T0 + 20.0, LINKS) == []  # a new window: counts started again


def test_a_stranger_kept_again_is_not_counted_again():
    """A heartbeat past the newcomer budget makes no entry, so its honest signer is a stranger to the table
    at every heartbeat: the watch remembers it."""
    watch = FloodWatch(FloodConfig())
    watch.judge(T0, LINKS)
    for _ in range(100):
        strangers(watch, "honest1", 40, "member")  # 40 peers' heartbeats, again and again
    watch.judge(T0 + 10.0, LINKS)
    assert watch.last_fresh["honest1"] == 40


def test_an_honest_hub_introducing_a_small_swarm_at_once_is_not_cut():
    """At a join, most strangers come through the best-linked neighbour: a few dozen, once each."""
    watch = FloodWatch(FloodConfig())
    watch.judge(T0, LINKS)
    strangers(watch, "honest1", 60, "peer")
    assert watch.judge(T0 + 10.0, LINKS) == []


def test_a_link_that_brings_much_else_or_like_the_others_is_not_cut():
    cfg = FloodConfig()
    watch = FloodWatch(cfg)
    watch.judge(T0, LINKS)
    strangers(watch, "honest1", 200, "worker")  # a big task's workers, relayed to us before we hold evidence
    for _ in range(30):  # ... by a link that brings plenty we accept
        watch.accepted_from("honest1")
    for peer in ("honest2", "honest3"):  # ... or like our other links do
        strangers(watch, peer, 100, peer)
    assert watch.judge(T0 + 10.0, LINKS) == []
    strangers(watch, "honest2", 200, "again")
    for peer in ("honest1", "honest3", "flooder"):
        strangers(watch, peer, 30, "x" + peer)
    assert watch.judge(T0 + 20.0, LINKS) == []  # 200 against a median of 30: not ten times


def test_refusals_expire_and_are_bounded():
    watch = FloodWatch(FloodConfig(refuse_for=600.0, max_refused=2))
    watch.refuse("a", T0)
    assert watch.refusing("a", T0 + 599.0) and not watch.refusing("a", T0 + 600.0)
    for peer in ("b", "c", "d"):
        watch.refuse(peer, T0)
    assert list(watch.refused) == ["c", "d"] and watch.links_cut == 4


def fake_heartbeat(now: float, n: int) -> bytes:
    beat = StatusHeartbeat(seq=1, sent_at=now, interval=3599.5, roles=("worker",), agent="fake", listen_addrs=(),
                           tasks=(), versions={}, known_peers=(), peers=1000)
    return seal(Identity(n.to_bytes(4, "big") * 8), beat).wire


def test_a_core_cuts_a_flooding_neighbour_penalises_it_and_refuses_it_back():
    core = PeerCore(Identity(b"\x05" * 32), CoreConfig(roles=("relay",)), seed=5)
    flooder = Identity(b"\x06" * 32).peer_id
    core.handle(T0, Started(("/mem/us",)))
    core.handle(T0, PeerConnected(flooder, ("/mem/flooder",)))
    core.handle(T0 + 1.0, Tick())  # the first sweep starts the first window
    cut, n, now = [], 0, T0 + 1.0
    while not cut and now < T0 + 40.0:
        for _ in range(18):
            n += 1
            verdict = core.handle(now, MessageReceived(topics.STATUS, fake_heartbeat(now, n), flooder))[0]
            assert verdict.reason == errors.KEPT  # taken, relayed to nobody
        now += 1.0
        cut = [e for e in core.handle(now, Tick()) if isinstance(e, Disconnect) and e.peer == flooder]
    assert cut and cut[0].reason == "flooding" and now <= T0 + 12.0, (now - T0, n)
    assert core.ledger.get(flooder).rejected[errors.FLOODING] == 1
    assert core.snapshot(now)["flooding"] == {"links_cut": 1, "refusing": 1}
    assert core.membership.peers[flooder].next_dial >= now + 600.0  # not dialled again soon
    back = core.handle(now + 5.0, PeerConnected(flooder, ("/mem/flooder",)))
    assert back == [Disconnect(flooder, "flooded us before")]



def test_with_sweeps_far_apart_a_flooding_link_is_cut_once_it_has_shown_itself_not_at_the_next_sweep():
    """scale-10k sweeps every 30 s: judged only then, a flooder kept each link up to 40 s, 18 fakes a second."""
    core = PeerCore(Identity(b"\x05" * 32), CoreConfig(roles=("relay",), sweep_interval=30.0), seed=5)
    flooder = Identity(b"\x06" * 32).peer_id
    core.handle(T0, Started(("/mem/us",)))
    core.handle(T0 + 30.0, Tick())  # the first sweep starts the first window; the next is at T0 + 60
    core.handle(T0 + 45.0, PeerConnected(flooder, ("/mem/flooder",)))
    cut, n, now = [], 0, T0 + 45.0
    while not cut and now < T0 + 60.0:
        n += 1
        effects = core.handle(now, MessageReceived(topics.STATUS, fake_heartbeat(now, n), flooder))
        assert effects[0].reason == errors.KEPT  # the verdict first, as ever
        cut = [e for e in effects if isinstance(e, Disconnect) and e.peer == flooder]
        now += 1 / 18
    assert cut and cut[0].reason == "flooding"
    assert n == 64 and now < T0 + 49.0, (n, now - T0)  # its 64th stranger, 3.6 s after the link came up
    assert core.ledger.get(flooder).rejected[errors.FLOODING] == 1
    assert core.membership.peers[flooder].next_dial >= now + 590.0

def test_a_known_peer_kept_past_the_newcomer_budget_is_no_stranger_to_its_forwarder():
    """Past the budget a heartbeat makes no entry (NoRoom), but a signer that has one (a peer a neighbour
    named to us, or one gone since) is not a stranger: only signers without an entry count against a link."""
    membership = MembershipConfig(newcomers=1, newcomers_per_net=1)
    core = PeerCore(Identity(b"\x07" * 32), CoreConfig(roles=("relay",), membership=membership), seed=7)
    forwarder = Identity(b"\x08" * 32).peer_id
    core.handle(T0, Started(("/mem/us",)))
    core.handle(T0, PeerConnected(forwarder, ("/mem/forwarder",)))
    known = Identity((2).to_bytes(4, "big") * 8).peer_id
    core.membership.learn_addrs(known, ("/mem/known",))  # named by a neighbour: an entry, not alive
    assert core.handle(T0 + 1.0, MessageReceived(topics.STATUS, fake_heartbeat(T0 + 1.0, 1), forwarder))[0].accepted \
        is False  # the first newcomer takes the budget (kept, not relayed)
    assert core.floods.fresh[forwarder] == 1
    verdict = core.handle(T0 + 2.0, MessageReceived(topics.STATUS, fake_heartbeat(T0 + 2.0, 2), forwarder))[0]
    assert verdict.reason == errors.KEPT and known not in core.membership.counted_peers()  # past the budget
    assert core.floods.fresh[forwarder] == 1, "a peer with an entry counted as a stranger"
    verdict = core.handle(T0 + 3.0, MessageReceived(topics.STATUS, fake_heartbeat(T0 + 3.0, 3), forwarder))[0]
    assert verdict.reason == errors.KEPT and core.floods.fresh[forwarder] == 2  # a fresh key past it does count
