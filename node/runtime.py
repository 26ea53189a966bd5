"""One peer: a libp2p host, the sans-IO core, the control API, all in one trio nursery.

    await nursery.start(run_node, config)   # returns the listen multiaddrs once reachable

Stops when its cancel scope is cancelled (SIGINT/SIGTERM in the CLI) or on the control API's `stop`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio

from node import control
from node.blobstore import BlobStore
from node.config import RELEASE_ENV, NodeConfig
from node.diskwatch import CHECK_EVERY, DiskWatch
from node.driver import CoreDriver
from node.keystore import load_or_create_identity
from node.log import EventLog
from node.records import Records
from node.shardstore import ShardDir
from node.p2p import HostConfig, ReachConfig, RelayLimits, RequestError, open_host
from node.taskfile import TaskFileError, task_from_dict
from swarm import protocols
from swarm.core import CoreConfig, PeerCore
from swarm.io import Started
from swarm.membership import MembershipConfig
from swarm.rng import stable_seed
from trainer.fsutil import write_atomic

PEERS_FILE = "peers.json"  # where we last found peers: a restarted node rejoins without --join
QUIET_EVENTS = frozenset({"message-rejected", "request-failed"})


async def run_node(cfg: NodeConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    log = EventLog(cfg.log_format, quiet=QUIET_EVENTS)
    identity = load_or_create_identity(cfg.data_dir)
    core = PeerCore(identity, CoreConfig(
        roles=cfg.roles, release=os.environ.get(RELEASE_ENV, "current"),
        membership=MembershipConfig(heartbeat_interval=cfg.heartbeat_interval, gone_after=cfg.gone_after,
                                    target_connections=cfg.target_connections)),
        seed=stable_seed("peer", identity.public_key))
    blobs = BlobStore(Path(cfg.data_dir) / "blobs")
    async with open_host(_host_config(cfg, identity.seed)) as host:
        async with trio.open_nursery() as nursery:
            driver = CoreDriver(core, host, nursery, log, blobs=blobs, records=Records(cfg.data_dir),
                                shards=ShardDir(Path(cfg.data_dir) / "shards"))
            driver.disk = DiskWatch(cfg.data_dir, int(cfg.min_free_mb * (1 << 20)))
            driver.disk_changed(driver.disk.check())
            if {"worker", "trainer", "validator"} & set(cfg.roles):
                from node.jobrunner import JobRunner  # torch lives in the job process, not here
                runner = JobRunner(Path(cfg.data_dir) / "blobs", Path(cfg.data_dir) / "state", driver.job_finished,
                                   malicious=cfg.malicious, threads=cfg.job_threads, device=cfg.job_device,
                                   inference=cfg.inference, log=log)
                await nursery.start(runner.run)
                driver.job_runner = runner
                if "trainer" in cfg.roles:
                    # The trainer's checks get a job process of their own: one train job and the
                    # verify jobs for the next step then use both cores instead of queueing in one
                    # (bench/learning.py: the trainer's job process is the swarm's critical path).
                    checks = JobRunner(Path(cfg.data_dir) / "blobs", Path(cfg.data_dir) / "state", driver.job_finished,
                                       malicious=cfg.malicious, device=cfg.job_device)
                    checks.seconds = runner.seconds  # job durations by kind, one histogram per kind
                    await nursery.start(checks.run)
                    driver.check_runner = checks
            if cfg.upload_mbps is not None:
                from node.uplink import Uplink
                driver.uplink = Uplink(cfg.upload_mbps)
            host.set_validator(driver.validate)
            host.on_peer_event(driver.on_peer_event)
            host.on_penalty(driver.on_penalty)
            # Peers in the address book (alive in membership, task peers among them) keep reserved
            # inbound slots and are never trimmed (node/p2p/conngate.py).
            host.set_known_peers(core.membership.alive_peers)
            host.set_request_handler(protocols.SYNC, lambda peer, data: driver.handle_request(protocols.SYNC, peer, data))
            host.set_request_handler(protocols.BLOB, _blob_handler(driver, blobs))
            host.set_request_handler(protocols.SHARD, lambda peer, data: driver.handle_request(protocols.SHARD, peer, data))
            host.set_request_handler(protocols.CHECK, lambda peer, data: driver.handle_request(protocols.CHECK, peer, data),
                                     max_request_bytes=protocols.CHECK_REQUEST_CAP)
            host.set_request_handler(protocols.PING, lambda peer, data: driver.handle_request(protocols.PING, peer, data),
                                     max_request_bytes=protocols.PING_REQUEST_CAP)
            nursery.start_soon(driver.publisher)
            addrs = host.listen_addrs()
            driver.feed(Started(tuple(addrs)))
            # A NATed node's advertised addresses change once it learns it is private and reserves
            # relay slots (node/p2p/nat.py): later heartbeats carry the circuit addresses first.
            host.on_addrs_changed(lambda new: setattr(core, "listen_addrs", tuple(new)))
            nursery.start_soon(driver.timer_loop)
            stop = trio.Event()
            handler = _control_handler(cfg, driver, host, stop)
            await nursery.start(control.serve_control, cfg.data_dir, handler)
            if cfg.metrics_port is not None:  # opt-in, 127.0.0.1 only: the same snapshot as `status`
                from node.metrics_http import serve_metrics
                await nursery.start(serve_metrics, cfg.metrics_port, lambda: handler("status", {}))
            nursery.start_soon(_keep_joined, cfg, driver, host)
            nursery.start_soon(_remember_peers, cfg, driver)
            nursery.start_soon(_watch_disk, driver)
            log("started", peer=identity.peer_id, addrs=" ".join(addrs), roles=",".join(cfg.roles),
                **({"malicious": cfg.malicious} if cfg.malicious else {}))
            task_status.started(addrs)
            await stop.wait()
            nursery.cancel_scope.cancel()


def _host_config(cfg: NodeConfig, seed: bytes) -> HostConfig:
    mb = 1 << 20
    limits = RelayLimits(max_reservations=cfg.relay_max_reservations,
                         max_reservations_per_ip=min(4, cfg.relay_max_reservations),
                         max_reservations_per_subnet=min(16, cfg.relay_max_reservations),
                         max_circuits=cfg.relay_max_circuits,
                         max_circuits_per_peer=min(4, cfg.relay_max_circuits),
                         circuit_seconds=cfg.relay_circuit_seconds, circuit_bytes=int(cfg.relay_circuit_mb * mb),
                         reservation_bytes=int(cfg.relay_reservation_mb * mb))
    return HostConfig(seed=seed, listen_host=cfg.host, port=cfg.port, nat=True, relay_service=cfg.relay_service,
                      relay_limits=limits, announce_addrs=tuple(cfg.announce), quic=cfg.quic,
                      reach=ReachConfig(enabled=cfg.reachability))


def _blob_handler(driver: CoreDriver, blobs: BlobStore):
    async def serve(peer: str, data: bytes) -> bytes:
        if driver.core.is_banned(peer):
            raise RequestError("banned")
        blob = blobs.get(bytes(data)) if len(data) == 32 else None
        if blob is None:
            raise RequestError("not-found")
        return blob
    return serve


def _control_handler(cfg: NodeConfig, driver: CoreDriver, host, stop: trio.Event):
    async def handle(cmd: str, args: dict):
        if cmd == "status":
            snap = driver.core.snapshot(driver.now())
            snap["pid"] = os.getpid()
            snap["data_dir"] = str(cfg.data_dir)
            snap["host"] = {"connected": sorted(host.connected_peers()), "stats": host.stats.snapshot(),
                            "driver": dict(driver.counters),
                            "request_seconds": {p: h.snapshot() for p, h in sorted(driver.request_seconds.items())}}
            runner = driver.job_runner  # a trainer's check runner shares its `seconds` (run_node)
            snap["jobs"] = {"seconds": {k: h.snapshot() for k, h in sorted((runner.seconds if runner else {}).items())},
                            "current": runner.status() if runner else None}
            snap["reachability"] = host.reachability()
            snap["disk"] = driver.disk.snapshot()
            return snap
        if cmd == "latency":
            return driver.core.stats.latency_samples()
        if cmd == "announce-task":
            # `created_at` (optional): the time of an earlier announcement, so that announcing the same
            # table again gives the same signed task and task id (swarm-node local resuming a run)
            created_at = args.get("created_at")
            if created_at is not None and (isinstance(created_at, bool) or not isinstance(created_at, (int, float))):
                raise control.ControlError("announce-task: created_at must be seconds since the epoch")
            try:
                task = task_from_dict(args.get("task") or {}, driver.core.identity,
                                      driver.now() if created_at is None else float(created_at))
            except TaskFileError as exc:
                raise control.ControlError(str(exc)) from None
            return _result(await driver.command("announce-task", {"task": task}))
        if cmd == "probe":
            return _result(await driver.command("probe", {"size": int(args.get("size", 1024))}))
        if cmd == "publish-version":  # a version whose shards are already in <data-dir>/shards (bench/weights.py)
            try:
                manifest = _manifest_from_json(args.get("manifest") or {})
            except (KeyError, TypeError, ValueError) as exc:
                raise control.ControlError(f"publish-version: bad manifest ({exc})") from None
            return _result(await driver.command("publish-version", {"manifest": manifest}))
        if cmd == "stop":
            stop.set()
            return {"stopping": True}
        raise control.ControlError(f"unknown command {cmd!r} (status, announce-task, probe, stop)")
    return handle


def _manifest_from_json(m: dict) -> dict:
    """WeightManifest fields from JSON (hashes as hex)."""
    out = dict(m)
    for key in ("root", "parent_root"):
        out[key] = bytes.fromhex(out.get(key) or "")
    out["shard_hashes"] = tuple(bytes.fromhex(h) for h in out["shard_hashes"])
    out["piece_hashes"] = tuple(bytes.fromhex(h) for h in out.get("piece_hashes", ()))
    out["tensors"] = tuple((t[0], t[1], tuple(t[2]), bytes.fromhex(t[3])) for t in out.get("tensors", ()))
    return out


def _result(result):
    if not result.ok:
        raise control.ControlError(result.error)
    return result.result


async def _keep_joined(cfg: NodeConfig, driver: CoreDriver, host) -> None:
    """Dial the join addresses (and peers remembered from the last run) while we have no peers.

    Once connected, peer exchange in the core keeps us connected; this only brings a node back
    when it lost every link (it started before the bootstrap, or the network healed)."""
    delay = 0.5
    while True:
        if not host.connected_peers():
            for addr in list(cfg.join) + _remembered_addrs(cfg):
                try:
                    await host.connect(addr)
                    driver.log("joined", addr=addr)
                    break
                except Exception as exc:  # DialError, bad multiaddr: keep trying the others
                    driver.log("join-failed", addr=addr, error=str(exc)[:120])
            delay = min(delay * 2, 10.0)
        else:
            delay = 2.0
        await trio.sleep(delay)


def _remembered_addrs(cfg: NodeConfig) -> list[str]:
    try:
        return [str(a) for a in json.loads((Path(cfg.data_dir) / PEERS_FILE).read_text())][:16]
    except (OSError, ValueError, TypeError):
        return []


async def _remember_peers(cfg: NodeConfig, driver: CoreDriver) -> None:
    while True:
        await trio.sleep(5)
        addrs = [f"{info.addrs[0]}/p2p/{pid}" if not info.addrs[0].endswith(pid) else info.addrs[0]
                 for pid, info in sorted(driver.core.membership.peers.items()) if info.state == "alive" and info.addrs]
        if addrs and driver.disk.ok:
            try:
                write_atomic(Path(cfg.data_dir) / PEERS_FILE, json.dumps(addrs[:16]).encode(), point="peers-json")
            except OSError as exc:
                driver.write_failed(exc, PEERS_FILE)


async def _watch_disk(driver: CoreDriver) -> None:
    """The data dir's free space, and whether it takes writes again (node/diskwatch.py)."""
    while True:
        await trio.sleep(CHECK_EVERY)
        driver.disk_changed(await trio.to_thread.run_sync(driver.disk.check))
