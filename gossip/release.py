"""What a release of the protocol speaks, and how peers of different releases treat each other.

A release is a protocol version `major.minor` and a set of capabilities, announced in every status
heartbeat (`StatusHeartbeat.proto_major`, `proto_minor`, `caps`). The rules (docs/protocol.md §10):

- A minor release may add optional fields at the end of a body (older peers ignore them, newer ones
  fill in defaults when an older peer leaves them out), new message kinds on topics of their own
  (older peers never subscribe, so gossipsub never sends them there) and capabilities. A kind it adds
  is named like the capability that brings it.
- An unknown kind is ignored and counted (`newer-kind`, no penalty) from a signer that announced a
  newer minor of our major or a capability of that name; from anyone else it is `unknown-kind`.
- Another major is another protocol (envelope `v`, topics `swarm/<major>/...`): its messages are
  refused as `other-major`, never penalised.

`NEXT` is a simulated next minor release (1.1): it adds the `uptime` kind on its own topic and an
`uptime` field to the heartbeat. It exists so that tests run two releases side by side (the simulator's
`PeerGroup.release`, the node's `SWARM_RELEASE` environment variable); no real feature depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping

from gossip.envelope import VERSION
from gossip.errors import OTHER_MAJOR, Rejected
from gossip.messages import MAX_TIME, MESSAGE_KINDS, Message, StatusHeartbeat
from gossip.schema import f


@dataclass(frozen=True)
class Announced:
    """What a peer's last heartbeat said it speaks (1.0 and nothing else when it said nothing)."""

    major: int = VERSION
    minor: int = 0
    caps: tuple[str, ...] = ()

    @classmethod
    def of(cls, beat: StatusHeartbeat) -> "Announced":
        return cls(beat.proto_major, beat.proto_minor, beat.caps)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}" + (f" [{', '.join(self.caps)}]" if self.caps else "")


@dataclass(frozen=True)
class Release:
    """One release: what it announces, the kinds it decodes, the topics it adds; `CoreConfig.release`
    names the one a peer speaks."""

    name: str
    major: int
    minor: int
    caps: tuple[str, ...]
    kinds: Mapping[str, type[Message]]  # every kind this release decodes
    topics: Mapping[str, tuple[str, ...]]  # global topics this release adds -> the kinds allowed there

    def __deepcopy__(self, memo: dict) -> "Release":
        return self  # one immutable object per release (its mapping proxies cannot be copied anyway)

    @property
    def announced(self) -> Announced:
        return Announced(self.major, self.minor, self.caps)

    def heartbeat(self, uptime: float, **fields) -> StatusHeartbeat:
        """Our heartbeat, in this release's form."""
        cls = self.kinds[StatusHeartbeat.KIND]
        extra = {"uptime": round(max(0.0, uptime), 3)} if "uptime" in self.caps else {}
        return cls(proto_major=self.major, proto_minor=self.minor, caps=self.caps, **fields, **extra)

    def extras(self, now: float, uptime: float) -> list[tuple[str, Message]]:
        """(topic, message) this release publishes beside each heartbeat: its new kinds, on its topics."""
        if UPTIME not in self.caps:
            return []
        return [(UPTIME_TOPIC, UptimeReport(sent_at=now, uptime=round(max(0.0, uptime), 3)))]

    def unknown_kind_is_newer(self, kind: str, theirs: Announced | None) -> bool:
        """True when an unknown `kind` signed by a peer that announced `theirs` is a newer release's
        message (ignored, counted) rather than garbage (penalised). Someone who never announced anything
        newer than us is held to what we speak."""
        return theirs is not None and theirs.major == self.major and (theirs.minor > self.minor or kind in theirs.caps)

    def check_major(self, theirs: Announced) -> None:
        if theirs.major != self.major:
            raise Rejected(OTHER_MAJOR, f"peer speaks {theirs}, this peer {self.announced}: another protocol")

    def missing(self, required: tuple[str, ...]) -> tuple[str, ...]:
        """The capabilities of `required` this release lacks."""
        return tuple(c for c in required if c not in self.caps)


# ---- the simulated next release (1.1)

UPTIME = "uptime"  # its capability, its kind's name, and its topic's last part
UPTIME_TOPIC = f"swarm/{VERSION}/{UPTIME}"


@dataclass(frozen=True)
class StatusHeartbeatNext(StatusHeartbeat):
    """1.1's heartbeat: one optional field more, at the end (older peers ignore it)."""

    uptime: float = f(min=0, max=MAX_TIME, default=0.0, optional=True)


@dataclass(frozen=True)
class UptimeReport(Message):
    """1.1's new kind: how long the sender has been up. Published on its own topic."""

    KIND: ClassVar[str] = UPTIME

    sent_at: float = f(min=0, max=MAX_TIME)
    uptime: float = f(min=0, max=MAX_TIME)


CURRENT = Release("current", VERSION, 0, (), MappingProxyType(dict(MESSAGE_KINDS)), MappingProxyType({}))
NEXT = Release("next", VERSION, 1, (UPTIME,),
               MappingProxyType({**MESSAGE_KINDS, StatusHeartbeat.KIND: StatusHeartbeatNext, UPTIME: UptimeReport}),
               MappingProxyType({UPTIME_TOPIC: (UPTIME,)}))
RELEASES = {r.name: r for r in (CURRENT, NEXT)}


def by_name(name: str) -> Release:
    release = RELEASES.get(name)
    if release is None:
        raise ValueError(f"unknown release {name!r}: one of {sorted(RELEASES)}")
    return release
