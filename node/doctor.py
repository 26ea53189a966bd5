"""`swarm-node doctor`: is this machine ready to run a peer, and how is the running one doing?

Each check says ok, warn or fail, what it found, and what to do next; any fail makes the command
exit non-zero. Checks that need a running node (reachability, clock skew against its peers) ask it
through the control API (node/control.py) and say "not running" when none answers. torch is
imported only here, by its own check: `--help` and `--version` never load it.
"""

from __future__ import annotations

import platform
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from node.config import NodeConfig

OK, WARN, FAIL = "ok", "warn", "fail"
FREE_FAIL = 1 << 30  # bytes: a version's shards, blobs and a trainer checkpoint need more than this
FREE_WARN = 5 << 30
SKEW_WARN = 2.0  # seconds of heartbeat delay (delay plus clock skew) worth a warning
SETUP = "run `bash scripts/setup.sh` (or `pip install -e .`)"


@dataclass(frozen=True)
class Check:
    name: str
    level: str  # ok, warn, fail
    found: str
    next_step: str = ""

    def line(self) -> str:
        text = f"{self.level.upper():<4}  {self.name:<12} {self.found}"
        return text + (f"\n      -> {self.next_step}" if self.next_step else "")


def run_checks(cfg: NodeConfig) -> list[Check]:
    snap, why = running_status(cfg.data_dir)
    return [check_python(), check_torch(), check_toploc(), check_data_dir(Path(cfg.data_dir)),
            *check_ports(cfg, snap), check_node(snap, why), *check_peers(snap)]


def render(checks: list[Check]) -> str:
    fails = sum(c.level == FAIL for c in checks)
    warns = sum(c.level == WARN for c in checks)
    return "\n".join([c.line() for c in checks] + [f"{fails} failed, {warns} warnings, "
                                                   f"{len(checks) - fails - warns} ok"])


def check_python() -> Check:
    found = f"Python {platform.python_version()} ({sys.executable})"
    if sys.version_info[:2] != (3, 11):
        return Check("python", WARN, found, "swarm is built and tested on Python 3.11 (pyproject.toml)")
    return Check("python", OK, found)


def check_torch() -> Check:
    try:
        import torch
    except ImportError as exc:
        return Check("torch", FAIL, f"torch does not import ({exc})", SETUP)
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return Check("torch", OK, f"torch {torch.__version__}; CUDA visible: {names}")
    build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}, no GPU visible"
    return Check("torch", OK, f"torch {torch.__version__} ({build}); jobs run on the CPU",
                 "" if torch.version.cuda is None else "check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi)")


def check_toploc() -> Check:
    try:
        installed = version("toploc")
    except PackageNotFoundError:
        return Check("toploc", WARN, "toploc is not installed: no proofs, so this peer cannot check rollouts",
                     "pip install --no-build-isolation --no-binary toploc toploc==0.1.6 (scripts/setup.sh does)")
    try:
        import toploc  # noqa: F401 - a build against another torch fails here
    except Exception as exc:  # ImportError, or an undefined symbol from the extension
        return Check("toploc", FAIL, f"toploc {installed} does not import ({type(exc).__name__}: {exc})"[:300],
                     "rebuild it against this torch: pip install --force-reinstall --no-build-isolation "
                     f"--no-binary toploc toploc=={installed}")
    return Check("toploc", OK, f"toploc {installed}")


def check_data_dir(data_dir: Path) -> Check:
    """Writable (tried with a temporary file) and free space; a dir not made yet is judged by the
    nearest existing parent, where `start` would create it (doctor itself creates nothing)."""
    where = data_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check("data dir", FAIL, f"{where} is not writable ({exc.strerror or exc})",
                     "give --data-dir (or $SWARM_DATA_DIR) a directory this user can write")
    free = shutil.disk_usage(where).free
    made = "" if where == data_dir else f" (not made yet; {where} is)"
    found = f"{data_dir} writable{made}, {free / (1 << 30):.1f} GiB free"
    if free < FREE_FAIL:
        return Check("data dir", FAIL, found, "free some space or move --data-dir: versions and blobs need GiBs")
    if free < FREE_WARN:
        return Check("data dir", WARN, found, "long runs keep several versions' shards and blobs: give it 5 GiB+")
    return Check("data dir", OK, found)


