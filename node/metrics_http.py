"""`GET /metrics` on 127.0.0.1:PORT, served by prometheus_client's WSGI app on a bounded thread server.

Why loopback only: peer ids, topics and counts are an operator's business; a scraper on another
host goes through SSH or a local agent. Why bounded: prometheus_client's own server starts a thread
per connection and never times a client out, so many scrapers (or one slow one per socket) make the
node hold as many threads. Here at most `max_active` requests are served at once, each with a
socket timeout; a connection beyond that gets `503` at once and is closed; the kernel's accept
queue (`request_queue_size`) bounds the rest. A scrape reads one snapshot from the node's trio loop
(`trio.from_thread.run`); scrapes within `SNAPSHOT_TTL` of each other share it.
"""

from __future__ import annotations

import threading
import time
from socketserver import TCPServer, ThreadingMixIn
from typing import Awaitable, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app

from node.metrics import node_registry

MAX_ACTIVE = 4  # requests served at once
REQUEST_TIMEOUT = 5.0  # seconds a client may take to send its request or read the answer
SNAPSHOT_TTL = 0.5  # seconds a snapshot serves further scrapes
BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 32\r\n"
        b"Connection: close\r\nRetry-After: 1\r\n\r\ntoo many scrapes at once; retry\n")


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT  # StreamRequestHandler sets it on the socket: a slow client is dropped

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's signature
        pass  # no line per scrape on stderr


class BoundedWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a request thread never keeps the process alive
    request_queue_size = 64  # listen backlog: connections the kernel holds until accepted (then 503 or served)

    def __init__(self, address: tuple[str, int], max_active: int = MAX_ACTIVE,
                 timeout: float = REQUEST_TIMEOUT) -> None:
        self._slots = threading.BoundedSemaphore(max_active)
        self.refused = 0  # connections answered 503 because every slot was taken
        handler = type("Handler", (_Handler,), {"timeout": timeout})
        super().__init__(address, handler)

    def server_bind(self) -> None:
        """HTTPServer's, less its `socket.getfqdn` (a reverse DNS lookup, on the node's loop at start)."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[0], self.server_address[1]
        self.setup_environ()

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.settimeout(1.0)
                request.sendall(BUSY)
                request.setblocking(False)
                request.recv(65536)  # the request line already here: closing on unread data would reset
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the request's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _SharedSnapshot:
    """The node's snapshot, fetched from its trio loop at most once per `ttl` however many scrape."""

    def __init__(self, fetch: Callable[[], dict], ttl: float = SNAPSHOT_TTL) -> None:
        self._fetch, self._ttl = fetch, ttl
        self._lock = threading.Lock()
        self._at, self._snap = -float("inf"), {}

    def __call__(self) -> dict:
        with self._lock:
            if time.monotonic() - self._at > self._ttl:
                self._snap, self._at = self._fetch(), time.monotonic()
            return self._snap


class NodeUnavailable(Exception):
    """The node's loop could not answer (it is stopping)."""


def metrics_app(get_snapshot: Callable[[], dict]):
    """The WSGI app: prometheus_client's exposition (content negotiation, gzip) at /metrics and /."""
    inner = make_wsgi_app(node_registry(get_snapshot))

    def app(environ, start_response):
        if environ.get("PATH_INFO") not in ("/metrics", "/") or environ.get("REQUEST_METHOD") != "GET":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"GET /metrics\n"]
        try:
            return inner(environ, start_response)
        except NodeUnavailable:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"the node is stopping\n"]
    return app


async def serve_metrics(port: int, get_snapshot: Callable[[], Awaitable[dict]], *, max_active: int = MAX_ACTIVE,
                        timeout: float = REQUEST_TIMEOUT, task_status) -> None:
    """Serve until cancelled; `get_snapshot` is the node's async status call. Reports the bound port."""
    import trio

    token = trio.lowlevel.current_trio_token()

    def fetch() -> dict:
        try:
            return trio.from_thread.run(get_snapshot, trio_token=token)
        except (trio.RunFinishedError, trio.Cancelled) as exc:
            raise NodeUnavailable() from exc

    server = BoundedWSGIServer(("127.0.0.1", port), max_active, timeout)
    server.set_app(metrics_app(_SharedSnapshot(fetch)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name=f"metrics:{port}", daemon=True)
    thread.start()
    try:
        task_status.started(server.server_address[1])
        await trio.sleep_forever()
    finally:
        server.shutdown()  # the accept loop notices within poll_interval; request threads are daemons
        server.server_close()
