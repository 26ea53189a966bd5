"""Reachability: does the rest of the swarm manage to dial us? Learned by asking connected peers to
dial us back (``/swarm/dialback/1``), a request/response protocol of our own.

Why not py-libp2p 0.8.1's AutoNAT (host/autonat/autonat.py): its server dials back with
``host.connect``, which returns at once when a connection to the peer exists (BasicHost.connect:
"there is already a connection to this peer"), and the request always arrives on one, so every
dial-back "succeeds" and every peer, NATed or not, is told it is public. It also dials every
advertised address one by one without a deadline, reads the request without one, and has no rate
limit. Our server makes a *fresh* TCP connection and only runs the Noise handshake on it (proof that
the peer itself answers there, without registering a second connection that would disturb pubsub).

The server dials only the asking peer's **observed IP** (the remote address of its direct connection
to us), with the TCP ports it names: a dial-back service must not be usable to make us dial arbitrary
hosts (the reflection attack of RFC 3489 §12.1.1, which AutoNAT's spec forbids too). Using the
observed IP also makes it work behind NAT: a node's listen address is private, its NAT's public
address is what we see. A peer gets one dial-back per ``min_interval``, ``max_ports`` ports, each
dial bounded by ``dial_timeout``, ``max_concurrent`` at once for all peers; never over a relayed link.

Client: every ``interval`` (sooner while unknown) ask up to ``ask`` direct peers; the last answer of
each of the ``keep`` most recent servers counts. Public when ``need`` servers reached us, private
when ``need`` failed and fewer succeeded, else unknown. The IP each server saw us at (sent with
failures too) is kept the same way: an IP that ``need`` servers agree on is our NAT's public IP,
which DCUtR needs (holepunch.py): the host runs with identify's address discovery off (build.py),
so nothing else tells a NATed node where it can be reached.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import trio
from libp2p.peer.id import ID
from multiaddr import Multiaddr

logger = logging.getLogger(__name__)

PROTOCOL = "/swarm/dialback/1"
REQUEST_CAP = 2048


@dataclass(frozen=True)
class ReachConfig:
    enabled: bool = True  # run the client (the server always answers)
    interval: float = 300.0  # seconds between rounds once the status is known
    unknown_interval: float = 10.0  # ... while it is unknown
    ask: int = 3  # servers asked per round
    keep: int = 8  # most recent servers whose answers count
    need: int = 2  # agreeing answers to decide
    min_interval: float = 30.0  # server: one dial-back per peer per this many seconds
    max_ports: int = 4
    dial_timeout: float = 5.0
    max_concurrent: int = 4


def encode_request(ports: list[int]) -> bytes:
    return msgpack.packb({"ports": ports[:16]})


def decode_request(data: bytes, max_ports: int) -> list[int]:
    """The ports asked for; ValueError on anything else (the request handler turns it into a reset)."""
    msg = msgpack.unpackb(data, raw=False, strict_map_key=True)
    if not isinstance(msg, dict) or set(msg) != {"ports"} or not isinstance(msg["ports"], list):
        raise ValueError("dial-back request must be {'ports': [int]}")
    ports = msg["ports"]
    if not 1 <= len(ports) <= max_ports or not all(isinstance(p, int) and not isinstance(p, bool)
                                                   and 1 <= p <= 65535 for p in ports):
        raise ValueError(f"dial-back request needs 1..{max_ports} ports in 1..65535")
    return list(dict.fromkeys(ports))


def listen_ports(addrs: list[str]) -> list[int]:
    """TCP ports of our direct listen addresses."""
    out: list[int] = []
    for text in addrs:
        if "/p2p-circuit" in text:
            continue
        parts = text.split("/")
        if "tcp" in parts:
            try:
                port = int(parts[parts.index("tcp") + 1])
            except (IndexError, ValueError):
                continue
            if port not in out:
                out.append(port)
    return out


class DialBackServer:
    """Answers ``/swarm/dialback/1``: msgpack ``{"ok": bool, "reason": str, "observed": str}``."""

    def __init__(self, lhost: Any, config: ReachConfig, stats: Any, penalties: Any,
                 clock: Callable[[], float] = trio.current_time):
        self._lhost = lhost
        self.config = config
        self._stats = stats
        self._penalties = penalties
        self._clock = clock
        self._last: OrderedDict[str, float] = OrderedDict()
        self._running = 0

    def observed_ips(self, peer: str) -> list[str]:
        """Remote IPs of the peer's direct (not relayed) connections to us."""
        ips: list[str] = []
        for conn in self._lhost.get_network().get_connections(ID.from_base58(peer)):
            try:
                if any("/p2p-circuit" in str(a) for a in conn.get_transport_addresses() or []):
                    continue
                addr = conn.muxed_conn.get_remote_address()
            except Exception:
                continue
            if addr and str(addr[0]) not in ips:
                ips.append(str(addr[0]))
        return ips

    async def handle(self, peer: str, data: bytes) -> bytes:
        try:
            ports = decode_request(bytes(data), self.config.max_ports)
        except Exception:
            self._stats.relay["dialback_served_malformed"] += 1
            self._penalties.charge(peer, "dialback_garbage")
            raise  # the request handler resets the stream
        ok, reason, observed = await self._serve(peer, ports)
        self._stats.relay[f"dialback_served_{reason}"] += 1
        return msgpack.packb({"ok": ok, "reason": reason, "observed": observed})

    async def _serve(self, peer: str, ports: list[int]) -> tuple[bool, str, str]:
        ips = self.observed_ips(peer)
        if not ips:
            return False, "relayed", ""  # no direct link: no observed IP we could dial safely
        ip, now = ips[0], self._clock()
        last = self._last.get(peer)
        if last is not None and now - last < self.config.min_interval:
            return False, "rate-limited", ip
        if self._running >= self.config.max_concurrent:
            return False, "busy", ip
        self._last[peer] = now
        self._last.move_to_end(peer)
        while len(self._last) > 4096:
            self._last.popitem(last=False)
        self._running += 1
        try:
            for port in ports:
                family = "ip6" if ":" in ip else "ip4"
                if await self._dial(Multiaddr(f"/{family}/{ip}/tcp/{port}"), ID.from_base58(peer)):
                    return True, "ok", f"/{family}/{ip}/tcp/{port}"
            return False, "dial-failed", ip
        finally:
            self._running -= 1

    async def _dial(self, maddr: Multiaddr, peer: ID) -> bool:
        """A fresh TCP connection and a Noise handshake that proves ``peer`` answers there; then close.
        Nothing is registered with the Swarm (no muxer, no second connection for pubsub to see)."""
        network = self._lhost.get_network()
        transport = network.transport_manager.transport_for_dialing(maddr)
        if transport is None:
            return False
        raw = None
        try:
            with trio.fail_after(self.config.dial_timeout):
                raw = await transport.dial(Multiaddr(f"{maddr}/p2p/{peer}"))
                secured = await network.upgrader.upgrade_security(raw, True, peer)
                await secured.close()
            return True
        except BaseException as exc:
            if not isinstance(exc, Exception) and not isinstance(exc, trio.TooSlowError):
                raise
            logger.debug("dial-back to %s at %s failed: %r", peer, maddr, exc)
            if raw is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    try:
                        await raw.close()
                    except Exception:
                        pass
            return False


