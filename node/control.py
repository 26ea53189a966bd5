"""The local control API: `swarm-node status`, `task announce` and the TUI talk to a running node.

Loopback TCP only, on a port the OS picks, announced in `<data-dir>/control.json` (mode 0600)
together with a random token; a request without the token is refused. A data dir path can be too
long for a unix socket name, a loopback port cannot. One JSON line in, one JSON line out.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from trainer.fsutil import write_atomic

CONTROL_FILE = "control.json"
MAX_LINE = 1 << 20


class ControlError(Exception):
    pass


def control_path(data_dir: Path) -> Path:
    return Path(data_dir) / CONTROL_FILE


async def serve_control(data_dir: Path, handler: Callable[[str, dict], Awaitable[Any]], *, task_status) -> None:
    """Serve until cancelled. `handler(cmd, args)` returns JSON-able data or raises ControlError."""
    import trio

    token = secrets.token_hex(16)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    write_atomic(control_path(data_dir), json.dumps({"port": port, "token": token, "pid": os.getpid()}).encode(),
                 mode=0o600, point="control-json")

    async def serve_one(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                with trio.fail_after(10):
                    line = await _read_line(stream)
                request = json.loads(line)
                if not isinstance(request, dict) or request.get("token") != token:
                    raise ControlError("bad token")
                result = await handler(str(request.get("cmd")), dict(request.get("args") or {}))
                reply = {"ok": True, "result": result}
            except ControlError as exc:
                reply = {"ok": False, "error": str(exc)}
            except (ValueError, trio.TooSlowError) as exc:
                reply = {"ok": False, "error": f"bad request: {exc}"}
            try:
                await stream.send_all(json.dumps(reply, default=str).encode() + b"\n")
            except trio.BrokenResourceError:
                pass

    task_status.started(port)
    try:
        await trio.serve_listeners(serve_one, listeners)
    finally:
        try:
            control_path(data_dir).unlink()
        except FileNotFoundError:
            pass


async def _read_line(stream) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_LINE:
            raise ValueError("request too long")
    return buf.split(b"\n", 1)[0]


def call(data_dir: Path, cmd: str, args: dict | None = None, timeout: float = 10.0) -> Any:
    """Blocking client (no trio needed): used by the CLI and the launcher."""
    path = control_path(data_dir)
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise ControlError(f"no node is running with data dir {data_dir} (no {path}); "
                           f"start one with `swarm-node start --data-dir {data_dir} ...`") from None
    except (OSError, ValueError) as exc:
        raise ControlError(f"cannot read {path}: {exc}") from None
    request = json.dumps({"token": info.get("token"), "cmd": cmd, "args": args or {}}).encode() + b"\n"
    try:
        with socket.create_connection(("127.0.0.1", int(info["port"])), timeout=timeout) as sock:
            sock.sendall(request)
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
    except OSError as exc:
        raise ControlError(f"the node for {data_dir} is not answering ({exc}); is it still running "
                           f"(pid {info.get('pid')})?") from None
    try:
        reply = json.loads(buf)
    except ValueError:
        raise ControlError(f"the node for {data_dir} sent an unreadable reply") from None
    if not reply.get("ok"):
        raise ControlError(reply.get("error", "unknown error"))
    return reply.get("result")


def call_when_up(data_dir: Path, cmd: str, args: dict | None = None, attempts: int = 50, delay: float = 0.2) -> Any:
    """`call`, retried while the node is still starting (its control file or port not there yet)."""
    for i in range(attempts):
        try:
            return call(data_dir, cmd, args)
        except ControlError:
            if i == attempts - 1:
                raise
            time.sleep(delay)
