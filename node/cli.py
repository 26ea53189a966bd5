"""`swarm-node`: start peers, inspect them, announce tasks, run a local swarm.

Imports are deferred into each command so `--help` answers at once (no trio, libp2p or torch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_DATA_DIR = Path(os.environ.get("SWARM_DATA_DIR", Path.home() / ".swarm-node"))


def _data_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                   help=f"where the key, blobs and control file live (default {DEFAULT_DATA_DIR}, or $SWARM_DATA_DIR)")


class _VersionAction(argparse.Action):
    """`--version`: worked out only when asked, so building the parser (and `--help`) stays instant."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from node.metrics import build_versions  # importlib.metadata and gossip/release.py: no torch
        package, protocol = build_versions()
        print(f"swarm-node {package} (package swarm-rl {package}, gossip protocol {protocol}, "
              f"Python {sys.version.split()[0]})", flush=True)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarm-node", description="A peer of a coordinator-free RL training swarm.")
    parser.add_argument("--version", action=_VersionAction, help="print the package and protocol versions and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("keygen", help="create this node's Ed25519 identity (once)")
    _data_dir_arg(p)

    p = sub.add_parser("id", help="print this node's peer id")
    _data_dir_arg(p)
    p.add_argument("--json", action="store_true")

    from node.config_file import add_start_flags  # light: argparse, tomllib and pydantic only
    p = sub.add_parser("start", help="run a peer: --bootstrap starts a swarm, --join joins one")
    add_start_flags(p, DEFAULT_DATA_DIR)

    p = sub.add_parser("config", help="show the settings `start` would use")
    config_sub = p.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    c = config_sub.add_parser("show", help="print the resolved config: defaults < --config FILE < flags")
    add_start_flags(c, DEFAULT_DATA_DIR)
    c.add_argument("--format", choices=("toml", "json"), default="toml", dest="output_format")

    p = sub.add_parser("doctor", help="check this machine (Python, torch, CUDA, toploc, data dir, ports) and, if a "
                                      "node runs on the data dir, its peers and clock skew; non-zero exit on a failure")
    add_start_flags(p, DEFAULT_DATA_DIR)

    p = sub.add_parser("tui", help="watch running nodes in a terminal UI (one at a time; n/p switches)")
    p.add_argument("--data-dir", type=Path, action="append", default=[], dest="data_dirs",
                   help=f"a node's data dir (repeatable; default {DEFAULT_DATA_DIR})")
    p.add_argument("--base-dir", type=Path, default=None,
                   help="also watch every BASE/peer* data dir (what `swarm-node local --base-dir` made)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between status calls (default 1)")

    p = sub.add_parser("status", help="ask a running node for its state")
    _data_dir_arg(p)
    p.add_argument("--json", action="store_true", help="the full snapshot as JSON (for scripts)")

    p = sub.add_parser("task", help="work with tasks")
    task_sub = p.add_subparsers(dest="task_command", required=True, metavar="SUBCOMMAND")
    a = task_sub.add_parser("announce", help="sign a task file with this node's key and gossip it")
    a.add_argument("file", type=Path, nargs="?", help="task TOML (default: the built-in digit-sort example)")
    _data_dir_arg(a)

    p = sub.add_parser("local", help="run a multi-process swarm on 127.0.0.1")
    p.add_argument("--peers", type=int, default=4, help="number of peer processes (default 4)")
    p.add_argument("--trainers", type=int, default=1, metavar="K",
                   help="the first K peers run the trainer role; the task ranks them peer0 first (one active, "
                        "the others standbys that take over when it falls silent; default 1)")
    p.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    p.add_argument("--summary", type=Path, default=None, help="write a JSON summary here at the end")
    p.add_argument("--base-dir", type=Path, default=Path("runs/local"),
                   help="parent of the peers' data dirs (default runs/local; reused to resume)")
    p.add_argument("--task", type=Path, default=None, help="task TOML to announce (default: built-in example)")
    from node.config import NodeConfig
    node_fields = NodeConfig.model_fields  # the settings `local` passes to every peer: help and default as `start`
    p.add_argument("--heartbeat-interval", type=float, default=node_fields["heartbeat_interval"].default,
                   metavar="SECONDS", help=f"{node_fields['heartbeat_interval'].description} "
                                           f"(default {node_fields['heartbeat_interval'].default}, as `start`)")
    p.add_argument("--tui", action="store_true", help="watch the peers in the terminal UI (q stops the swarm)")
    p.add_argument("--malicious", action="append", default=[], metavar="K:KIND",
                   help="make K of the workers cheat as KIND (repeatable; e.g. 1:other-model, 1:lying-validator "
                        "runs a validator that the task trusts); the summary says who banned them")
    p.add_argument("--job-device", default=node_fields["job_device"].default, metavar="DEVICE",
                   help=f"every peer's setting: {node_fields['job_device'].description} "
                        f"(default {node_fields['job_device'].default})")
    p.add_argument("--metrics-port", type=int, default=None, metavar="BASE",
                   help="peer i serves Prometheus metrics on 127.0.0.1:BASE+i (default off)")
    p.add_argument("--restart-dead", action="store_true",
                   help="start a peer that dies again on its data dir (the others keep running either way)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"keygen": cmd_keygen, "id": cmd_id, "start": cmd_start, "status": cmd_status,
               "task": cmd_task, "local": cmd_local, "config": cmd_config, "tui": cmd_tui,
               "doctor": cmd_doctor}[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, code: int = 1) -> int:
    print(f"swarm-node: {message}", file=sys.stderr)
    return code


def cmd_keygen(args) -> int:
    from node.keystore import KeyFileError, create_identity
    try:
        identity = create_identity(args.data_dir)
    except KeyFileError as exc:
        return _fail(str(exc))
    print(identity.peer_id)
    return 0


def cmd_id(args) -> int:
    from node.keystore import KeyFileError, load_identity
    try:
        identity = load_identity(args.data_dir)
    except KeyFileError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps({"peer_id": identity.peer_id, "public_key": identity.public_key.hex()}))
    else:
        print(identity.peer_id)
    return 0


