"""Peers behind NATs on 127.0.0.1 (node/p2p/nat.py): reachability by dial-back, relay limits refused
with a reason while existing circuits carry on, a NATed host replacing a dead relay, DCUtR counted.

"Behind a NAT" on loopback: the host announces a port nobody listens on (``announce_addrs``), so a
dial-back to its observed IP fails exactly as it does at a NAT without a port mapping. The network
namespace lab (tests/netlab/) runs the same code behind a real masquerading NAT.
"""

from __future__ import annotations

import socket
from contextlib import AsyncExitStack

import pytest
import trio
from libp2p.peer.id import ID

from node.p2p import DialError, HostConfig, ReachConfig, RelayLimits, open_host

from .helpers import seed, wait_until

ECHO = "/t/echo/1"
FAST = ReachConfig(unknown_interval=0.3, interval=30.0, min_interval=0.2)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(name: str, **kw: object) -> HostConfig:
    return HostConfig(seed=seed(name), nat=True, reach=FAST, **kw)  # type: ignore[arg-type]


def natted(name: str, **kw: object) -> HostConfig:
    return config(name, announce_addrs=(f"/ip4/127.0.0.1/tcp/{closed_port()}",), **kw)


async def echo(peer: str, data: bytes) -> bytes:
    return b"echo:" + data


def no_auto_punch(*hosts) -> None:
    for host in hosts:
        host.nat.dcutr.auto_drive = False


async def test_reachability_public_and_private_with_evidence(caplog):
    with trio.fail_after(30):
        async with open_host(config("pub-a")) as a, open_host(config("pub-b")) as b, \
                open_host(config("pub-c")) as c, open_host(natted("nat-n")) as n:
            for x, y in ((a, b), (a, c), (b, c), (n, a), (n, b), (n, c)):
                await x.connect(y.listen_addrs()[0])
            await wait_until(lambda: n.reachability()["status"] == "private", 15, "n private")
            await wait_until(lambda: a.reachability()["status"] == "public", 15, "a public")
            assert n.reachability()["evidence"].get("failed", 0) >= 2
            assert n.reachability()["evidence"].get("ok", 0) == 0
            assert a.reachability()["evidence"]["ok"] >= 2
            assert a.reachability()["observed"].startswith("/ip4/127.0.0.1/tcp/")
            # the servers dialed only the observed IP, and no second connection stayed registered
            assert all(len(a.lhost.get_network().get_connections(ID.from_base58(p))) == 1
                       for p in a.connected_peers())
            # each probe's connection closes after Noise: py-libp2p's ERROR line for it is not logged
            assert not [r for r in caplog.records if r.getMessage().startswith("fail to upgrade mux")]


async def test_relay_refuses_beyond_limits_and_keeps_existing_circuits():
    limits = RelayLimits(max_reservations=1, max_reservations_per_ip=1, max_reservations_per_subnet=1, max_circuits=4,
                         max_circuits_per_peer=1,
                         min_reserve_interval=0.0)
    with trio.fail_after(60):
        async with open_host(config("relay", relay_service=True, relay_limits=limits)) as relay, \
                open_host(config("helper")) as helper, open_host(natted("nat-1")) as n1, \
                open_host(natted("nat-2")) as n2, open_host(config("dialer-1")) as d1, \
                open_host(config("dialer-2")) as d2:
            no_auto_punch(relay, helper, n1, n2, d1, d2)
            n1.set_request_handler(ECHO, echo)
            await relay.connect(helper.listen_addrs()[0])
            for n in (n1, n2):
                await n.connect(relay.listen_addrs()[0])
                await n.connect(helper.listen_addrs()[0])
            await wait_until(lambda: n1.reachability()["relays"] or n2.reachability()["relays"], 20, "a reservation")
            holder, other = (n1, n2) if n1.reachability()["relays"] else (n2, n1)
            await wait_until(lambda: relay.stats.relay.get("refused_reservations_full", 0) >= 1, 20, "refusal")
            await wait_until(lambda: other.stats.relay.get("client_reserve_failed_RESERVATION_REFUSED", 0) >= 1, 5,
                             "the refused client to read the reason")  # the relay counts before it answers
            assert other.reachability()["relays"] == []
            if holder is not n1:
                holder.set_request_handler(ECHO, echo)
            circuit = holder.reachability()["relayed_addrs"][0]
            await d1.connect(circuit)
            assert d1.relayed_only(holder.peer_id)
            assert await d1.request(holder.peer_id, ECHO, b"one") == b"echo:one"
            # a second circuit to the same reservation is beyond max_circuits_per_peer: refused with a reason
            with pytest.raises(DialError, match="RESOURCE_LIMIT_EXCEEDED"):
                await d2.connect(circuit)
            assert relay.stats.relay["refused_circuits_per_reservation"] == 1
            # ... and the first circuit is unaffected
            assert await d1.request(holder.peer_id, ECHO, b"two" * 1000) == b"echo:" + b"two" * 1000
            snap = relay.reachability()["relay_service"]
            assert snap == {"enabled": True, "reservations": 1, "circuits": 1, "hop_streams": 0}


