"""Round trips: full and delta versions reconstruct bit-exactly; the encoding choice is honest."""

from __future__ import annotations

import msgpack
import pytest
import torch

from tests.trainer_weights.helpers import model, step
from trainer.weights import (
    ParentMismatchError,
    TensorHashError,
    pack_version,
    parse_manifest,
    unpack_version,
)
from trainer.weights.tensors import carried

torch.set_num_threads(1)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal as bit patterns (NaN-safe, distinguishes -0.0 from 0.0)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    )


def expected(sd: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    return {k: carried(v, dtype) for k, v in sd.items()}


@pytest.mark.parametrize("delta_op", ["sub", "xor"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_full_and_delta_round_trip_bit_exact(dtype, delta_op):
    v0 = model(0)
    p0 = pack_version(v0, None, shard_size=4096, dtype=dtype)
    assert p0.encoding == "full" and p0.parent_root is None and p0.depth == 0
    r0 = unpack_version(p0.manifest_fields(), list(p0.shards), None)
    assert list(r0) == sorted(v0)
    assert all(bits_equal(r0[k], expected(v0, dtype)[k]) for k in v0)

    v1 = step(v0)
    p1 = pack_version(v1, r0, shard_size=4096, dtype=dtype, parent_root=p0.root, delta_op=delta_op)
    assert p1.encoding == "delta" and p1.parent_root == p0.root and p1.depth == 1
    assert p1.delta_op == delta_op and p0.delta_op is None
    r1 = unpack_version(p1.manifest_fields(), list(p1.shards), r0)
    assert all(bits_equal(r1[k], expected(v1, dtype)[k]) for k in v1)


def test_special_values_survive_exactly():
    v0 = {"x": torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-40])}
    v1 = {"x": torch.tensor([-0.0, 0.0, float("inf"), float("nan"), 1e-40, -float("inf")])}
    for dtype, op in [(d, o) for d in ("bf16", "fp16", "fp32") for o in ("sub", "xor")]:
        p0 = pack_version(v0, None, dtype=dtype)
        r0 = unpack_version(p0.manifest_fields(), list(p0.shards))
        p1 = pack_version(v1, v0, dtype=dtype, parent_root=p0.root, delta_op=op)
        r1 = unpack_version(p1.manifest_fields(), list(p1.shards), r0)
        assert bits_equal(r1["x"], carried(v1["x"], dtype))


def test_parent_may_be_fp32_source_or_unpacked_version():
    v0, v1 = model(0), step(model(0))
    p0 = pack_version(v0, None)
    r0 = unpack_version(p0.manifest_fields(), list(p0.shards))
    a = pack_version(v1, v0, parent_root=p0.root)
    b = pack_version(v1, r0, parent_root=p0.root)
    assert a.root == b.root and a.encoding == "delta"


def test_sub_delta_smaller_than_xor_on_small_steps():
    v0 = {"w": torch.randn(256, 256) * 0.02}
    p0 = pack_version(v0, None)
    sub = pack_version(step(v0), v0, parent_root=p0.root, delta_op="sub")
    xor = pack_version(step(v0), v0, parent_root=p0.root, delta_op="xor")
    assert sub.encoding == xor.encoding == "delta" and sub.compressed_size < xor.compressed_size


def test_delta_chosen_when_smaller_full_when_not():
    v0 = {"w": torch.randn(256, 256) * 0.02}
    p0 = pack_version(v0, None)
    small = pack_version(step(v0), v0, parent_root=p0.root)
    assert small.encoding == "delta" and small.compressed_size < p0.compressed_size
    # An unrelated version: XOR against it is as noisy as the weights themselves.
    unrelated = {"w": torch.randn(256, 256) * 0.02}
    forced = pack_version(unrelated, v0, parent_root=p0.root, full_every=1)
    chosen = pack_version(unrelated, v0, parent_root=p0.root)
    assert forced.encoding == "full"
    if chosen.encoding == "full":
        assert chosen.root == forced.root
    else:  # only when it really is smaller
        assert chosen.compressed_size < forced.compressed_size


def test_a_raced_full_frame_is_the_frame_or_nothing():
    from trainer.weights import payload

    blob = torch.randn(300_000).numpy().tobytes() + bytes(5_000_000)  # two chunks: noise, then zeros
    frame = payload.compress(blob, 3)
    assert payload.decompress(frame, len(blob)) == blob
    assert payload.compress(blob, 3, give_up_above=len(frame)) == frame  # a tie is not over the limit
    assert payload.compress(blob, 3, give_up_above=len(frame) - 1) is None
    assert payload.compress(blob, 3, give_up_above=1000) is None  # known early: the first chunk is noise


def test_full_every_bounds_the_chain():
    versions = [model(0)]
    for i in range(6):
        versions.append(step(versions[-1], seed=i + 1))
    encodings, parent, root, depth = [], None, None, 0
    for sd in versions:
        p = pack_version(sd, parent, parent_root=root, parent_depth=depth, full_every=3)
        encodings.append((p.encoding, p.depth))
        parent = unpack_version(p.manifest_fields(), list(p.shards), parent)
        root, depth = p.root, p.depth
    assert encodings == [("full", 0), ("delta", 1), ("delta", 2), ("full", 0), ("delta", 1),
                         ("delta", 2), ("full", 0)]


def test_layout_change_packs_full():
    v0 = model(0)
    p0 = pack_version(v0, None)
    v1 = dict(step(v0), extra=torch.zeros(3))
    assert pack_version(v1, v0, parent_root=p0.root).encoding == "full"


def test_deterministic_root_and_key_order_irrelevant():
    v = model(3)
    a = pack_version(v, None)
    b = pack_version(dict(reversed(list(v.items()))), None)
    assert a.root == b.root and a.shards == b.shards


def test_wrong_or_missing_parent_is_rejected():
    v0 = model(0)
    p0 = pack_version(v0, None)
    p1 = pack_version(step(v0), v0, parent_root=p0.root)
    with pytest.raises(ParentMismatchError):
        unpack_version(p1.manifest_fields(), list(p1.shards), None)
    with pytest.raises(TensorHashError) as err:
        unpack_version(p1.manifest_fields(), list(p1.shards), step(v0, seed=9))
    assert "wrong parent" in str(err.value)
    with pytest.raises(ParentMismatchError):
        unpack_version(p1.manifest_fields(), list(p1.shards), {"emb.weight": torch.zeros(1)})


def test_manifest_fields_are_plain_and_survive_msgpack():
    p0 = pack_version(model(0), None, shard_size=1024)
    p1 = pack_version(step(model(0)), model(0), shard_size=1024, parent_root=p0.root)
    fields = p1.manifest_fields()
    back = msgpack.unpackb(msgpack.packb(fields, use_bin_type=True), raw=False)
    assert back == fields
    assert parse_manifest(back).root == p1.root
    assert len(p1.shards) > 1 and all(len(s) == 1024 for s in p1.shards[:-1])
    assert unpack_version(back, list(p1.shards), model(0)).keys() == model(0).keys()


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("words", [0, 1, 1000])
def test_byte_shuffle_is_the_plane_transpose(itemsize, words):
    """The wire layout: plane j holds byte j of every word (what peers already exchange)."""
    import numpy as np

    from trainer.weights.tensors import shuffle, unshuffle

    raw = np.random.default_rng(words).integers(0, 256, itemsize * words, dtype=np.uint8)
    planes = shuffle(raw, itemsize)
    assert np.array_equal(planes, raw.reshape(-1, itemsize).T)
    assert np.array_equal(unshuffle(planes.reshape(-1), itemsize), raw)