def cmd_start(args) -> int:
    from node.config_file import node_config, resolve
    from node.keystore import KeyFileError, load_or_create_identity
    from node.runtime import PEERS_FILE
    try:
        settings = resolve(vars(args), DEFAULT_DATA_DIR)
        cfg = node_config(settings)
    except ValueError as exc:  # ConfigError is a ValueError
        return _fail(str(exc), 2)
    if not cfg.bootstrap and not cfg.join and not (cfg.data_dir / PEERS_FILE).exists():
        return _fail("say --bootstrap to start a new swarm, or --join MULTIADDR to join one "
                     "(a node restarted with its data dir rejoins the peers it knew)", 2)
    try:
        load_or_create_identity(cfg.data_dir)  # a bad key file fails here, before anything starts
    except KeyFileError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(_unwritable(cfg.data_dir, exc))
    try:
        probe = cfg.data_dir / ".start-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return _fail(_unwritable(cfg.data_dir, exc))
    try:
        return _run_until_signal(cfg)
    except OSError as exc:
        return _fail(f"cannot listen on {cfg.host}:{cfg.port} (or metrics port {cfg.metrics_port}): {exc}")


def _unwritable(data_dir: Path, exc: OSError) -> str:
    return (f"the data dir {data_dir} cannot be written ({exc.strerror or exc}): the node keeps its key, control "
            "file, blobs and state there; make it writable (a read-only mount?) or pick another --data-dir")


def cmd_config(args) -> int:
    from node.config_file import node_config, render, resolve
    try:
        settings = resolve(vars(args), DEFAULT_DATA_DIR)
        node_config(settings)  # the same checks `start` makes
    except ValueError as exc:
        return _fail(str(exc), 2)
    print(render(settings, args.output_format))
    return 0


def cmd_doctor(args) -> int:
    from node.config_file import node_config, resolve
    try:
        cfg = node_config(resolve(vars(args), DEFAULT_DATA_DIR))  # the settings `start` would use
    except ValueError as exc:
        return _fail(str(exc), 2)
    from node.doctor import main as doctor
    return doctor(cfg)


def cmd_tui(args) -> int:
    dirs = list(args.data_dirs)
    if args.base_dir is not None:
        dirs += sorted(d for d in Path(args.base_dir).glob("peer*") if d.is_dir())
    if not dirs:
        dirs = [DEFAULT_DATA_DIR]
    if args.interval <= 0:
        return _fail("--interval must be positive", 2)
    from node.tui import run_tui  # textual is imported only here
    return run_tui(dirs, interval=args.interval)