async def test_circuit_closed_at_its_deadline_and_byte_cap():
    limits = RelayLimits(circuit_seconds=2, circuit_bytes=64 << 10, min_reserve_interval=0.0)
    with trio.fail_after(60):
        async with open_host(config("relay-d", relay_service=True, relay_limits=limits)) as relay, \
                open_host(config("helper-d")) as helper, open_host(natted("nat-d")) as n, \
                open_host(config("dialer-d")) as d:
            no_auto_punch(relay, helper, n, d)
            n.set_request_handler(ECHO, echo)
            await relay.connect(helper.listen_addrs()[0])
            await n.connect(relay.listen_addrs()[0])
            await n.connect(helper.listen_addrs()[0])
            await wait_until(lambda: n.reachability()["relayed_addrs"], 20, "a reservation")
            circuit = n.reachability()["relayed_addrs"][0]
            await d.connect(circuit)
            with pytest.raises(Exception):  # the reply would push the circuit past 64 KiB: cut, not carried
                await d.request(n.peer_id, ECHO, b"x" * (200 << 10), timeout=5)
            assert relay.stats.relay["circuits_cut_circuit_bytes"] == 1
            await wait_until(lambda: not d.connected(n.peer_id), 5, "the cut circuit to close")
            await d.connect(circuit)
            assert await d.request(n.peer_id, ECHO, b"idle") == b"echo:idle"
            await wait_until(lambda: not d.connected(n.peer_id), 6, "the circuit to close at its deadline")
            assert relay.stats.relay["circuits_opened"] == 2


async def test_natted_host_replaces_a_dead_relay():
    with trio.fail_after(60):
        async with open_host(config("relay-2", relay_service=True)) as r2, open_host(config("helper-r")) as helper, \
                open_host(natted("nat-r")) as n:
            no_auto_punch(r2, helper, n)
            n.nat.autorelay.want = 1
            await n.connect(helper.listen_addrs()[0])
            async with open_host(config("relay-1", relay_service=True)) as r1:
                no_auto_punch(r1)
                await n.connect(r1.listen_addrs()[0])
                await wait_until(lambda: n.reachability()["relays"] == [r1.peer_id], 20, "a reservation on relay 1")
                assert r1.peer_id in n.advertised_addrs()[0]
                await n.connect(r2.listen_addrs()[0])  # learned of another relay; one reservation is wanted
                await trio.sleep(0.5)
                assert n.reachability()["relays"] == [r1.peer_id]
            # relay 1 is gone (its host stopped, its connections closed): n reserves on relay 2 and
            # advertises that circuit instead
            await wait_until(lambda: n.reachability()["relays"] == [r2.peer_id], 20, "a reservation on relay 2")
            assert r2.peer_id in n.advertised_addrs()[0] and "/p2p-circuit" in n.advertised_addrs()[0]
            assert n.stats.relay["client_relay_lost"] == 1


async def test_dcutr_exchange_upgrades_a_relayed_connection_and_is_counted():
    with trio.fail_after(60):
        async with open_host(config("relay-h", relay_service=True)) as relay, open_host(config("helper-h")) as helper, \
                open_host(natted("nat-h")) as n, open_host(config("dialer-h")) as d:
            no_auto_punch(relay, helper, n, d)
            await relay.connect(helper.listen_addrs()[0])
            await n.connect(relay.listen_addrs()[0])
            await n.connect(helper.listen_addrs()[0])
            await wait_until(lambda: n.reachability()["relayed_addrs"], 20, "a reservation")
            await d.connect(n.reachability()["relayed_addrs"][0])
            assert d.relayed_only(n.peer_id)
            # no known direct address on the dialer's side: only the CONNECT/SYNC exchange can help
            d.lhost.get_peerstore().clear_addrs(ID.from_base58(n.peer_id))
            assert await d.nat.dcutr.initiate_hole_punch(ID.from_base58(n.peer_id))
            assert not d.relayed_only(n.peer_id)
            assert d.reachability()["hole_punch"]["attempts"] == 1
            assert d.reachability()["hole_punch"]["successes"] == 1
            await wait_until(lambda: n.reachability()["hole_punch"]["attempts"] == 1, 5, "the responder's count")
