"""Relays gossip no heartbeat (CoreConfig.gossips_heartbeat): the status flood carries only the peers a
task may need, and a relay is known to its neighbours by its link, to the rest not at all (issue 27)."""

from gossip import topics
from gossip.identity import Identity
from gossip.release import UPTIME_TOPIC
from swarm.core import CoreConfig, PeerCore
from swarm.membership import MembershipConfig
from tests.samples import T0
from tests.swarm.harness import MemoryNet


def swarm(relays: int, workers: int, release: str = "current", **membership) -> tuple[MemoryNet, list[str], list[str]]:
    """Relays and workers that all know only the first relay (the bootstrap)."""
    def core(i: int, roles: tuple[str, ...]) -> PeerCore:
        cfg = CoreConfig(roles=roles, release=release, membership=MembershipConfig(target_connections=3, **membership))
        return PeerCore(Identity(bytes([i + 1]) * 32), cfg, seed=i)
    cores = [core(i, ("relay",)) for i in range(relays)] + [core(relays + i, ("worker",)) for i in range(workers)]
    net = MemoryNet(cores, T0)
    net.start()
    ids = [c.peer_id for c in cores]
    for p in ids[1:]:
        net.connect(ids[0], p)
    return net, ids[:relays], ids[relays:]


def test_relays_gossip_no_heartbeat_yet_reach_their_targets_and_hear_the_workers():
    net, relays, workers = swarm(8, 2)
    net.run_for(120)
    for r in relays:
        core = net.cores[r]
        assert core.stats.published[topics.STATUS] == 0, "a relay's heartbeat went to the whole swarm"
        snap = core.snapshot(net.now)
        assert len(snap["connected"]) >= 3, "peer exchange on links dials beyond the bootstrap"
        assert set(workers) <= set(snap["alive"]), "the workers' gossiped heartbeats reach every relay"
    for w in workers:
        assert net.cores[w].stats.published[topics.STATUS] > 10


def test_a_relay_is_alive_to_its_neighbours_while_its_link_lives_and_gone_to_them_within_the_link_deadline():
    net, relays, workers = swarm(6, 1, gone_after=6)
    net.run_for(90)  # many times gone_after: only the links vouch for the relays
    neighbours = [p for p in net.cores if relays[3] in net.cores[p].snapshot(net.now)["connected"]]
    assert neighbours
    for p in neighbours:
        info = net.cores[p].membership.peers[relays[3]]
        # last seen: when its link last carried anything, as of the sweep that last looked (not 90 s ago)
        assert info.state == "alive" and net.now - info.last_seen <= net.cores[p].membership.gone_threshold(info)
    assert not [f for _, f in net.events_named("peer-gone")]
    net.stop(relays[3], silent=True)  # SIGSTOP: its links stay, it answers nothing
    stopped_at = net.now
    net.run_for(15)
    gone = {p: f for p, f in net.events_named("peer-gone") if f["peer"] == relays[3]}
    assert set(neighbours) <= set(gone) and all(f["link"] for f in gone.values())
    assert all(net.cores[p].membership.peers[relays[3]].state == "gone" for p in neighbours)
    assert net.now - stopped_at <= 15


def test_a_relay_on_a_newer_release_sends_nothing_beside_the_heartbeat_it_does_not_gossip():
    """What a release sends beside its heartbeats (gossip/release.py, extras) would reach peers that never
    heard the relay announce it, who take an unknown kind from a peer of their own version as garbage."""
    net, relays, _ = swarm(3, 1, release="next")
    net.run_for(30)
    for r in relays:
        assert net.cores[r].stats.published[UPTIME_TOPIC] == 0
        assert UPTIME_TOPIC in net.subs[r]
