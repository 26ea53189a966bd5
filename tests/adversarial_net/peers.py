"""Attacker and foreign-stack peers: plain py-libp2p hosts with none of node/p2p's settings.

``open_plain_gossip_peer`` stands in for another libp2p stack (js-libp2p 3.x defaults): gossipsub with
StrictSign, the spec's from+seqno message ids, and a validator that applies js-libp2p's StrictSign
rules (from, seqno and a valid signature by ``from``'s key are all required), so a message it accepts
is one those stacks accept. The same peer doubles as an attacker: it can publish anything, signed
with its own key, on any topic.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_new_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.validators import signature_validator
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr


def strict_sign_ok(msg: Any) -> bool:
    """js-libp2p gossipsub's StrictSign check: from, seqno, signature present, signature valid."""
    if not msg.from_id or not msg.seqno or not msg.signature:
        return False
    try:
        return bool(signature_validator(msg))
    except Exception:
        return False


@dataclass
class PlainPeer:
    host: Any
    pubsub: Pubsub
    peer_id: str
    received: list[tuple[str, bytes, str]] = field(default_factory=list)  # (topic, data, from)
    refused: list[tuple[str, bytes]] = field(default_factory=list)

    async def connect(self, multiaddr: str) -> None:
        await self.host.connect(info_from_p2p_addr(Multiaddr(multiaddr)))

    async def subscribe(self, topic: str) -> None:
        def validate(forwarder: ID, msg: Any) -> bool:
            ok = strict_sign_ok(msg)
            (self.received.append((topic, bytes(msg.data), str(ID(msg.from_id)))) if ok
             else self.refused.append((topic, bytes(msg.data))))
            return ok

        self.pubsub.set_topic_validator(topic, validate, False)
        await self.pubsub.subscribe(topic)

    async def publish(self, topic: str, data: bytes) -> None:
        await self.pubsub.publish(topic, data)

    def mesh_peers(self, topic: str) -> list[str]:
        return [str(p) for p in self.pubsub.router.mesh.get(topic, set())]  # type: ignore[attr-defined]


@asynccontextmanager
async def open_plain_gossip_peer(name: str) -> AsyncIterator[PlainPeer]:
    key_pair = create_new_key_pair(hashlib.sha256(name.encode()).digest())
    noise = NoiseTransport(key_pair, noise_privkey=create_new_x25519_key_pair().private_key)
    listen = Multiaddr("/ip4/127.0.0.1/tcp/0")
    host = new_host(key_pair=key_pair, sec_opt={NOISE_PROTOCOL_ID: noise},
                    muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux}, listen_addrs=[listen])
    router = GossipSub(protocols=[PROTOCOL_ID_V11], degree=6, degree_low=4, degree_high=12,
                       heartbeat_interval=0.5, heartbeat_initial_delay=0.1)  # type: ignore[arg-type]
    pubsub = Pubsub(host, router, strict_signing=True)  # default msg ids: from + seqno, as the spec
    async with background_trio_service(pubsub), background_trio_service(router):
        async with host.run(listen_addrs=[listen]):
            peer = PlainPeer(host=host, pubsub=pubsub, peer_id=str(host.get_id()))
            try:
                yield peer
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    for conns in list(host.get_network().connections.values()):
                        for conn in list(conns):
                            try:
                                await conn.close()
                            except Exception:
                                pass


async def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll until pred() holds; return the seconds it took, or fail the test with ``what``."""
    start = trio.current_time()
    with trio.move_on_after(timeout):
        while not pred():
            await trio.sleep(0.01)
        return trio.current_time() - start
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def open_raw_stream(peer: PlainPeer, target: str, protocol: str) -> Any:
    """A negotiated stream from a plain peer: what an attacker writes raw frames on."""
    return await peer.host.new_stream(ID.from_base58(target), [TProtocol(protocol)])
