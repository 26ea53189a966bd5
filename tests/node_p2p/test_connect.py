"""Connections: dialing, peer events, dial errors, and the Noise-only security policy."""

from __future__ import annotations

import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_new_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from multiaddr import Multiaddr
import nacl.signing
import pytest

from node.p2p import DialError, HostConfig, open_host

from .helpers import open_hosts, seed, wait_until


async def test_peer_id_is_the_ed25519_seed_key():
    with trio.fail_after(10):
        async with open_host(HostConfig(seed=seed("id"))) as h:
            pub = nacl.signing.SigningKey(seed("id")).verify_key.encode()
            # identity multihash of the protobuf-encoded Ed25519 key ends with the raw 32-byte key
            assert h._self_id.to_bytes().endswith(pub)
            addrs = h.listen_addrs()
            assert addrs and all(a.startswith("/ip4/127.0.0.1/tcp/") and a.endswith("/p2p/" + h.peer_id) for a in addrs)


async def test_connect_events_and_disconnect():
    with trio.fail_after(20):
        async with open_hosts(2) as (a, b):
            events_a: list[tuple[str, bool]] = []
            events_b: list[tuple[str, bool]] = []
            a.on_peer_event(lambda p, c: events_a.append((p, c)))
            b.on_peer_event(lambda p, c: events_b.append((p, c)))
            b.on_peer_event(lambda p, c: 1 / 0)  # a broken callback must not break the others
            assert await a.connect(b.listen_addrs()[0]) == b.peer_id
            await wait_until(lambda: (a.peer_id, True) in events_b, what="b sees a connect")
            assert events_a == [(b.peer_id, True)]
            assert a.connected_peers() == [b.peer_id] and b.connected_peers() == [a.peer_id]
            assert a.peer_addrs(b.peer_id) == b.listen_addrs()
            # connecting again is a no-op, not a second event
            await a.connect(b.listen_addrs()[0])
            await a.disconnect(b.peer_id)
            await wait_until(lambda: (b.peer_id, False) in events_a, what="a sees disconnect")
            await wait_until(lambda: (a.peer_id, False) in events_b, what="b sees disconnect")
            assert events_a == [(b.peer_id, True), (b.peer_id, False)]
            assert a.connected_peers() == [] and b.stats.peer_event_errors == 2
            # no auto-reconnect behind the node's back
            await trio.sleep(0.5)
            assert a.connected_peers() == []


async def test_dial_errors_are_clear():
    with trio.fail_after(20):
        async with open_hosts(1) as (a,):
            with pytest.raises(DialError, match="bad multiaddr"):
                await a.connect("/ip4/127.0.0.1/tcp/1")  # no /p2p/ part
            with pytest.raises(DialError, match="own peer id"):
                await a.connect(a.listen_addrs()[0])
            # a free port with nobody listening
            sock = trio.socket.socket()
            await sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            sock.close()
            other = "12D3KooWBSmYS6WGbf51J2hNYtXPcPpLHTKb9fdYzyhj2kNw6Skc"
            with pytest.raises(DialError, match="could not connect|timed out"):
                await a.connect(f"/ip4/127.0.0.1/tcp/{port}/p2p/{other}", timeout=3.0)


async def _dial_with(security: str, target: str) -> None:
    """Dial ``target`` from a bare py-libp2p host that offers only ``security``."""
    kp = create_new_key_pair(seed("dialer-" + security))
    if security == "plaintext":
        sec = {TProtocol(PLAINTEXT_PROTOCOL_ID): InsecureTransport(kp)}
    else:
        sec = {NOISE_PROTOCOL_ID: NoiseTransport(kp, noise_privkey=create_new_x25519_key_pair().private_key)}
    listen = Multiaddr("/ip4/127.0.0.1/tcp/0")
    dialer = new_host(key_pair=kp, sec_opt=sec, muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux}, listen_addrs=[listen])
    async with dialer.run(listen_addrs=[listen]):
        with trio.fail_after(8):
            await dialer.connect(info_from_p2p_addr(Multiaddr(target)))


async def test_plaintext_dialer_is_refused_noise_dialer_is_not():
    with trio.fail_after(30):
        async with open_hosts(1) as (a,):
            target = a.listen_addrs()[0]
            await _dial_with("noise", target)  # control: the same harness connects when it offers Noise
            noise_id = str(ID.from_pubkey(create_new_key_pair(seed("dialer-noise")).public_key))
            assert noise_id in a.connected_peers()
            await a.disconnect(noise_id)
            with pytest.raises(Exception) as info:
                await _dial_with("plaintext", target)
            # py-libp2p reports it as a (grouped) SwarmDialAllFailedError after security negotiation fails
            assert "unable to connect" in repr(info.value), repr(info.value)
            plain_id = str(ID.from_pubkey(create_new_key_pair(seed("dialer-plaintext")).public_key))
            assert plain_id not in a.connected_peers()


async def test_errors_from_the_body_come_out_unwrapped():
    # py-libp2p yields inside its nurseries; open_host hands a lone exception back as itself.
    with trio.fail_after(10):
        with pytest.raises(DialError, match="bad multiaddr"):
            async with open_host(HostConfig(seed=seed("unwrap"))) as h:
                await h.connect("not a multiaddr")
