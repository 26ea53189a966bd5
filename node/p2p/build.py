"""Construct the py-libp2p objects with our settings (no I/O here; ``host.open_host`` runs them).

Each choice below answers a measured py-libp2p 0.8.1 trap (DESIGN.md):
- security: ``new_swarm`` offers Noise, TLS, SECIO *and plaintext* by default; we pass Noise only;
- muxer: yamux only (mplex is the fallback py-libp2p adds by default);
- gossipsub: advertise /meshsub/1.1.0 only (1.2's IDONTWANT floods the 32-slot send queue), spam
  protection off (10 msg/s per topic cap), adaptive gossip off (stretches the heartbeat to 30-60 s),
  eclipse protection off (IP diversity is meaningless for peers sharing a machine or NAT);
- auto-connector off: it redials peerstore entries, which would undo disconnect() of a cheater;
- inbound connections pass connguard.ConnGuard first (handshake deadline, per-address and total
  bounds, evicting silent sockets instead of refusing newcomers; why not libp2p/rcmgr: see there);
- pubsub signing StrictSign, as go-, js- and rust-libp2p default to: every message carries `from`,
  a seqno and a signature by the sender's libp2p key, and unsigned ones are dropped. Without it no
  other stack accepts our gossip. The Ed25519 envelope inside (gossip/envelope.py) stays: it binds the
  content to its *author* across forwarders, while the libp2p signature names the publisher;
- message ids = blake2b(topic, data): content ids mean nobody can pre-empt a peer's message by
  reusing its (from, seqno) id, and a replayed envelope is one id; the topic is in the id so a copy
  of a real envelope on the wrong topic is a *different* message and cannot shadow the genuine one.
  (A js-libp2p peer joining our mesh sets the same ``msgIdFn`` so IHAVE/IWANT ids agree; mesh
  delivery works without it.) Failed validations are never cached, see guard.NoValidationCache.
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

from .budget import PenaltyBox
from .connguard import ConnGuard
from .config import HostConfig
from . import records
from .guard import GuardedGossipSub, GuardedPubsub, batch_yamux_window_updates, one_line_stream_failures
from .stats import HostStats

GOSSIPSUB_PROTOCOLS = (PROTOCOL_ID_V11,)


class DisabledAutoConnector(AutoConnector):
    """An AutoConnector that never starts: peer selection belongs to the node, not to libp2p."""

    async def start(self) -> None:
        self._started = False


def content_msg_id(msg: Any) -> bytes:
    """blake2b over (topics, data), length-prefixed so no (topic, data) split collides with another."""
    h = hashlib.blake2b(digest_size=20)
    for topic in msg.topicIDs:
        raw = topic.encode()
        h.update(len(raw).to_bytes(4, "big") + raw)
    h.update(b"\0" + bytes(msg.data))
    return h.digest()


@dataclass
class Parts:
    host: BasicHost
    pubsub: GuardedPubsub
    router: GuardedGossipSub
    listen_addr: Multiaddr
    listen_addrs: list[Multiaddr]
    penalties: PenaltyBox
    conn_guard: ConnGuard


def build(config: HostConfig, stats: HostStats) -> Parts:
    records.install()
    batch_yamux_window_updates()
    one_line_stream_failures()
    penalties = PenaltyBox(stats, config.penalty_block_points, config.penalty_block_seconds)
    key_pair = create_new_key_pair(bytes(config.seed))
    noise = NoiseTransport(key_pair, noise_privkey=create_new_x25519_key_pair().private_key)
    listen_addr = Multiaddr(f"/ip4/{config.listen_host}/tcp/{config.port}")
    listen_addrs = [listen_addr]
    if config.quic:  # QUIC brings its own TLS 1.3 and streams: sec_opt/muxer_opt apply to TCP only
        listen_addrs.append(Multiaddr(f"/ip4/{config.listen_host}/udp/{config.port}/quic-v1"))
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: noise},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        listen_addrs=listen_addrs,
        enable_quic=config.quic,
        announce_addrs=[Multiaddr(a) for a in config.announce_addrs] or None,
        # The library's upgrade timeout is a backstop: connguard closes a socket whose handshake is
        # unfinished at conn_limits.handshake_timeout, a second earlier.
        connection_config=ConnectionConfig(inbound_upgrade_timeout=config.conn_limits.handshake_timeout + 1.0),
        # Advertise only what we listen on; observed addresses reported by arbitrary peers are not
        # worth trusting for a swarm that dials from gossip.
        disable_identify_address_discovery=True,
    )
    assert isinstance(host, BasicHost)
    network = host.get_network()
    network.auto_connector = DisabledAutoConnector(network)  # type: ignore[attr-defined]
    conn_guard = ConnGuard(config.conn_limits, stats, penalties)
    conn_guard.install(network)

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
    pubsub = GuardedPubsub(host, router, strict_signing=True, msg_id_constructor=content_msg_id,
                           guard_stats=stats, penalties=penalties)
    return Parts(host=host, pubsub=pubsub, router=router, listen_addr=listen_addr, listen_addrs=listen_addrs,
                 penalties=penalties, conn_guard=conn_guard)
