"""Construct the py-libp2p objects with our settings (no I/O here; ``host.open_host`` runs them).

Each choice below answers a measured py-libp2p 0.8.1 trap (DESIGN.md):
- security: ``new_swarm`` offers Noise, TLS, SECIO *and plaintext* by default; we pass Noise only;
- muxer: yamux only (mplex is the fallback py-libp2p adds by default);
- gossipsub: advertise /meshsub/1.1.0 only (1.2's IDONTWANT floods the 32-slot send queue), spam
  protection off (10 msg/s per topic cap), adaptive gossip off (stretches the heartbeat to 30-60 s),
  eclipse protection off (IP diversity is meaningless for peers sharing a machine or NAT);
- auto-connector off: it redials peerstore entries, which would undo disconnect() of a cheater;
- pubsub signing off and message ids = blake2b(data): every payload is already an Ed25519-signed
  envelope (gossip/envelope.py), so libp2p's own per-message signature is a second sign and verify
  for nothing. Content ids also mean nobody can pre-empt a peer's message by reusing its
  (from, seqno) id, which unsigned default ids would allow; and a replayed envelope is one id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_new_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.host.basic_host import BasicHost
from libp2p.network.auto_connector import AutoConnector
from libp2p.network.config import ConnectionConfig
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from multiaddr import Multiaddr

from .config import HostConfig
from . import records
from .guard import GuardedGossipSub, GuardedPubsub
from .stats import HostStats

GOSSIPSUB_PROTOCOLS = (PROTOCOL_ID_V11,)


class DisabledAutoConnector(AutoConnector):
    """An AutoConnector that never starts: peer selection belongs to the node, not to libp2p."""

    async def start(self) -> None:
        self._started = False


def content_msg_id(msg: Any) -> bytes:
    return hashlib.blake2b(bytes(msg.data), digest_size=20).digest()


@dataclass
class Parts:
    host: BasicHost
    pubsub: GuardedPubsub
    router: GuardedGossipSub
    listen_addr: Multiaddr


def build(config: HostConfig, stats: HostStats) -> Parts:
    records.install()
    key_pair = create_new_key_pair(bytes(config.seed))
    noise = NoiseTransport(key_pair, noise_privkey=create_new_x25519_key_pair().private_key)
    listen_addr = Multiaddr(f"/ip4/{config.listen_host}/tcp/{config.port}")
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: noise},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        listen_addrs=[listen_addr],
        connection_config=ConnectionConfig(),
        # Advertise only what we listen on; observed addresses reported by arbitrary peers are not
        # worth trusting for a swarm that dials from gossip.
        disable_identify_address_discovery=True,
    )
    assert isinstance(host, BasicHost)
    network = host.get_network()
    network.auto_connector = DisabledAutoConnector(network)  # type: ignore[attr-defined]

    router = GuardedGossipSub(
        protocols=list(GOSSIPSUB_PROTOCOLS),
        degree=config.gossip_degree,
        degree_low=config.gossip_degree_low,
        degree_high=config.gossip_degree_high,
        heartbeat_interval=config.heartbeat_interval,  # type: ignore[arg-type]  # annotated int, used as float
        heartbeat_initial_delay=min(0.1, config.heartbeat_interval),
        adaptive_gossip_enabled=False,
        spam_protection_enabled=False,
        eclipse_protection_enabled=False,
        guard_stats=stats,
    )
    pubsub = GuardedPubsub(host, router, strict_signing=False, msg_id_constructor=content_msg_id,
                           guard_stats=stats)
    return Parts(host=host, pubsub=pubsub, router=router, listen_addr=listen_addr)
