"""Hypothesis fuzzing: random structured input never crashes the decoder, only `Rejected`."""

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gossip.envelope import open_envelope, seal
from gossip.errors import Rejected
from gossip.messages import MESSAGE_KINDS, Probe, RolloutCommitment, StatusHeartbeat
from tests.samples import ALICE, T0, all_messages

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20)
    | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20)


def _opens_or_rejects(data: bytes) -> None:
    try:
        open_envelope(data)
    except Rejected as rej:
        assert rej.reason


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(data):
    _opens_or_rejects(data)


@FUZZ
@given(st.sampled_from(sorted(MESSAGE_KINDS)), msgpack_values)
def test_random_bodies_signed_by_a_valid_key(kind, body_obj):
    from gossip.envelope import VERSION, pack_envelope, signed_bytes
    body = msgpack.packb(body_obj, use_bin_type=True)
    wire = pack_envelope(VERSION, kind, body, ALICE.public_key, ALICE.sign(signed_bytes(VERSION, kind, body)))
    _opens_or_rejects(wire)


@FUZZ
@given(st.sampled_from(all_messages()), st.dictionaries(st.text(max_size=12), msgpack_values, max_size=3))
def test_sample_bodies_with_fields_replaced(message, replacements):
    from gossip.envelope import VERSION, pack_envelope, signed_bytes
    obj = message.to_wire()
    for key, value in replacements.items():
        target = key if key in obj else sorted(obj)[len(key) % len(obj)]
        obj[target] = value
    body = msgpack.packb(obj, use_bin_type=True)
    wire = pack_envelope(VERSION, message.KIND, body, ALICE.public_key,
                          ALICE.sign(signed_bytes(VERSION, message.KIND, body)))
    _opens_or_rejects(wire)


@FUZZ
@given(st.integers(0, 2**62), st.floats(0, 1e10), st.binary(max_size=4096))
def test_probe_round_trip(seq, sent_at, payload):
    probe = Probe(seq=seq, sent_at=sent_at, payload=payload)
    assert open_envelope(seal(ALICE, probe).wire).message == probe


@FUZZ
@given(st.integers(0, 2**40), st.lists(st.text(max_size=16), max_size=8), st.text(max_size=64),
       st.dictionaries(st.text(min_size=16, max_size=16, alphabet="0123456789abcdef"), st.integers(0, 2**40), max_size=8))
def test_heartbeat_round_trip(seq, roles, agent, versions):
    beat = StatusHeartbeat(seq=seq, sent_at=T0, interval=2.0, roles=tuple(roles), agent=agent, listen_addrs=(),
                           tasks=tuple(sorted(versions)), versions=versions, known_peers=())
    assert open_envelope(seal(ALICE, beat).wire).message == beat


@FUZZ
@given(st.lists(st.integers(0, 10**6), max_size=256), st.floats(-1e6, 1e6), st.integers(1, 256))
def test_rollout_round_trip(indices, reward, samples):
    msg = RolloutCommitment(task_id="0" * 16, policy_version=1, created_at=T0, blob_hash=bytes(32), blob_size=9,
                            prompt_indices=tuple(indices), samples_per_prompt=samples, num_tokens=3, mean_reward=reward)
    assert open_envelope(seal(ALICE, msg).wire).message == msg
