"""What goes into a `PeerCore` and what comes out: frozen events, no I/O.

The real runtime (`node/`) and the simulator (`simulator/`) both turn the outside world into these
inputs and carry out these effects; the core itself never touches a socket, a clock or a thread.
Peers are named by their libp2p peer id string throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Started:
    """The runtime is listening: these are our dialable addresses."""

    listen_addrs: tuple[str, ...]


@dataclass(frozen=True)
class MessageReceived:
    """A gossip message on `topic`, delivered to us by `from_peer` (the forwarder, not the signer), whose
    connection comes from the source network `from_net` (a /24 or IPv6 /48 as CIDR text; "" where the
    runtime cannot tell, as in the simulator: the forwarder is then its own network)."""

    topic: str
    data: bytes
    from_peer: str
    from_net: str = ""


@dataclass(frozen=True)
class RequestReceived:
    peer: str
    protocol: str
    request_id: int
    data: bytes


@dataclass(frozen=True)
class ResponseReceived:
    """The answer to our `SendRequest` with this id; `error` set when it failed or timed out. `from_net`:
    the answering peer's source network, as in `MessageReceived`."""

    peer: str
    protocol: str
    request_id: int
    data: bytes = b""
    error: str | None = None
    from_net: str = ""


@dataclass(frozen=True)
class PeerConnected:
    peer: str
    addrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PeerDisconnected:
    peer: str


@dataclass(frozen=True)
class DialFailed:
    """Our `Dial` could not connect; the core backs off before trying this peer again."""

    peer: str
    error: str = ""


@dataclass(frozen=True)
class Tick:
    """The time the core asked for (`next_deadline()`) has come. `heard`: (peer, when) for the linked peers
    the transport heard gossip frames from since the last tick, when it did not hand them to us (a copy of
    a message it had already, an IHAVE): a link busy with such traffic needs no ping (swarm/links.py)."""

    heard: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class JobFinished:
    job_id: int
    ok: bool
    result: Any = None
    error: str = ""


@dataclass(frozen=True)
class LocalCommand:
    """A request from the local operator (CLI, control API); answered with `CommandResult`."""

    command_id: int
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardsPresent:
    """The answer to `CheckShards`: which of the asked shard hashes the runtime's shard store holds."""

    root: bytes
    present: frozenset[bytes]


@dataclass(frozen=True)
class ShardSent:
    """The answer to `RespondShard(request_id)` has been sent (or failed): its upload slot is free."""

    request_id: int


@dataclass(frozen=True)
class StreamAbuse:
    """The transport caught `peer` abusing a stream budget (an idle or oversized request, a garbage
    frame): it never reaches the core as a message, so it is reported here to cost reputation."""

    peer: str
    reason: str


Input = (Started | MessageReceived | RequestReceived | ResponseReceived | PeerConnected | PeerDisconnected
         | DialFailed | Tick | JobFinished | LocalCommand | ShardsPresent | ShardSent | StreamAbuse)

# ---------------------------------------------------------------- effects


@dataclass(frozen=True)
class MessageVerdict:
    """Whether the `MessageReceived` just handled is valid: gossipsub forwards it only if accepted."""

    accepted: bool
    reason: str = ""


@dataclass(frozen=True)
class Publish:
    topic: str
    data: bytes


@dataclass(frozen=True)
class Subscribe:
    topic: str


@dataclass(frozen=True)
class Unsubscribe:
    topic: str


@dataclass(frozen=True)
class SendRequest:
    peer: str
    protocol: str
    request_id: int
    data: bytes
    timeout: float = 10.0


@dataclass(frozen=True)
class Respond:
    request_id: int
    data: bytes = b""
    error: str | None = None


@dataclass(frozen=True)
class Dial:
    peer: str
    addrs: tuple[str, ...]


@dataclass(frozen=True)
class Disconnect:
    peer: str
    reason: str


@dataclass(frozen=True)
class Ban:
    """Stop talking to `peer`: close its connections and refuse new ones."""

    peer: str
    reason: str


@dataclass(frozen=True)
class RunJob:
    """Blocking work (generate, verify, train, pack) for the runtime to run off the event loop."""

    job_id: int
    kind: str
    payload: Any


@dataclass(frozen=True)
class StoreBlob:
    """Keep these bytes (already checked against `digest`) where `/swarm/blob/1` serves them from."""

    digest: bytes
    data: bytes


@dataclass(frozen=True)
class DropBlobs:
    """Delete these blobs: weights of versions every role has released (the runtime also caps the
    blob store by bytes, oldest first; this keeps old versions from filling that cap)."""

    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class StoreShard:
    """Keep this weight shard: `parts` joined (its pieces, each checked against a signed manifest);
    the runtime checks the whole against `digest` before it writes, so a lying manifest stores nothing."""

    digest: bytes
    parts: tuple[bytes, ...]

    @property
    def data(self) -> bytes:
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


@dataclass(frozen=True)
class RespondShard:
    """Answer piece request `request_id` with `data` when given (a piece of a shard still being
    fetched, checked on arrival), else with `length` bytes at `offset` of the stored shard `shard`,
    re-hashed on read against `digest` (the piece's hash; missing or rotten: the error "not-found").
    A runtime that can tells the core when it is sent (`ShardSent`)."""

    request_id: int
    digest: bytes
    shard: bytes = b""
    offset: int = 0
    length: int = 0
    data: bytes | None = None


@dataclass(frozen=True)
class CheckShards:
    """Which of these shards of `root` are already stored? (a download resuming after a restart);
    the runtime answers with `ShardsPresent`."""

    root: bytes
    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class KeepShards:
    """Garbage-collect the shard store: delete shards not in `keep` (the runtime spares files
    younger than a grace period: a job may be writing a version the core has not heard of yet)."""

    keep: frozenset[bytes]


@dataclass(frozen=True)
class Emit:
    """Something an operator may want to see (logs, TUI, metrics)."""

    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommandResult:
    command_id: int
    ok: bool
    result: Any = None
    error: str = ""


Effect = (MessageVerdict | Publish | Subscribe | Unsubscribe | SendRequest | Respond | Dial | Disconnect | Ban
          | RunJob | StoreBlob | DropBlobs | StoreShard | RespondShard | CheckShards | KeepShards | Emit | CommandResult)

ALL_EFFECTS = (MessageVerdict, Publish, Subscribe, Unsubscribe, SendRequest, Respond, Dial, Disconnect, Ban, RunJob,
               StoreBlob, DropBlobs, StoreShard, RespondShard, CheckShards, KeepShards, Emit, CommandResult)
"""Every effect class: each runtime's dispatch table has a handler for each (tests/test_effect_handlers.py)."""
