"""The node's libp2p adapter (DESIGN.md layout name); the implementation lives in node/p2p/."""

from node.p2p import DialError, Host, HostConfig, HostStats, MessageTooLarge, P2PError, RequestError, open_host

__all__ = [
    "DialError",
    "Host",
    "HostConfig",
    "HostStats",
    "MessageTooLarge",
    "P2PError",
    "RequestError",
    "open_host",
]
