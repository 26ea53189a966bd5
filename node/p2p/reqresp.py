"""One request, one response per stream: ``varint len | request`` then ``varint len | response``.

Bulk bytes (rollout blobs, weight shards) travel here, never on gossip. Both sides cap frame sizes and
put deadlines on reads; any failure resets the stream, so the remote sees a reset rather than a hang.
There is no error frame: a handler that cannot answer raises, and the requester gets
``RequestError('reset')``. Application-level "not found" belongs inside the response bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .config import HostConfig, RequestError
from .budget import PenaltyBox, RequestSlots
from .connguard import remote_key
from .framing import FrameError, read_frame, read_payload, read_uvarint, write_frame
from .guard import StreamHandler, reset_quietly
from .stats import HostStats
from .subnet import subnet_of

logger = logging.getLogger(__name__)


class Reply:
    """A handler's answer plus `done()`, called once after the answer was written (or failed to be):
    a server that counts its uploads (the shard exchange's upload slots) learns when one really ends."""

    __slots__ = ("data", "done")

    def __init__(self, data: bytes, done: Callable[[], None]) -> None:
        self.data, self.done = data, done


RequestHandlerFn = Callable[[str, bytes], Awaitable["bytes | Reply"]]


def source_network(stream: INetStream, peer: str) -> str:
    """The network the stream's connection comes from (subnet.py); a connection without an IP address
    (none in practice) is its peer's own."""
    key = remote_key(stream.muxed_conn)
    return subnet_of(key[0]) if key else f"peer:{peer}"

# FrameError reasons seen by the requester, mapped to RequestError reasons.
_RESPONSE_REASONS = {"eof": "reset", "truncated": "truncated", "too_large": "too_large", "bad_varint": "malformed"}


def make_request_handler(
    protocol: str,
    fn: RequestHandlerFn,
    config: HostConfig,
    stats: HostStats,
    slots: RequestSlots,
    penalties: PenaltyBox,
    max_request_bytes: int | None = None,
) -> StreamHandler:
    """Build the inbound stream handler for ``protocol`` (the caller wraps it with the guard too).

    Budgets, each charged to the peer when abused: a slot out of its per-peer share, the frame's
    length prefix within ``request_idle_timeout``, a length within the protocol's cap, and the body
    within idle + length / min_request_rate (never more than ``request_read_timeout``).
    """
    cap = config.request_cap(protocol) if max_request_bytes is None else max_request_bytes

    async def handle(stream: INetStream) -> None:
        peer = str(stream.muxed_conn.peer_id)
        if penalties.is_blocked(peer):
            stats.requests_failed["blocked"] += 1
            await reset_quietly(stream)
            return
        subnet = source_network(stream, peer)
        refused = slots.try_acquire(peer, subnet)
        if refused is not None:
            # Refuse instead of queueing: a flood of requests must not pile up memory or tasks. Only a
            # peer over its own share is charged: a busy network may hold honest peers behind one NAT.
            stats.requests_failed[refused] += 1
            if refused == "peer_busy":
                penalties.charge(peer, "request_flood")
            await reset_quietly(stream)
            return
        try:
            await _serve(stream, peer)
        finally:
            slots.release(peer, subnet)

    async def _read_request(stream: INetStream, peer: str) -> bytes | None:
        reason = None
        try:
            with trio.fail_after(config.request_idle_timeout):
                length = await read_uvarint(stream)
            if length > cap:
                raise FrameError("too_large", f"{length} bytes > {cap} on {protocol}")
            body_timeout = min(config.request_read_timeout, config.request_idle_timeout + length / config.min_request_rate)
            reason = "slow"
            with trio.fail_after(body_timeout):
                return await read_payload(stream, length)
        except trio.TooSlowError:
            reason = reason or "idle"
        except FrameError as exc:
            reason = exc.reason
        stats.requests_failed[reason] += 1
        await reset_quietly(stream)
        if reason != "eof":  # a stream closed before a single byte costs us nothing worth charging
            penalties.charge(peer, f"request_{reason}")
        return None

    async def _serve(stream: INetStream, peer: str) -> None:
        request = await _read_request(stream, peer)
        if request is None:
            return
        stats.bytes_in[peer] += len(request)
        done: Callable[[], None] | None = None
        try:
            with trio.fail_after(config.request_handler_timeout):
                response = await fn(peer, request)
                if isinstance(response, Reply):
                    response, done = response.data, response.done
                if not isinstance(response, (bytes, bytearray, memoryview)):
                    raise TypeError(f"{protocol} handler returned {type(response).__name__}, not bytes")
                await write_frame(stream, bytes(response))
                await stream.close()
        except trio.TooSlowError:
            stats.requests_failed["handler_timeout"] += 1
            await reset_quietly(stream)
            return
        except Exception as exc:  # noqa: BLE001 - handler bugs and peer resets alike end in a reset
            stats.requests_failed["handler_error"] += 1
            logger.debug("%s handler failed for %s: %r", protocol, peer, exc)
            await reset_quietly(stream)
            return
        finally:
            if done is not None:
                done()
        stats.bytes_out[peer] += len(response)
        stats.requests_served += 1

    return handle


async def send_request(
    host: object,
    peer_id: str,
    protocol: str,
    data: bytes,
    timeout: float,
    max_response_bytes: int,
    stats: HostStats,
) -> bytes:
    """Open a stream to a connected peer, send one request frame, read one capped response frame."""
    try:
        peer = ID.from_base58(peer_id)
    except Exception as exc:
        raise RequestError("bad_peer_id", repr(peer_id)) from exc
    if not host.get_network().get_connections(peer):  # type: ignore[attr-defined]
        # Deliberately no implicit dial: after disconnect()/ban the node must not reconnect by accident.
        raise RequestError("not_connected", peer_id)
    stats.requests_sent += 1
    stream: INetStream | None = None
    try:
        with trio.fail_after(timeout):
            try:
                stream = await host.new_stream(peer, [TProtocol(protocol)])  # type: ignore[attr-defined]
            except Exception as exc:  # StreamFailure, SwarmException, ...
                raise RequestError("open_failed", f"{protocol} to {peer_id}: {exc}") from exc
            try:
                await write_frame(stream, data)
                response = await read_frame(stream, max_response_bytes)
            except FrameError as exc:
                raise RequestError(_RESPONSE_REASONS.get(exc.reason, exc.reason), str(exc)) from exc
            except Exception as exc:  # StreamReset/StreamClosed while writing
                raise RequestError("reset", repr(exc)) from exc
    except trio.TooSlowError:
        stats.request_errors["timeout"] += 1
        if stream is not None:
            await reset_quietly(stream)
        raise RequestError("timeout", f"{protocol} to {peer_id} after {timeout}s") from None
    except RequestError as exc:
        stats.request_errors[exc.reason] += 1
        if stream is not None:
            await reset_quietly(stream)
        raise
    stats.bytes_out[peer_id] += len(data)
    stats.bytes_in[peer_id] += len(response)
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.close()
        except Exception:
            pass
    return response
