"""Garbage on the relay (hop, stop), DCUtR and dial-back protocols, and on QUIC: the guarded host
keeps serving, the sender pays penalty points, nothing is held open (node/p2p/relay.py,
holepunch.py, reach.py; QUIC is py-libp2p's own transport under the same guards)."""

from __future__ import annotations

import os

import trio
from libp2p.relay.circuit_v2.dcutr import PROTOCOL_ID as DCUTR
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, PeerId, StopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP, STOP_PROTOCOL_ID as STOP

from node.p2p.framing import encode_uvarint
from node.p2p.reach import PROTOCOL as DIALBACK

from .helpers import wait_until
from .test_garbage import stream_payloads
from .test_nat import ECHO, config, echo, natted, no_auto_punch


def framed(msg) -> bytes:
    raw = msg.SerializeToString()
    return encode_uvarint(len(raw)) + raw


def relay_payloads() -> list[bytes]:
    return stream_payloads() + [
        framed(HopMessage(type=HopMessage.CONNECT, peer=PeerId(id=os.urandom(40)))),  # not a peer id
        framed(HopMessage(type=HopMessage.RESERVE, peer=PeerId(id=b"\x00\x24" + os.urandom(36)))),  # spoofed
        framed(HopMessage(type=HopMessage.STATUS)),  # a status where a request belongs
        framed(StopMessage(type=StopMessage.CONNECT, peer=PeerId(id=os.urandom(5)))),
        encode_uvarint(3000) + b"\x08\x01" + os.urandom(2998),  # a DCUtR-sized frame of junk
    ]


async def send_garbage(atk, victim_id: str, protocol: str, payload: bytes) -> None:
    try:
        stream = await atk._raw_stream(victim_id, protocol)
    except Exception:  # noqa: BLE001 - refused at negotiation (a blocked peer): the guard's job done
        return
    try:
        with trio.move_on_after(1.0):
            await stream.write(payload)
            if payload:
                await stream.read(4096)
    except Exception:  # noqa: BLE001 - reset by the victim: expected
        pass
    finally:
        try:
            await stream.reset()
        except Exception:  # noqa: BLE001
            pass


async def test_garbage_on_hop_stop_dcutr_and_dialback_leaves_the_relay_serving():
    with trio.fail_after(90):
        async with open_host_pair() as (victim, good, atk, n):
            for protocol in (HOP, STOP, DCUTR, DIALBACK):
                for payload in relay_payloads():
                    await send_garbage(atk, victim.peer_id, protocol, payload)
            # an idle hop stream is cut at hop_read_timeout, not held
            stream = await atk._raw_stream(victim.peer_id, HOP)
            await wait_until(lambda: victim.stats.relay.get("refused_idle", 0) >= 1, 10, "the idle hop stream cut")
            await stream.reset()
            assert victim.penalties.points(atk.peer_id) > 0
            assert victim.stats.penalties["relay_garbage"] >= 1
            assert victim.stats.penalties["relay_spoof"] >= 1
            assert victim.stats.relay["refused_stop_unsolicited"] >= 1  # nobody reserved: STOP refused
            assert victim.stats.penalties["dialback_garbage"] >= 1
            # the reset streams are let go within a bound (on a loaded machine not at once)
            await wait_until(lambda: victim.reachability()["relay_service"]["hop_streams"] == 0, 10, "hop streams let go")
            assert victim.reachability()["relay_service"]["circuits"] == 0
            # the relay still serves: a NATed host reserves and a good peer reaches it through a circuit
            await wait_until(lambda: n.reachability()["relayed_addrs"], 20, "a reservation after the garbage")
            await good.connect(n.reachability()["relayed_addrs"][0])
            assert await good.request(n.peer_id, ECHO, b"still") == b"echo:still"


async def test_garbage_dcutr_from_a_relayed_peer_costs_points():
    with trio.fail_after(60):
        async with open_host_pair() as (relay, good, atk, n):
            await wait_until(lambda: n.reachability()["relayed_addrs"], 20, "a reservation")
            await atk.connect(n.reachability()["relayed_addrs"][0])  # a relayed link: DCUtR is served on it
            for payload in relay_payloads()[:6]:
                await send_garbage(atk, n.peer_id, DCUTR, payload)
                await trio.sleep(0)
            counts = n.stats.holepunch
            assert counts.get("refused_garbage", 0) + counts.get("refused_rate", 0) >= 2
            assert n.penalties.points(atk.peer_id) > 0
            assert n.reachability()["hole_punch"]["attempts"] == 0
            await good.connect(n.reachability()["relayed_addrs"][0])
            assert await good.request(n.peer_id, ECHO, b"ok") == b"echo:ok"


def open_host_pair():
    """relay (the victim), a good peer and an attacker (public), n: a NATed host reserved on the relay."""
    from contextlib import asynccontextmanager

    from node.p2p import open_host

    @asynccontextmanager
    async def opened():
        async with open_host(config("g-relay", relay_service=True)) as relay, open_host(config("g-good")) as good, \
                open_host(config("g-atk")) as atk, open_host(natted("g-nat")) as n:
            no_auto_punch(relay, good, atk, n)
            n.set_request_handler(ECHO, echo)
            # set-up dials get a loaded machine's time (the suite runs beside other work): the garbage is the test
            for peer in (good, atk):
                await peer.connect(relay.listen_addrs()[0], timeout=20.0)
            await n.connect(relay.listen_addrs()[0], timeout=20.0)
            await n.connect(good.listen_addrs()[0], timeout=20.0)
            yield relay, good, atk, n

    return opened()


async def test_quic_host_survives_garbage_datagrams_and_streams():
    from node.p2p import open_host

    with trio.fail_after(60):
        async with open_host(config("q-victim", quic=True)) as victim, open_host(config("q-atk", quic=True)) as atk, \
                open_host(config("q-good", quic=True)) as good:
            victim.set_request_handler(ECHO, echo)
            quic = next(a for a in victim.listen_addrs() if "/quic" in a)
            port = int(quic.split("/")[4])
            sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
            with sock:
                for size in (1, 64, 1200, 1500, 4000):
                    for _ in range(20):
                        await sock.sendto(os.urandom(size), ("127.0.0.1", port))
                # a QUIC long-header Initial with a bogus version and connection ids
                await sock.sendto(b"\xc0\xde\xad\xbe\xef\x08" + os.urandom(8) + b"\x08" + os.urandom(1300),
                                  ("127.0.0.1", port))
            await atk.connect(quic)
            for payload in stream_payloads():
                await send_garbage(atk, victim.peer_id, ECHO, payload)
            await good.connect(quic)
            assert await good.request(victim.peer_id, ECHO, b"quic") == b"echo:quic"
            assert victim.penalties.points(atk.peer_id) > 0