def _run_until_signal(cfg) -> int:
    import signal

    import trio

    from node.runtime import run_node

    async def main_task() -> None:
        async with trio.open_nursery() as nursery:
            addrs = await nursery.start(run_node, cfg)
            print(f"listening {addrs[0]}", flush=True)

            async def stop_on_signal() -> None:
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return
            nursery.start_soon(stop_on_signal)
    try:
        trio.run(main_task)
    except BaseExceptionGroup as group:  # nurseries wrap errors; show the one that matters plainly
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], OSError):
            raise leaves[0] from None
        raise
    return 0


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out = []
    for exc in group.exceptions:
        out += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out


def cmd_status(args) -> int:
    from node.control import ControlError, call
    try:
        snap = call(args.data_dir, "status")
    except ControlError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(snap, indent=2, sort_keys=True))
    else:
        from node.status_text import render_status
        print(render_status(snap))
    return 0


def cmd_task(args) -> int:
    import tomllib

    from node.control import ControlError, call
    from node.taskfile import EXAMPLE, TaskFileError, fill_pins
    path = args.file or EXAMPLE
    try:
        table = fill_pins(tomllib.loads(path.read_text()), where=str(path))
    except FileNotFoundError:
        return _fail(f"{path}: no such file (the built-in example is {EXAMPLE})")
    except tomllib.TOMLDecodeError as exc:
        return _fail(f"{path}: not valid TOML: {exc}")
    except TaskFileError as exc:
        return _fail(str(exc))
    try:
        result = call(args.data_dir, "announce-task", {"task": table})
    except ControlError as exc:
        return _fail(str(exc))
    print(f"announced task {result['task_id']} from {path}")
    return 0


def cmd_local(args) -> int:
    from node.local import run_local
    if args.peers < 1:
        return _fail("--peers must be at least 1", 2)
    if args.trainers < 1 or (args.trainers > 1 and args.trainers >= args.peers):
        return _fail(f"--trainers {args.trainers}: give 1 to {max(1, args.peers - 1)} trainers for --peers "
                     f"{args.peers} (at least one peer must be a worker; raise --peers to {max(2, args.trainers + 1)} "
                     "for that many trainers)", 2)
    try:
        malicious = parse_malicious(args.malicious, args.peers, args.trainers)
    except ValueError as exc:
        return _fail(str(exc), 2)
    from node.config_file import ConfigError, check_value
    try:
        check_value("job_device", args.job_device, where="--job-device")  # as `start` checks it
    except ConfigError as exc:
        return _fail(str(exc), 2)
    if args.metrics_port is not None and not 1 <= args.metrics_port <= 65536 - args.peers:
        return _fail(f"--metrics-port {args.metrics_port}: give a port from 1 to {65536 - args.peers} "
                     f"(peer i listens on BASE+i)", 2)
    return run_local(peers=args.peers, duration=args.duration, summary=args.summary, base_dir=args.base_dir,
                     task_file=args.task, heartbeat=args.heartbeat_interval, malicious=malicious, tui=args.tui,
                     job_device=args.job_device, restart_dead=args.restart_dead, trainers=args.trainers,
                     metrics_port=args.metrics_port)


def parse_malicious(specs: list[str], peers: int, trainers: int = 1) -> list[str]:
    """['1:other-model', '2:replay'] -> one kind per malicious peer; at least one honest worker stays."""
    from swarm.jobs import MALICIOUS
    kinds: list[str] = []
    for spec in specs:
        count, _, kind = spec.partition(":")
        if not count.isdigit() or int(count) < 1 or kind not in MALICIOUS:
            raise ValueError(f"--malicious {spec!r}: expected K:KIND with K >= 1 and KIND one of {', '.join(MALICIOUS)}")
        kinds += [kind] * int(count)
    if kinds and len(kinds) > peers - trainers - 1:
        raise ValueError(f"--malicious asks for {len(kinds)} cheaters among {peers} peers: {trainers} trainer(s) "
                         "and at least one honest worker must remain")
    return kinds


if __name__ == "__main__":
    sys.exit(main())
