"""A network lab of real Linux network namespaces: peers on a bridge, shaped links, NAT routers.

    with Lab() as lab:
        a = lab.add_peer("a", up_mbps=10, down_mbps=10)          # public: on the lab's bridge
        lab.add_nat("home")                                       # a router namespace: masquerade
        b = lab.add_peer("b", nat="home", up_mbps=10)            # behind it: outbound only
        proc = lab.popen(a, [sys.executable, "-m", "node.cli", "start", "--host", a.ip, ...])

Layout (run as root; the host's own interfaces and routes are never touched: every link is created
inside the lab's namespaces with `ip -n`):

    core namespace:   bridge br0, one veth end per public peer and per router WAN (10.77.0.0/24)
    public peer:      eth0 = 10.77.0.(10+i)/24, no default route
    router k:         wan = 10.77.0.(200+k)/24; bridge lan = 10.77.(10+k).1/24; forwarding on;
                      iptables: MASQUERADE out of wan; from wan only ESTABLISHED,RELATED (inbound
                      dials are dropped, as a home router does)
    NATed peer:       eth0 = 10.77.(10+k).(10+j)/24, default route via the router

Shaping is `tc tbf` on both ends of a peer's veth: egress of the peer's eth0 is its uplink, egress
of the far end (in the core or the router) its downlink. netem does not exist in this kernel, so the
lab cannot add latency or loss: links are as fast as the kernel forwards, within their rates.

Namespaces are named `<prefix>-<lab id>-<name>`; the lab id and the owner's pid are recorded in
/run/swarm-netlab, so a new lab deletes the namespaces of labs whose owner died (stale labs after
a killed test run) and leaves a lab still in use by a live process alone. Teardown (context exit or
atexit) stops the processes started with `popen` by PID, then any other process left in the lab's
namespaces, then deletes the namespaces.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from node.procs import stop_processes
from netlab.tools import LabError, ensure_iptables, in_netns, run

PREFIX = "swlab"
STATE_DIR = Path("/run/swarm-netlab")
PUBLIC_NET = "10.77.0"


@dataclass(frozen=True)
class Peer:
    name: str
    ns: str
    ip: str
    nat: str | None = None  # the router's name when behind NAT


@dataclass
class Router:
    name: str
    ns: str
    wan_ip: str
    lan_net: str  # first three octets
    peers: list[str] = field(default_factory=list)


def unavailable_reason() -> str | None:
    """Why this machine cannot run the lab (not root, no `ip`/`tc`, namespaces refused, no tbf),
    or None when it can. Probes with a throwaway namespace, deleted again."""
    if os.geteuid() != 0:
        return "network lab needs root (network namespaces and tc)"
    probe = f"{PREFIX}probe-{os.getpid()}"  # not `PREFIX-`: clean_stale must not take it
    try:
        run(["ip", "netns", "add", probe], timeout=10)
    except LabError as exc:
        return f"network namespaces not permitted: {exc}"
    try:
        run(["ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"], timeout=10)
        run(["tc", "-n", probe, "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "10mbit",
             "burst", "32kb", "latency", "100ms"], timeout=10)
    except LabError as exc:
        return f"veth or tc tbf not available: {exc}"
    finally:
        run(["ip", "netns", "del", probe], timeout=10, check=False)
    return None


def tbf_args(mbps: float) -> list[str]:
    """tbf settings for `mbps`: a bucket of 10 ms of traffic (at least 16 full frames, so TCP's
    bursts pass) and a queue of 100 ms, enough for TCP to fill the link without tail drops."""
    rate = mbps * 1e6 / 8
    burst = max(int(rate * 0.01), 16 * 1514)
    return ["tbf", "rate", f"{int(mbps * 1000)}kbit", "burst", str(burst), "latency", "100ms"]


def clean_stale(prefix: str = PREFIX) -> list[str]:
    """Delete the namespaces of labs (named `prefix-...`) whose owner process is gone. Returns them."""
    owners = {}
    if STATE_DIR.is_dir():
        for f in STATE_DIR.iterdir():
            try:
                owners[f.name] = int(f.read_text().strip())
            except (OSError, ValueError):
                owners[f.name] = -1
    removed = []
    for line in run(["ip", "netns", "list"], timeout=10).splitlines():
        ns = line.split()[0] if line.strip() else ""
        if not ns.startswith(prefix + "-"):
            continue
        lab_key = "-".join(ns.split("-")[:2])
        pid = owners.get(lab_key, -1)
        if pid > 0 and _alive(pid):
            continue
        _kill_netns_pids(ns)
        run(["ip", "netns", "del", ns], timeout=10, check=False)
        removed.append(ns)
    for key, pid in owners.items():
        if key.startswith(prefix + "-") and not (pid > 0 and _alive(pid)):
            (STATE_DIR / key).unlink(missing_ok=True)
    return removed


class Lab:
    def __init__(self, prefix: str = PREFIX) -> None:
        if not prefix.isalnum():
            raise ValueError("the prefix is letters and digits (namespace names are prefix-labid-name)")
        clean_stale(prefix)
        self.key = f"{prefix}-{secrets.token_hex(3)}"
        self.peers: dict[str, Peer] = {}
        self.routers: dict[str, Router] = {}
        self.procs: list[subprocess.Popen] = []
        self._namespaces: list[str] = []
        self._closed = False
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / self.key).write_text(str(os.getpid()))  # before any namespace: never stale while we live
        atexit.register(self.close)
        try:
            self.core = self._netns("core")
            self._ip(self.core, "link", "add", "br0", "type", "bridge")
            self._ip(self.core, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    # ---- building ---------------------------------------------------------------------------

    def add_nat(self, name: str) -> Router:
        """A router namespace with a WAN leg on the bridge and a LAN bridge behind masquerade."""
        if name in self.routers or name in self.peers:
            raise ValueError(f"name {name!r} is taken")
        iptables = ensure_iptables()
        k = len(self.routers)
        router = Router(name, self._netns(name), f"{PUBLIC_NET}.{200 + k}", f"10.77.{10 + k}")
        self._ip(self.core, "link", "add", f"r{k}", "type", "veth", "peer", "name", "wan", "netns", router.ns)
        self._ip(self.core, "link", "set", f"r{k}", "master", "br0", "up")
        self._ip(router.ns, "addr", "add", f"{router.wan_ip}/24", "dev", "wan")
        self._ip(router.ns, "link", "set", "wan", "up")
        self._ip(router.ns, "link", "add", "lan", "type", "bridge")
        self._ip(router.ns, "addr", "add", f"{router.lan_net}.1/24", "dev", "lan")
        self._ip(router.ns, "link", "set", "lan", "up")
        self.exec(router.ns, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        replies = ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]
        masquerade = ["-s", f"{router.lan_net}.0/24", "-o", "wan", "-j", "MASQUERADE"]
        for rule in (["-t", "nat", "-A", "POSTROUTING", *masquerade],
                     ["-A", "FORWARD", "-i", "wan", *replies], ["-A", "FORWARD", "-i", "wan", "-j", "DROP"],
                     ["-A", "INPUT", "-i", "wan", *replies], ["-A", "INPUT", "-i", "wan", "-j", "DROP"]):
            self.exec(router.ns, [iptables, "-w", "5", *rule])
        self.routers[name] = router
        return router

    def add_peer(self, name: str, up_mbps: float | None = None, down_mbps: float | None = None,
                 nat: str | None = None) -> Peer:
        """A peer namespace: on the bridge (public) or behind router `nat`; shaped when rates are given."""
        if name in self.peers or name in self.routers:
            raise ValueError(f"name {name!r} is taken")
        ns = self._netns(name)
        i = len(self.peers)
        if nat is None:
            far_ns, far, ip, gateway = self.core, f"p{i}", f"{PUBLIC_NET}.{10 + i}", None
        else:
            router = self.routers[nat]
            j = len(router.peers)
            far_ns, far, ip, gateway = router.ns, f"l{j}", f"{router.lan_net}.{10 + j}", f"{router.lan_net}.1"
            router.peers.append(name)
        self._ip(far_ns, "link", "add", far, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._ip(far_ns, "link", "set", far, "master", "br0" if nat is None else "lan", "up")
        self._ip(ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        self._ip(ns, "link", "set", "eth0", "up")
        if gateway:
            self._ip(ns, "route", "add", "default", "via", gateway)
        if up_mbps:
            run(["tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", *tbf_args(up_mbps)])
        if down_mbps:
            run(["tc", "-n", far_ns, "qdisc", "add", "dev", far, "root", *tbf_args(down_mbps)])
        peer = Peer(name, ns, ip, nat)
        self.peers[name] = peer
        return peer

    # ---- running things inside --------------------------------------------------------------

    def exec(self, ns: str, argv: list[str], timeout: float = 10.0, check: bool = True) -> str:
        """Run a command inside namespace `ns` (bounded); its stdout."""
        return run(["ip", "netns", "exec", ns, *argv], timeout=timeout, check=check)

    def popen(self, peer: Peer, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        """Start `argv` inside the peer's namespace (`ip netns exec` execs it: the pid is the
        program's). The lab stops it at teardown if the caller has not."""
        proc = subprocess.Popen(["ip", "netns", "exec", peer.ns, *argv], **kwargs)
        self.procs.append(proc)
        return proc

    def call(self, peer: Peer | str, fn: Callable[..., Any], *args: Any, timeout: float = 60.0, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on a thread inside the peer's (or a namespace's) network namespace."""
        ns = peer.ns if isinstance(peer, Peer) else peer
        return in_netns(ns, fn, *args, timeout=timeout, **kwargs)

    # ---- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        stop_all(self.procs)
        for ns in reversed(self._namespaces):
            _kill_netns_pids(ns)
            run(["ip", "netns", "del", ns], timeout=10, check=False)
        (STATE_DIR / self.key).unlink(missing_ok=True)
        atexit.unregister(self.close)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals --------------------------------------------------------------------------

    def _netns(self, name: str) -> str:
        ns = f"{self.key}-{name}"
        run(["ip", "netns", "add", ns])
        self._namespaces.append(ns)
        self._ip(ns, "link", "set", "lo", "up")
        return ns

    def _ip(self, ns: str, *args: str) -> None:
        run(["ip", "-n", ns, *args])


# One way to stop processes by PID, bounded: node/procs.py's (also what `swarm-node local` uses).
stop_all = stop_processes


def _kill_netns_pids(ns: str) -> None:
    """SIGKILL whatever still runs inside one of the lab's namespaces (a stale lab's leftovers)."""
    out = run(["ip", "netns", "pids", ns], timeout=10, check=False)
    for word in out.split():
        if word.isdigit() and int(word) != os.getpid():
            _signal(int(word), signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
