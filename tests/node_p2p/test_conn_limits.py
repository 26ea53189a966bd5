"""The inbound-connection rules (node/p2p/conngate.py) without sockets, and one check on a live host.

The rules are where the lockout was won or lost, so each is pinned here: silent handshakes are evicted
before talking ones, young talking ones are never evicted for a newcomer, a flood from one address
cannot evict another address's handshakes while that address is under its own bound, reserved slots
are only for known peers, and trimming never picks a protected connection. A flood from many addresses
of one network is held to that network's bound, so a dialer from another network still gets in.
"""

from __future__ import annotations

import pytest
import trio

from node.p2p import ConnLimits
from node.p2p.conngate import CONN_FLOOD, Conn, ConnGate, pick_trim

from .helpers import open_hosts, wait_until

LIMITS = ConnLimits(handshake_timeout=5.0, grace=1.0, max_pending=6, max_pending_per_subnet=4, max_pending_per_ip=3,
                    max_conns=10, max_conns_per_subnet=6,
                    reserved_known=4, max_conns_per_ip=5, max_conns_per_peer=2)


def test_a_flood_from_one_address_evicts_its_own_oldest_silent_socket():
    gate = ConnGate(LIMITS)
    for i in range(3):
        assert gate.admit(("a", i), "a", now=float(i)).admitted
    gate.heard(("a", 0))  # the oldest one spoke: an honest dialer mid-handshake
    result = gate.admit(("a", 3), "a", now=3.0)
    assert result.admitted and result.evict == (("a", 1),) and result.reason == "pending_per_ip"
    assert ("a", 0) in gate.pending and ("a", 3) in gate.pending


def test_young_talking_handshakes_are_not_evicted_for_a_newcomer():
    gate = ConnGate(LIMITS)
    for i in range(3):
        gate.admit(("a", i), "a", now=10.0)
        gate.heard(("a", i))
    refused = gate.admit(("a", 9), "a", now=10.5)  # all talking, all younger than grace
    assert not refused.admitted and refused.reason == "pending_per_ip" and ("a", 9) not in gate.pending
    later = gate.admit(("a", 9), "a", now=11.5)  # past grace: the oldest talking one makes room
    assert later.admitted and later.evict == (("a", 0),)


def test_total_bound_evicts_from_the_busiest_address():
    gate = ConnGate(LIMITS)
    for i in range(3):
        gate.admit(("flood", i), "flood", now=float(i))
    for i in range(2):
        gate.admit(("b", i), "b", now=float(i))
    gate.admit(("c", 0), "c", now=0.0)
    result = gate.admit(("d", 0), "d", now=5.0)
    assert result.admitted and result.evict == (("flood", 0),) and result.reason == "pending_full"
    assert all(("b", i) in gate.pending for i in range(2))


def test_many_addresses_of_one_network_leave_room_for_another_network():
    gate = ConnGate(LIMITS)
    for i in range(4):  # four addresses of 10.0.0.0/24, one talking handshake each
        assert gate.admit(("flood", i), f"10.0.0.{i}", now=10.0).admitted
        gate.heard(("flood", i))
    refused = gate.admit(("flood", 4), "10.0.0.4", now=10.2)  # a fifth address, same network: held
    assert not refused.admitted and refused.reason == "pending_per_subnet"
    honest = gate.admit(("honest", 0), "10.0.1.1", now=10.3)  # another network: room, nothing evicted
    assert honest.admitted and honest.evict == ()
    later = gate.admit(("flood", 5), "10.0.0.5", now=11.5)  # past grace: the network's own oldest goes
    assert later.admitted and later.evict == (("flood", 0),) and later.reason == "pending_per_subnet"
    assert ("honest", 0) in gate.pending


def test_total_bound_evicts_from_the_busiest_network_not_the_busiest_address():
    gate = ConnGate(LIMITS)
    for i in range(3):  # one pending each from three addresses of one network
        gate.admit(("spread", i), f"192.0.2.{i + 1}", now=float(i))
    for i in range(2):  # two from one address of another network
        gate.admit(("pair", i), "198.51.100.7", now=float(i))
    gate.admit(("one", 0), "203.0.113.9", now=0.0)
    result = gate.admit(("new", 0), "2001:db8::1", now=5.0)
    assert result.admitted and result.evict == (("spread", 0),) and result.reason == "pending_full"


def test_deadline_and_done():
    gate = ConnGate(LIMITS)
    gate.admit("k", "a", now=2.0)
    assert gate.deadline("k") == 7.0
    assert gate.done("k") and not gate.done("k")
    assert gate.deadline("k") == float("inf")


