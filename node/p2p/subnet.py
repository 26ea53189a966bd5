"""Which network a source address belongs to: the unit budgets are charged to, because identities
are free and addresses are not.

A peer id costs nothing to make and one host can use many addresses of its own network (every
address of 127.0.0.0/8 on loopback, a whole /64 or more on IPv6), but a new network costs a real
attacker real money. So what an unknown remote may make us hold (pending handshakes, request slots)
is bounded per source network as well as per address and per peer id. An IPv4 address's network is
its /24 and an IPv6 address's its /48 (the usual size of one site's allocation; a single server's
/64 sits inside it); an IPv4-mapped IPv6 address counts as the IPv4 address it maps. A string that
is not an address (a relayed or test connection) is its own network.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

IPV4_PREFIX = 24
IPV6_PREFIX = 48


@lru_cache(maxsize=4096)
def subnet_of(ip: str) -> str:
    """The network `ip` is charged to, as CIDR text ('203.0.113.0/24')."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return ip
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    prefix = IPV4_PREFIX if addr.version == 4 else IPV6_PREFIX
    return str(ipaddress.ip_network(f"{addr}/{prefix}", strict=False))
