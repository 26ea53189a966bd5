"""Bodies and envelopes across minor releases (gossip/release.py, docs/protocol.md §10): what a newer
release adds is ignored by this one, what it leaves out takes defaults, and absurd announcements are
refused with a reason that says what is wrong, never a crash."""

import msgpack
import pytest

from gossip.envelope import open_envelope, pack_envelope, seal, signed_bytes
from gossip.errors import Rejected, UnknownKind
from gossip.messages import StatusHeartbeat
from gossip.release import CURRENT, NEXT, UPTIME, Announced, StatusHeartbeatNext, UptimeReport
from tests.samples import ALICE, BOB, T0, all_messages


def beat(**fields) -> StatusHeartbeat:
    return StatusHeartbeat(**{**all_messages()[1].__dict__, **fields})


def resign(kind: str, body: dict | bytes, who=ALICE, v: int = 1) -> bytes:
    data = body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True)
    return pack_envelope(v, kind, data, who.public_key, who.sign(signed_bytes(v, kind, data)))


def test_a_plain_heartbeat_is_what_peers_before_versioning_sent():
    """1.0 with no capabilities leaves the new fields out: byte for byte the old body."""
    wire = beat().to_wire()
    assert list(wire)[-1] == "peers" and "proto_minor" not in wire
    assert open_envelope(seal(ALICE, beat()).wire).message.proto_minor == 0


def test_a_newer_heartbeat_is_read_by_this_release_and_an_older_one_by_the_newer():
    newer = NEXT.heartbeat(42.0, **{k: v for k, v in beat().__dict__.items() if k not in ("proto_major", "proto_minor", "caps")})
    assert isinstance(newer, StatusHeartbeatNext) and newer.uptime == 42.0
    signed = seal(ALICE, newer)
    mine = open_envelope(signed.wire, kinds=CURRENT.kinds)  # the uptime field is ignored
    assert type(mine.message) is StatusHeartbeat and Announced.of(mine.message) == NEXT.announced
    assert mine.msg_id == signed.msg_id and mine.message.body_bytes() == newer.body_bytes()
    older = open_envelope(seal(ALICE, beat()).wire, kinds=NEXT.kinds).message  # the field takes its default
    assert type(older) is StatusHeartbeatNext and older.uptime == 0.0


def test_unknown_fields_are_bounded_and_must_come_last_in_canonical_form():
    body = beat().to_wire()
    ok = {**body, "proto_major": 1, "proto_minor": 1, "caps": [], "a": 1, "b": "x"}
    assert open_envelope(resign("status", ok)).message.proto_minor == 1
    many = {**body, **{f"x{i}": i for i in range(9)}}
    with pytest.raises(Rejected, match="9 unknown keys") as err:
        open_envelope(resign("status", many))
    assert err.value.reason == "schema"
    with pytest.raises(Rejected, match="each 1..32 characters"):
        open_envelope(resign("status", {**body, "k" * 33: 1}))
    explicit_default = {**body, "proto_major": 1}  # the trailing default must be left out
    with pytest.raises(Rejected, match="canonical"):
        open_envelope(resign("status", explicit_default))
    skipped = {**body, "proto_minor": 1}  # an older field left out before a newer one
    with pytest.raises(Rejected, match="are not its fields"):
        open_envelope(resign("status", skipped))


@pytest.mark.parametrize("fields, says", [
    ({"caps": tuple(f"c{i}" for i in range(17))}, "17 items, at most 16"),
    ({"caps": ("x" * 33,)}, "length 33, at most 32"),
    ({"caps": ("Upper",)}, "is not a capability name"),
    ({"caps": ("b", "a")}, "sorted and distinct"),
    ({"caps": ("a", "a")}, "sorted and distinct"),
    ({"caps": ("",)}, "is not a capability name"),
    ({"proto_minor": 1 << 40}, "above the maximum"),
    ({"proto_major": -1}, "below the minimum"),
    ({"caps": "uptime"}, "expected a list"),
    ({"proto_minor": "1.1"}, "expected int"),
])
def test_absurd_announcements_are_refused_with_a_reason(fields, says):
    body = {**beat().to_wire(), "proto_major": 1, "proto_minor": 1, "caps": ["uptime"]}
    body.update({k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()})
    with pytest.raises(Rejected, match=says) as err:
        open_envelope(resign("status", body))
    assert err.value.reason == "schema"


def test_an_unknown_kind_is_verified_and_names_its_signer():
    report = UptimeReport(sent_at=T0, uptime=5.0)
    wire = seal(BOB, report).wire
    with pytest.raises(UnknownKind) as err:
        open_envelope(wire)  # this release does not know it: the decoder says who signed it
    assert err.value.reason == "unknown-kind" and err.value.signer == BOB.public_key and err.value.kind == UPTIME
    assert open_envelope(wire, kinds=NEXT.kinds).message == report
    forged = resign(UPTIME, report.body_bytes(), who=ALICE)[:-1] + b"\x00"  # a bad signature is still bad
    with pytest.raises(Rejected) as err:
        open_envelope(forged)
    assert err.value.reason == "bad-signature" and not isinstance(err.value, UnknownKind)


def test_another_major_is_refused_before_anything_else_is_read():
    with pytest.raises(Rejected) as err:
        open_envelope(resign("status", b"\xc1 not even msgpack", v=2))
    assert err.value.reason == "other-major" and "major 2" in err.value.detail


def test_rules_between_releases():
    assert NEXT.unknown_kind_is_newer("anything", Announced(1, 2))
    assert not CURRENT.unknown_kind_is_newer(UPTIME, None)  # never announced: held to what we speak
    assert not CURRENT.unknown_kind_is_newer(UPTIME, Announced(1, 0))
    assert CURRENT.unknown_kind_is_newer(UPTIME, Announced(1, 0, (UPTIME,)))  # the capability names the kind
    assert CURRENT.unknown_kind_is_newer(UPTIME, NEXT.announced)
    assert not CURRENT.unknown_kind_is_newer(UPTIME, Announced(2, 5))  # another major is another protocol
    with pytest.raises(Rejected) as err:
        CURRENT.check_major(Announced(2, 0))
    assert err.value.reason == "other-major"
    assert CURRENT.missing(("uptime", "x")) == ("uptime", "x") and NEXT.missing(("uptime",)) == ()
