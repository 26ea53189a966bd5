"""Plain-socket checks of the lab's links: can A open a TCP connection to B, and how fast do bytes flow.

Each side runs on a thread inside its peer's namespace (netlab.tools.enter_netns), so no process is
started and nothing outlives the call: every socket has a timeout and every thread is joined with one.
"""

from __future__ import annotations

import socket
import threading
import time

from netlab.tools import LabError, enter_netns, in_netns


def can_connect(src_ns: str, ip: str, port: int, timeout: float = 2.0) -> bool:
    """Whether a TCP connection from namespace `src_ns` to ip:port is established within `timeout`."""
    def attempt() -> bool:
        try:
            with socket.create_connection((ip, port), timeout=timeout):
                return True
        except OSError:
            return False
    return in_netns(src_ns, attempt, timeout=timeout + 5)


class Listener:
    """A TCP listener in namespace `ns` that accepts and holds connections until closed
    (the far end of a `can_connect`)."""

    def __init__(self, ns: str, ip: str, port: int = 0) -> None:
        self.sock = in_netns(ns, socket.create_server, (ip, port), timeout=10)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.sources: list[str] = []  # the address each connection came from (a router's, through NAT)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.sources.append(addr[0])
            self._held.append(conn)

    def seen(self, count: int, timeout: float = 2.0) -> list[str]:
        """The sources once `count` connections were accepted (or after `timeout`): accepting runs
        on its own thread, a moment behind the dialler's connect."""
        deadline = time.monotonic() + timeout
        while len(self.sources) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.sources)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self.sock.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def transfer_mbps(src_ns: str, dst_ns: str, dst_ip: str, nbytes: int, timeout: float = 60.0) -> float:
    """Send `nbytes` over one TCP connection from `src_ns` to `dst_ns`; the rate the receiver saw,
    in Mbit/s, from its first byte to its last (the sender's socket buffer is not counted as sent)."""
    server = in_netns(dst_ns, socket.create_server, (dst_ip, 0), timeout=10)
    server.settimeout(timeout)
    port = server.getsockname()[1]
    result: dict[str, float] = {}

    def receive() -> None:
        try:
            conn, _ = server.accept()
        except OSError as exc:
            result["error"] = repr(exc)  # type: ignore[assignment]
            return
        with conn:
            conn.settimeout(timeout)
            got, first = 0, None
            try:
                while got < nbytes:
                    chunk = conn.recv(1 << 16)
                    if not chunk:
                        break
                    if first is None:
                        first = time.monotonic()
                    got += len(chunk)
            except OSError as exc:
                result["error"] = repr(exc)  # type: ignore[assignment]
            result["bytes"], result["seconds"] = got, time.monotonic() - (first or time.monotonic())

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()

    def send() -> None:
        with socket.create_connection((dst_ip, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            block = b"\x5a" * (1 << 16)
            left = nbytes
            while left > 0:
                sent = sock.send(block[:min(left, len(block))])
                left -= sent

    try:
        in_netns(src_ns, send, timeout=timeout + 5)
        receiver.join(timeout + 5)
    finally:
        server.close()
    if "error" in result or result.get("bytes") != nbytes or not result.get("seconds"):
        raise LabError(f"transfer of {nbytes} bytes failed: {result}")
    return nbytes * 8 / 1e6 / result["seconds"]
