"""Property tests: any state dict (any dtype mix, shapes incl. empty and 0-d, arbitrary bits)
round-trips bit-exactly as full and as a delta against any same-layout parent."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from trainer.weights import ShardHashError, pack_version, unpack_version, verify_shard
from trainer.weights.tensors import DTYPES, ITEMSIZE, carried

torch.set_num_threads(1)

SOURCE_DTYPES = ["bf16", "fp16", "fp32", "fp64", "i64", "i8", "u8", "bool"]
shapes = st.lists(st.integers(0, 7), min_size=0, max_size=3)


def tensor_from(data: bytes, dtype: str, shape: list[int]) -> torch.Tensor:
    """A tensor with arbitrary bit patterns (NaNs, denormals, -0.0 included)."""
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return torch.empty(shape, dtype=DTYPES[dtype])
    raw = np.frombuffer((data * (n * 8 // max(len(data), 1) + 1))[: n * ITEMSIZE[dtype]], np.uint8)
    if dtype == "bool":
        raw = raw & 1
    t = torch.from_numpy(raw.copy()).view(DTYPES[dtype])
    return t.reshape(shape)


@st.composite
def state_dicts(draw):
    n = draw(st.integers(1, 5))
    names = draw(st.lists(st.text(min_size=1, max_size=12), min_size=n, max_size=n, unique=True))
    layout = {name: (draw(st.sampled_from(SOURCE_DTYPES)), draw(shapes)) for name in names}
    a = {k: tensor_from(draw(st.binary(min_size=1, max_size=64)), d, s) for k, (d, s) in layout.items()}
    if draw(st.booleans()):  # an unrelated child: full encoding usually wins
        b = {k: tensor_from(draw(st.binary(min_size=1, max_size=64)), d, s) for k, (d, s) in layout.items()}
    else:  # a child differing in a few bytes: the delta path
        b = {k: perturb(v, draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)),
                                         max_size=4))) for k, v in a.items()}
    return a, b


def perturb(t: torch.Tensor, edits: list[tuple[int, int]]) -> torch.Tensor:
    """`t` with some raw bytes XORed (bool tensors keep valid 0/1 bytes)."""
    raw = bytearray(t.reshape(-1).view(torch.uint8).numpy().tobytes()) if t.numel() else bytearray()
    for pos, x in edits:
        if raw:
            raw[pos % len(raw)] ^= 1 if t.dtype == torch.bool else x
    return tensor_from(bytes(raw), dtype_of(t), list(t.shape)) if raw else t.clone()


def dtype_of(t: torch.Tensor) -> str:
    return next(k for k, v in DTYPES.items() if v == t.dtype)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bytes(
        a.reshape(-1).view(torch.uint8).numpy()
    ) == bytes(b.reshape(-1).view(torch.uint8).numpy())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pair=state_dicts(),
    dtype=st.sampled_from(["bf16", "fp16", "fp32"]),
    shuffle=st.booleans(),
    delta_op=st.sampled_from(["sub", "xor"]),
    shard_size=st.sampled_from([256, 1000, 1 << 20]),
)
def test_round_trip_any_state_dict(pair, dtype, shuffle, delta_op, shard_size):
    parent, child = pair
    p0 = pack_version(parent, None, shard_size=shard_size, dtype=dtype, shuffle=shuffle)
    r0 = unpack_version(p0.manifest_fields(), list(p0.shards))
    assert list(r0) == sorted(parent)
    for k, v in parent.items():
        want = carried(v, dtype)
        assert same_bits(r0[k], want)

    p1 = pack_version(child, r0, shard_size=shard_size, dtype=dtype, shuffle=shuffle,
                      parent_root=p0.root, delta_op=delta_op)
    event(f"child packed {p1.encoding}")
    r1 = unpack_version(p1.manifest_fields(), list(p1.shards), r0 if p1.encoding == "delta" else None)
    for k, v in child.items():
        want = carried(v, dtype)
        assert same_bits(r1[k], want)
    assert all(verify_shard(p1.manifest_fields(), i, s) for i, s in enumerate(p1.shards))


@settings(max_examples=30, deadline=None)
@given(pair=state_dicts(), where=st.integers(0, 1 << 30), bit=st.integers(0, 7))
def test_any_single_bit_flip_is_caught(pair, where, bit):
    p = pack_version(pair[0], None, shard_size=256)
    shards = [bytearray(s) for s in p.shards]
    i = where % len(shards)
    shards[i][(where // len(shards)) % len(shards[i])] ^= 1 << bit
    try:
        unpack_version(p.manifest_fields(), [bytes(s) for s in shards])
    except ShardHashError as err:
        assert err.index == i
    else:
        raise AssertionError("a flipped bit went unnoticed")