def check_ports(cfg: NodeConfig, snap: dict | None) -> list[Check]:
    out = []
    for name, port in (("p2p port", cfg.port), ("metrics port", cfg.metrics_port)):
        if port is None:
            continue
        if port == 0:
            out.append(Check(name, OK, "0: the OS picks a free port at start"))
        elif snap is not None:
            out.append(Check(name, OK, f"{cfg.host}:{port} belongs to the running node (pid {snap.get('pid')})"))
        else:
            error = _bind_error(cfg.host, port)
            out.append(Check(name, OK, f"{cfg.host}:{port} is free") if error is None else
                       Check(name, FAIL, f"cannot listen on {cfg.host}:{port}: {error}",
                             f"stop what holds it (ss -ltnp 'sport = :{port}') or choose another port"))
    return out


def _bind_error(host: str, port: int) -> str | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the node's listeners do
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def running_status(data_dir: Path) -> tuple[dict | None, str]:
    from node.control import ControlError, call, control_path
    if not control_path(data_dir).exists():
        return None, "not running"
    try:
        return call(data_dir, "status", timeout=5), ""
    except ControlError as exc:
        return None, f"not running ({exc})"


def check_node(snap: dict | None, why: str) -> Check:
    if snap is None:
        return Check("node", OK, f"{why}: reachability and clock skew are checked against a running node")
    reach = (snap.get("reachability") or {}).get("status", "unknown")
    found = (f"running (pid {snap.get('pid')}), {len(snap.get('connected', []))} peers connected, "
             f"{len(snap.get('alive', []))} alive, reachability {reach}")
    if not snap.get("connected"):
        return Check("node", WARN, found, "no peer is connected: check --join and that the bootstrap is up")
    if reach == "private":
        return Check("node", WARN, found, "behind NAT: peers reach it through relays; forward the port, or give "
                                          "--announce with a public address, for direct links")
    return Check("node", OK, found)


def check_peers(snap: dict | None) -> list[Check]:
    """Clock skew: a heartbeat's delay is the link's latency plus the clock difference, so a large or
    negative one is a skewed clock; beyond the membership window (60 s behind, 30 s ahead) the peers'
    heartbeats are rejected as out-of-window."""
    if snap is None:
        return []
    stalls = check_stalls(snap)
    offsets = {p["peer_id"]: p["clock_offset_ms"] / 1000 for p in snap.get("peers", [])
               if p.get("state") == "alive" and p.get("clock_offset_ms") is not None}
    # after a stall of our own, late heartbeats are our backlog, not a skewed clock
    rejected = 0 if stalls else (snap.get("messages") or {}).get("rejected", {}).get("out-of-window", 0)
    return [_check_clock(offsets, rejected), *stalls]


def check_stalls(snap: dict) -> list[Check]:
    """The node's own pauses (swarm/stall.py): its timers fired over 5 s late."""
    seen = snap.get("stalls") or {}
    if not seen.get("stalls"):
        return []
    return [Check("stalls", WARN, f"this node was not running {seen['stalls']} time(s), the longest "
                                  f"{seen.get('longest_s', 0):.0f} s (its timers fired that late)",
                  "the machine is overloaded, swapping or was suspended: give the node a core of its own "
                  "(fewer --job-threads, other work niced) or more memory")]


def _check_clock(offsets: dict[str, float], rejected: int) -> Check:
    if not offsets:
        return Check("clock", OK if not rejected else WARN, f"no heartbeat timings yet; {rejected} out-of-window",
                     "" if not rejected else "sync this machine's clock (timedatectl set-ntp true)")
    worst = max(offsets, key=lambda p: abs(offsets[p]))
    found = (f"heartbeat delay from {len(offsets)} peers: worst {offsets[worst] * 1000:+.0f} ms ({worst[:16]}..), "
             f"{rejected} rejected as out-of-window")
    if abs(offsets[worst]) > SKEW_WARN or offsets[worst] < -0.05 or rejected:
        return Check("clock", WARN, found, "clocks differ: sync this machine (timedatectl set-ntp true) and ask "
                                           "that peer's operator to")
    return Check("clock", OK, found)


def main(cfg: NodeConfig) -> int:
    checks = run_checks(cfg)
    print(render(checks), flush=True)
    return 1 if any(c.level == FAIL for c in checks) else 0

