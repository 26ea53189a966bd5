"""Guarded adapter over py-libp2p 0.8.1: Noise+yamux host, gossipsub 1.1, request/response streams.

Import from here; the submodules each do one job:
config (settings, errors), build (construct libp2p objects), host (the Host API, open_host),
guard (exception containment), conngate + connguard (inbound connection limits), reqresp + framing (request streams), ratelimit, events, stats;
nat (peers behind NATs): reach (dial-back reachability), relay + relaygate (circuit relay v2 service),
autorelay (reservations, dialing through relays), holepunch (DCUtR).
"""

from .conngate import ConnLimits
from .config import DialError, HostConfig, MessageTooLarge, P2PError, RequestError
from .host import Host, open_host
from .reach import ReachConfig
from .relaygate import RelayLimits
from .stats import HostStats

__all__ = [
    "ConnLimits",
    "DialError",
    "Host",
    "HostConfig",
    "HostStats",
    "MessageTooLarge",
    "P2PError",
    "ReachConfig",
    "RelayLimits",
    "RequestError",
    "open_host",
]
