"""Request/response streams on the virtual network, and the stores they serve from.

Each request and each answer is a bandwidth-sharing flow (simulator/flows.py) of its size plus
`STREAM_OVERHEAD`, then one one-way delay; a request times out after its `SendRequest.timeout`, and
fails when either side goes down or their link closes. Pings (`/swarm/ping/1`, swarm/links.py) are
the exception: a few hundred bytes on every quiet link every few seconds, they take the one-way delay
only and are not traced (what they decide, a `peer-gone`, is), so a quiet 1,000-peer swarm does not
spend its run solving flows for them; and a ping's timeout is scheduled only once its answer is not
on its way in time (a failed or closed one ends without it). Like node/runtime.py, the runtime serves
`/swarm/blob/1` itself from the peer's blob store; a shard answer is what `RespondShard` asks for
(swarm/shardwire.py: the piece handed over, else the stored one, else "not-found"), and the
server's core hears `ShardSent` once the upload ends, as node/driver.py tells it. The answer travels
as (bytes, error): its one framing byte on the real wire is part of the stream overhead here.
The data-dir effects (StoreBlob, DropBlobs, StoreShard, CheckShards, KeepShards) land in the peer's
virtual `NodeStore` (simulator/content.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.flows import Flow
from swarm import protocols, shardwire
from swarm.io import (CheckShards, DropBlobs, KeepShards, RequestReceived, Respond, RespondShard, ResponseReceived,
                      SendRequest, ShardSent, ShardsPresent, StoreBlob, StoreShard)

if TYPE_CHECKING:
    from simulator.sim import Node, Simulation

STREAM_OVERHEAD = 200  # bytes: stream open, protocol negotiation, framing


@dataclass(eq=False)
class Request:
    seq: int
    client: int
    client_inc: int
    server: int
    rid: int
    protocol: str
    data: bytes
    done: bool = False
    flow: Flow | None = None
    shard_rid: int = 0  # the server's RespondShard request id, until ShardSent tells its core the upload ended
    deadline: float = 0.0  # when it times out
    answered: bool = False  # a ping's answer is on its way


class Streams:
    """Every open request of the simulation, by sequence number (failed in that order)."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.requests: dict[int, Request] = {}
        self._request_seq = 0
        self._server_rid = 0

    def fail_where(self, match, why: str) -> None:
        """Fail every open request `match(req)` picks, oldest first."""
        requests = self.requests
        for seq in sorted(requests):
            req = requests[seq]
            if match(req):
                self.fail(req, why)

    # ---- the client's side

    def request(self, i: int, e: SendRequest) -> None:
        sim = self.sim
        j = sim.by_id.get(e.peer)
        self._request_seq += 1
        req = Request(self._request_seq, i, sim.nodes[i].incarnation, -1 if j is None else j, e.request_id,
                      e.protocol, e.data)
        if e.protocol != protocols.PING:
            sim.trace.record(sim.loop.now, i, "request", {"to": req.server, "proto": e.protocol,
                                                          "rid": e.request_id, "size": len(e.data)})
        if j is None or j not in sim.router.conns[i]:
            req.done = True
            sim.feed_later(0.0, i, ResponseReceived(e.peer, e.protocol, e.request_id, error="not connected"))
            return
        self.requests[req.seq] = req
        req.deadline = sim.loop.now + e.timeout
        if e.protocol == protocols.PING:
            # Its timeout is scheduled only if it can fire (`_request_arrives`, `_send_response`): nearly every
            # ping is answered at once, and a timeout per ping would be a no-op event for nearly all.
            sim.loop.after(sim.net.one_way(i, j), self._request_arrives, req)
            return
        req.flow = sim.flows.start(i, j, len(e.data) + STREAM_OVERHEAD, lambda fl, r=req: self._request_sent(r))
        sim.loop.at(req.deadline, self._timeout, req)

    def _request_sent(self, req: Request) -> None:
        req.flow = None
        self.sim.loop.after(self.sim.net.one_way(req.client, req.server), self._request_arrives, req)

    def _request_arrives(self, req: Request) -> None:
        if req.done:
            return
        sim = self.sim
        server = sim.nodes[req.server]
        if not server.up or req.client not in sim.router.conns[req.server]:
            self.fail(req, "connection closed")
            return
        self._server_rid += 1
        if req.protocol == protocols.BLOB:  # the runtime serves blobs from its store (node/runtime.py)
            self._serve_blob(server, req, self._server_rid)
            return
        server.served[self._server_rid] = req
        sim.feed(req.server, RequestReceived(sim.nodes[req.client].peer_id, req.protocol, self._server_rid, req.data))
        if req.protocol == protocols.PING and not req.done and not req.answered:
            sim.loop.at(req.deadline, self._timeout, req)  # not answered at once: it may yet time out

    # ---- the server's side

    def _serve_blob(self, server: "Node", req: Request, rid: int) -> None:
        sim = self.sim
        if server.core.is_banned(sim.nodes[req.client].peer_id):
            data, error = b"", "banned"
        else:
            digest = bytes(req.data)
            data = sim.content.data(digest) if len(digest) == 32 and server.store.has_blob(digest) else None
            data, error = (b"", "not-found") if data is None else (data, None)
        self._send_response(server.index, req, rid, data, error)

    def respond(self, j: int, e: Respond) -> None:
        req = self.sim.nodes[j].served.pop(e.request_id, None)
        self._send_response(j, req, e.request_id, e.data, e.error)

    def respond_shard(self, j: int, e: RespondShard) -> None:
        sim = self.sim
        node = sim.nodes[j]
        req = node.served.pop(e.request_id, None)
        store, content = node.store, sim.content
        data, error = shardwire.piece_answer(e, lambda shard, offset, length, digest: content.piece(
            shard, offset, length, digest) if store.has_shard(shard) else None)
        if node.behaviour is not None and data:
            data, error = node.behaviour.serve_shard(sim.actions, node, data)
        if req is not None and not req.done:
            req.shard_rid = e.request_id
        else:
            sim.feed_later(0.0, j, ShardSent(e.request_id))
        self._send_response(j, req, e.request_id, data, error)

    def _send_response(self, j: int, req: Request | None, rid: int, data: bytes, error: str | None) -> None:
        sim = self.sim
        if req is not None and req.protocol == protocols.PING:
            if not req.done:
                req.answered = True
                arrival = sim.loop.now + sim.net.one_way(j, req.client)
                if arrival >= req.deadline:
                    sim.loop.at(req.deadline, self._timeout, req)  # the answer comes too late
                sim.loop.at(arrival, self._response_arrives, req, data, error)
            return
        sim.trace.record(sim.loop.now, j, "respond", {"rid": rid, "size": len(data), "error": error or ""})
        if req is None or req.done:
            return
        req.flow = sim.flows.start(j, req.client, len(data) + STREAM_OVERHEAD,
                                   lambda fl, r=req, d=data, err=error: self._response_sent(r, d, err))

    def _shard_sent(self, req: Request) -> None:
        """The server's upload of a shard answer ended (sent, or its request failed): like node/driver.py,
        tell its core, whose upload slot is free again."""
        if req.shard_rid:
            rid, req.shard_rid = req.shard_rid, 0
            sim = self.sim
            if sim.nodes[req.server].up:
                sim.feed_later(0.0, req.server, ShardSent(rid))

    def _response_sent(self, req: Request, data: bytes, error: str | None) -> None:
        req.flow = None
        self._shard_sent(req)
        self.sim.loop.after(self.sim.net.one_way(req.server, req.client), self._response_arrives, req, data, error)

    def _response_arrives(self, req: Request, data: bytes, error: str | None) -> None:
        if req.done:
            return
        sim = self.sim
        if req.server not in sim.router.conns[req.client]:
            self.fail(req, "connection closed")
            return
        req.done = True
        self.requests.pop(req.seq, None)
        client = sim.nodes[req.client]
        if req.protocol != protocols.PING:
            sim.trace.record(sim.loop.now, req.client, "response", {"from": req.server, "rid": req.rid,
                                                                    "size": len(data), "error": error or ""})
        if client.up and client.incarnation == req.client_inc:
            sim.feed(req.client, ResponseReceived(sim.nodes[req.server].peer_id, req.protocol, req.rid, data, error))

    def _timeout(self, req: Request) -> None:
        self.fail(req, "timeout")

    def fail(self, req: Request, why: str) -> None:
        if req.done:
            return
        sim = self.sim
        req.done = True
        self.requests.pop(req.seq, None)
        if req.flow is not None:
            sim.flows.cancel(req.flow)
            req.flow = None
        self._shard_sent(req)
        client = sim.nodes[req.client]
        if req.protocol != protocols.PING:
            sim.trace.record(sim.loop.now, req.client, "response", {"from": req.server, "rid": req.rid,
                                                                    "size": 0, "error": why})
        if client.up and client.incarnation == req.client_inc:
            peer = sim.nodes[req.server].peer_id if req.server >= 0 else ""
            sim.feed_later(0.0, req.client, ResponseReceived(peer, req.protocol, req.rid, error=why))

    # ---- the blob and shard stores (node/driver.py's effects)

    def store_blob(self, i: int, e: StoreBlob) -> None:
        if self.sim.content.size(e.digest) == len(e.data):  # the core checked the hash; we know the content
            self.sim.nodes[i].store.add_blob(e.digest)

    def drop_blobs(self, i: int, e: DropBlobs) -> None:
        self.sim.nodes[i].store.drop_blobs(e.digests)

    def store_shard(self, i: int, e: StoreShard) -> None:
        self.sim.nodes[i].store.add_shard(e.digest, self.sim.loop.now)

    def check_shards(self, i: int, e: CheckShards) -> None:
        store = self.sim.nodes[i].store
        present = frozenset(d for d in e.digests if store.has_shard(d))
        self.sim.feed_later(0.0, i, ShardsPresent(e.root, present))

    def keep_shards(self, i: int, e: KeepShards) -> None:
        sim = self.sim
        dropped = sim.nodes[i].store.gc(e.keep, sim.loop.now)
        if dropped:
            sim.trace.record(sim.loop.now, i, "shards-gc", {"dropped": dropped})