class Reachability:
    """The client side: asks, keeps the evidence, says public/private/unknown."""

    def __init__(self, config: ReachConfig) -> None:
        self.config = config
        self.answers: OrderedDict[str, str] = OrderedDict()  # server -> "ok", "failed" or a refusal
        self.observed = ""
        self.seen_ips: OrderedDict[str, str] = OrderedDict()  # server -> the IP it saw us at
        self.asked = 0
        self.errors = 0

    @property
    def status(self) -> str:
        ok = sum(1 for v in self.answers.values() if v == "ok")
        failed = sum(1 for v in self.answers.values() if v == "failed")
        if ok >= self.config.need:
            return "public"
        if failed >= self.config.need and failed > ok:
            return "private"
        return "unknown"

    def record(self, server: str, verdict: str) -> None:
        self.answers.pop(server, None)
        self.answers[server] = verdict
        while len(self.answers) > self.config.keep:
            self.answers.popitem(last=False)

    def record_ip(self, server: str, observed: str) -> None:
        """The IP part of a server's ``observed`` ("/ip4/A/tcp/P" after a dial-back, "A" after a failure)."""
        text = observed.split("/")[2] if observed.startswith(("/ip4/", "/ip6/")) and observed.count("/") >= 2 else observed
        try:
            ip = str(ipaddress.ip_address(text))
        except ValueError:
            return
        self.seen_ips.pop(server, None)
        self.seen_ips[server] = ip
        while len(self.seen_ips) > self.config.keep:
            self.seen_ips.popitem(last=False)

    def external_ips(self) -> list[str]:
        """IPs that at least ``need`` servers saw us at, most reported first (one lying server cannot
        point our hole punches elsewhere)."""
        counts = Counter(self.seen_ips.values())
        return [ip for ip, n in counts.most_common() if n >= self.config.need]

    def snapshot(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for verdict in self.answers.values():
            counts[verdict] = counts.get(verdict, 0) + 1
        return {"status": self.status, "evidence": counts, "asked": self.asked, "errors": self.errors,
                "observed": self.observed, "external_ips": self.external_ips()}

    async def run(self, host: Any, on_change: Callable[[str], None]) -> None:
        """Ask ``ask`` direct peers per round, rotating through them; ``on_change(status)`` on a change."""
        turn = 0
        while True:
            before = self.status
            peers = [p for p in sorted(host.connected_peers()) if not host.relayed_only(p)
                     and host.offers(p, PROTOCOL, unknown=True)]
            if peers:
                turn += 1
                start = (turn * self.config.ask) % len(peers)
                chosen = (peers[start:] + peers[:start])[: self.config.ask]
                async with trio.open_nursery() as nursery:
                    for peer in chosen:
                        nursery.start_soon(self._ask, host, peer)
            if self.status != before:
                on_change(self.status)
            await trio.sleep(self.config.unknown_interval if self.status == "unknown" else self.config.interval)

    async def _ask(self, host: Any, peer: str) -> None:
        ports = listen_ports(host.direct_listen_addrs())
        if not ports:
            return
        self.asked += 1
        try:
            reply = msgpack.unpackb(await host.request(peer, PROTOCOL, encode_request(ports), timeout=15.0,
                                                       max_response_bytes=1024), raw=False)
            verdict = "ok" if reply.get("ok") is True else ("failed" if reply.get("reason") == "dial-failed"
                                                              else str(reply.get("reason", "?"))[:32])
            if isinstance(reply.get("observed"), str):
                if verdict == "ok":
                    self.observed = reply["observed"][:128]
                self.record_ip(peer, reply["observed"][:128])
        except Exception as exc:  # RequestError (an old peer without the protocol resets), bad reply
            self.errors += 1
            logger.debug("dial-back request to %s failed: %r", peer, exc)
            return
        if verdict in ("rate-limited", "busy"):
            return  # says nothing about us
        self.record(peer, verdict)
