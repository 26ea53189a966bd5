import msgpack
import pytest

from gossip.envelope import MAX_ENVELOPE, open_envelope, seal
from gossip.errors import Rejected
from gossip.messages import MESSAGE_KINDS, ShardHave, StatusHeartbeat, TaskAnnouncement, WeightManifest
from tests.samples import ALICE, BOB, T0, all_messages, task


def test_every_kind_has_a_sample():
    assert {m.KIND for m in all_messages()} == set(MESSAGE_KINDS)


@pytest.mark.parametrize("message", all_messages(), ids=lambda m: m.KIND)
def test_round_trip(message):
    signed = seal(ALICE, message)
    opened = open_envelope(signed.wire)
    assert opened.message == message
    assert opened.signer == ALICE.public_key
    assert opened.msg_id == signed.msg_id
    assert type(opened.message).from_wire(message.to_wire()) == message


@pytest.mark.parametrize("message", all_messages(), ids=lambda m: m.KIND)
def test_every_byte_flip_is_rejected(message):
    wire = seal(ALICE, message).wire
    step = max(1, len(wire) // 300)  # large messages: a sample of positions
    for i in range(0, len(wire), step):
        tampered = bytearray(wire)
        tampered[i] ^= 0x01
        with pytest.raises(Rejected):
            open_envelope(bytes(tampered))


@pytest.mark.parametrize("message", all_messages(), ids=lambda m: m.KIND)
def test_signature_by_another_key_is_rejected(message):
    good = msgpack.unpackb(seal(ALICE, message).wire)
    good["signer"] = BOB.public_key
    with pytest.raises(Rejected) as err:
        open_envelope(msgpack.packb(good))
    assert err.value.reason == "bad-signature"


def test_kind_swap_is_rejected():
    env = msgpack.unpackb(seal(ALICE, all_messages()[1]).wire)
    env["kind"] = "probe"
    with pytest.raises(Rejected) as err:
        open_envelope(msgpack.packb(env))
    assert err.value.reason == "bad-signature"


@pytest.mark.parametrize("mutate, reason", [
    (lambda e: e.update(v=2), "other-major"),
    (lambda e: e.update(kind="nope"), "bad-signature"),  # an unknown kind is signed like any (test_release.py)
    (lambda e: e.update(kind="x" * 33), "unknown-kind"),
    (lambda e: e.pop("sig"), "malformed"),
    (lambda e: e.update(extra=1), "malformed"),
    (lambda e: e.update(sig=b"x" * 63), "malformed"),
    (lambda e: e.update(body="text"), "malformed"),
])
def test_envelope_shape_errors(mutate, reason):
    env = msgpack.unpackb(seal(ALICE, task()).wire)
    mutate(env)
    with pytest.raises(Rejected) as err:
        open_envelope(msgpack.packb(env))
    assert err.value.reason == reason


def test_unsigned_and_garbage_and_oversized():
    for data in (b"", b"\xc1", b"\x00" * 10, msgpack.packb([1, 2, 3]), msgpack.packb({"v": 1})):
        with pytest.raises(Rejected):
            open_envelope(data)
    with pytest.raises(Rejected) as err:
        open_envelope(b"\x00" * (MAX_ENVELOPE + 1))
    assert err.value.reason == "oversized"


def _resign(body_obj, kind="task"):
    """Sign a hand-made body, as a malicious peer with a valid key would."""
    from gossip.envelope import VERSION, pack_envelope, signed_bytes
    body = msgpack.packb(body_obj, use_bin_type=True)
    return pack_envelope(VERSION, kind, body, ALICE.public_key, ALICE.sign(signed_bytes(VERSION, kind, body)))


@pytest.mark.parametrize("field, value", [
    ("async_level", True),  # a bool is not an int
    ("async_level", 99),
    ("name", "x" * 65),
    ("name", "bad name!"),
    ("trainer_keys", [b"short"]),
    ("trainer_keys", []),
    ("created_at", float("nan")),
    ("params", {"k": [1, 2]}),
    ("expires_at", T0 - 1),
])
def test_signed_but_invalid_bodies_are_schema_errors(field, value):
    body = task().to_wire()
    body[field] = value
    with pytest.raises(Rejected) as err:
        open_envelope(_resign(body))
    assert err.value.reason == "schema"


def test_unknown_and_missing_body_keys():
    body = {"surprise": 1, **task().to_wire()}  # unknown keys come only after every known one (a newer minor's)
    with pytest.raises(Rejected, match="not its fields"):
        open_envelope(_resign(body))
    body = task().to_wire()
    del body["env"]
    with pytest.raises(Rejected, match=r"missing \['env'"):
        open_envelope(_resign(body))


def test_non_canonical_body_is_refused():
    body = task().to_wire()
    reordered = dict(reversed(list(body.items())))
    with pytest.raises(Rejected, match="are not its fields"):
        open_envelope(_resign(reordered))


def test_messages_are_frozen_and_validate_on_construction():
    t = task()
    with pytest.raises(Exception):
        t.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        StatusHeartbeat(seq=-1, sent_at=T0, interval=1.0, roles=(), agent="", listen_addrs=(), tasks=(), versions={}, known_peers=())
    with pytest.raises(ValueError):
        WeightManifest(task_id=t.task_id, version=1, parent_version=-1, parent_root=b"", encoding="delta",
                       dtype="bf16", root=bytes(32), shard_size=1, raw_size=0, compressed_size=0,
                       shard_hashes=(), tensors=(), created_at=T0)


def test_task_id_is_content_hash():
    assert task().task_id == task().task_id
    assert task().task_id != task(name="other").task_id
    assert len(task().task_id) == 16


def test_bitmap():
    have = ShardHave(task_id=task().task_id, root=bytes(32), version=1, bitmap=b"\x05", sent_at=T0)
    assert [have.holds(i) for i in range(9)] == [True, False, True, False, False, False, False, False, False]


def test_size_limits():
    big = task(params={f"k{i}": "x" * 256 for i in range(64)})
    assert len(big.body_bytes()) > 16 * 1024
    seal(ALICE, big)  # tasks may be up to 64 KiB
    with pytest.raises(Rejected):
        TaskAnnouncement.from_wire({**big.to_wire(), "params": {f"k{i}": "x" for i in range(65)}})
    from gossip.messages import PeerAddrs
    fat = StatusHeartbeat(seq=1, sent_at=T0, interval=1.0, roles=(), agent="", listen_addrs=("a" * 256,) * 8, tasks=(),
                          versions={}, known_peers=tuple(PeerAddrs("p" * 64, ("a" * 256,) * 4) for _ in range(16)))
    with pytest.raises(ValueError, match="at most"):
        seal(ALICE, fat)


@pytest.mark.parametrize("peers", [-1, (1 << 20) + 1, 1.5, True, "9"])
def test_heartbeat_swarm_size_is_validated(peers):
    from tests.samples import all_messages as messages
    beat = next(m for m in messages() if isinstance(m, StatusHeartbeat))
    with pytest.raises(Rejected, match="peers"):
        StatusHeartbeat.from_wire({**beat.to_wire(), "peers": peers})


def test_heartbeat_without_swarm_size_is_refused_with_a_reason():
    from tests.samples import all_messages as messages
    beat = next(m for m in messages() if isinstance(m, StatusHeartbeat))
    wire = beat.to_wire()
    del wire["peers"]
    with pytest.raises(Rejected, match="missing keys"):
        StatusHeartbeat.from_wire(wire)


def test_field_checkers_answer_as_the_general_check_does():
    """gossip/schema.py `field_checker`: the fast paths return a value exactly when `check_value` would
    return it unchanged, and anything else gets `check_value`'s own answer (the same normalised value or error)."""
    import math

    from gossip.schema import check_value, field_checker
    from gossip.messages import PeerAddrs

    cases = [
        (str, {"max": 4, "size": None}, ["abc", "abcde", b"ab", None, 3, "", "\u00e9\u00e9"]),
        (bytes, {"size": 2, "max": None}, [b"ab", b"a", "ab", bytearray(b"ab"), None]),
        (int, {"min": 0, "max": 10}, [0, 10, 11, -1, True, 3.0, 2**64, None, "1"]),
        (int, {"min": None, "max": None}, [-(2**63), -(2**63) - 1, 2**64 - 1, 2**64]),
        (float, {"min": 0.1, "max": 3600}, [0.1, 3600.0, 3600.5, 0.0, 2, True, math.inf, math.nan, None]),
        (int | None, {"min": 0, "max": None}, [None, 5, -5]),
        (tuple[str, ...], {"max": 2, "item_max": 3}, [("a", "b"), ["a"], ("abcd",), ("a", 1), ("a", "b", "c")]),
        (tuple[PeerAddrs, ...], {"max": 2}, [(PeerAddrs("p", ("/a",)),), [PeerAddrs("p", ())], ("p",)]),
    ]
    for hint, meta, values in cases:
        fast = field_checker(hint, meta, "X.f")
        for value in values:
            try:
                expected = ("ok", check_value(value, hint, meta, "X.f"))
            except (TypeError, ValueError) as exc:
                expected = ("error", str(exc))
            try:
                got = ("ok", fast(value))
            except (TypeError, ValueError) as exc:
                got = ("error", str(exc))
            assert got == expected, (hint, value, got, expected)
            if got[0] == "ok":
                assert type(got[1]) is type(expected[1]), (hint, value, got, expected)