def test_reserved_slots_are_for_known_peers_only():
    gate = ConnGate(LIMITS)
    check = gate.check_established
    assert check(known=False, total=6, from_ip=1, of_peer=1) is None
    assert check(known=False, total=7, from_ip=1, of_peer=1) == "full"  # 10 - 4 reserved
    assert check(known=True, total=10, from_ip=9, of_peer=1) is None  # known: per-address bound ignored
    assert check(known=True, total=11, from_ip=1, of_peer=1) == "full"  # the caller trims for it
    assert check(known=False, total=3, from_ip=6, of_peer=1) == "ip_full"
    assert check(known=False, total=3, from_ip=2, from_subnet=7, of_peer=1) == "subnet_full"  # many addresses
    assert check(known=True, total=3, from_ip=2, from_subnet=7, of_peer=1) is None  # known: not counted
    assert check(known=True, total=3, from_ip=1, of_peer=3) == CONN_FLOOD


def test_trimming_keeps_protected_peers_and_picks_the_newest_other():
    conns = [Conn("mesh", "p1", 1.0, True), Conn("old", "p2", 2.0, False), Conn("new", "p3", 9.0, False),
             Conn("task", "p4", 10.0, True)]
    assert pick_trim(conns).key == "new"
    assert pick_trim([c for c in conns if c.protected]) is None


def test_limits_are_validated():
    with pytest.raises(ValueError):
        ConnLimits(max_pending=4, max_pending_per_ip=5)
    with pytest.raises(ValueError):
        ConnLimits(max_conns=8, reserved_known=8)
    with pytest.raises(ValueError):
        ConnLimits(handshake_timeout=0)


async def test_a_silent_socket_is_closed_at_the_handshake_deadline():
    limits = ConnLimits(handshake_timeout=0.5)
    async with open_hosts(2, "deadline", conn_limits=limits) as (host, other):
        ip, port = host.listen_addrs()[0].split("/")[2], int(host.listen_addrs()[0].split("/")[4])
        sock = await trio.open_tcp_stream(ip, port)
        with trio.fail_after(3):
            assert await sock.receive_some(100) == b""  # closed by the host, never answered
        await sock.aclose()
        assert host.stats.connections_refused["handshake_timeout"] == 1
        await other.connect(host.listen_addrs()[0])  # a real peer still gets in
        assert host.is_known(other.peer_id) is False and other.is_known(host.peer_id) is True


async def test_reserved_slots_and_trimming_on_a_live_host():
    limits = ConnLimits(max_conns=3, reserved_known=1)
    async with open_hosts(1, "full", conn_limits=limits) as (host,), open_hosts(5, "dialer") as dialers:
        known = {dialers[3].peer_id, dialers[4].peer_id}
        host.set_known_peers(lambda: known)
        addr = host.listen_addrs()[0]
        for d in dialers[:3]:  # unknown peers get max_conns - reserved_known = 2 slots
            await d.connect(addr)
            await trio.sleep(0.2)
        await wait_until(lambda: host.stats.connections_refused["full"] == 1, what="third unknown peer refused")
        await wait_until(lambda: dialers[2].peer_id not in host.connected_peers(), what="refused peer dropped")
        await dialers[3].connect(addr)  # known: takes the reserved slot
        await trio.sleep(0.2)
        await dialers[4].connect(addr)  # known, table full: the newest unknown peer is trimmed for it
        await wait_until(lambda: set(host.connected_peers()) == {dialers[0].peer_id, dialers[3].peer_id,
                                                                 dialers[4].peer_id}, what="trim")
        assert host.stats.connections_refused["trimmed"] == 1


async def test_closed_inbound_connections_give_back_the_swarms_slot():
    """py-libp2p 0.8.1's Swarm takes one of its inbound slots (max_connections - min_connections, 250)
    for each accepted socket, and once the handshake succeeds its handler waits for the *Swarm* to stop
    before giving it back: every inbound connection a node ever accepted kept a slot, and a long-lived
    node refused every dialer after its 250th. The slot is cut to 3 here; 8 dial-and-close rounds."""
    async with open_hosts(1, "slots") as (host,), open_hosts(1, "redialer") as (dialer,):
        swarm = host._host.get_network()
        swarm._inbound_limiter = trio.CapacityLimiter(3)
        addr = host.listen_addrs()[0]
        for round_ in range(8):
            with trio.fail_after(10):
                await dialer.connect(addr)
                await wait_until(lambda: dialer.peer_id in host.connected_peers(), what=f"round {round_} connected")
                await dialer.disconnect(host.peer_id)
                await wait_until(lambda: dialer.peer_id not in host.connected_peers(), what=f"round {round_} closed")
                await wait_until(lambda: swarm._inbound_limiter.borrowed_tokens == 0, what=f"round {round_} slot back")
        assert host.stats.connections_refused.get("full", 0) == 0
