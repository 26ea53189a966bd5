"""Budgets by source network (node/p2p/subnet.py), without sockets: fresh peer ids on one network share
that network's request slots and relay reservations, a peer over its own share is told apart from a
busy network, and the network of an address is what the docs say it is."""

from __future__ import annotations

import pytest

from node.p2p.budget import RequestSlots
from node.p2p.relaygate import RelayGate, RelayLimits
from node.p2p.subnet import subnet_of


@pytest.mark.parametrize("ip, network", [
    ("203.0.113.77", "203.0.113.0/24"),
    ("127.0.1.9", "127.0.1.0/24"),
    ("::ffff:198.51.100.4", "198.51.100.0/24"),  # IPv4-mapped: the IPv4 network
    ("2001:db8:5:6::1", "2001:db8:5::/48"),
    ("fe80::1%eth0", "fe80::/48"),
    ("not-an-address", "not-an-address"),  # its own network
])
def test_an_address_is_charged_to_its_network(ip, network):
    assert subnet_of(ip) == network


def test_fresh_ids_on_one_network_leave_the_rest_of_the_slots_to_others():
    slots = RequestSlots(total=8, per_peer=2, per_subnet=6)
    taken = [(f"sybil-{i}", "10.0.0.0/24") for i in range(5) for _ in range(2)]
    refusals = [slots.try_acquire(peer, net) for peer, net in taken]
    assert refusals.count(None) == 6 and set(refusals) == {None, "subnet_busy"}
    assert slots.try_acquire("honest", "10.9.9.0/24") is None
    assert slots.try_acquire("honest", "10.9.9.0/24") is None
    assert slots.try_acquire("honest", "10.9.9.0/24") == "peer_busy"  # its own share, its own doing
    assert slots.try_acquire("other", "10.8.8.0/24") == "busy"  # all 8 in use
    slots.release("sybil-0", "10.0.0.0/24")
    assert slots.try_acquire("other", "10.8.8.0/24") is None
    assert slots.in_use() == 8


def test_release_frees_both_shares():
    slots = RequestSlots(total=4, per_peer=2, per_subnet=2)
    assert slots.try_acquire("a", "n") is None and slots.try_acquire("b", "n") is None
    assert slots.try_acquire("c", "n") == "subnet_busy"
    slots.release("a", "n")
    assert slots.try_acquire("c", "n") is None


def test_shares_must_nest():
    with pytest.raises(ValueError):
        RequestSlots(total=8, per_peer=4, per_subnet=3)
    with pytest.raises(ValueError):
        RequestSlots(total=8, per_peer=2, per_subnet=9)


def test_relay_reservations_from_many_addresses_of_one_network_leave_room():
    gate = RelayGate(RelayLimits(max_reservations=8, max_reservations_per_ip=2, max_reservations_per_subnet=4,
                                 min_reserve_interval=0.0))
    answers = []
    for i in range(6):  # six fresh ids on six addresses of one /24
        answers.append(gate.admit_reservation(f"sybil-{i}", f"198.51.100.{i + 1}", now=0.0))
        if answers[-1] is None:
            gate.reserved(f"sybil-{i}", f"198.51.100.{i + 1}", now=0.0)
    assert answers == [None] * 4 + ["reservations_per_subnet"] * 2
    assert gate.admit_reservation("natted", "203.0.113.5", now=1.0) is None  # another network still gets one
    assert gate.admit_reservation("sybil-0", "198.51.100.1", now=1.0) is None  # a refresh is not a new slot
