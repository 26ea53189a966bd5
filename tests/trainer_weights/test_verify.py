"""Hostile inputs: every corruption is caught, blamed precisely, and nothing unverified returned."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
import zstandard
from safetensors.numpy import save as st_save

from gossip.hashing import blake2b256
from tests.trainer_weights.helpers import model, reshard
from trainer.weights import (
    DecompressionLimitError,
    ManifestError,
    PayloadError,
    RootMismatchError,
    ShardCountError,
    ShardHashError,
    TensorHashError,
    pack_version,
    unpack_version,
    verify_shard,
)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def packed():
    p = pack_version(model(0), None, shard_size=1024)
    assert len(p.shards) >= 3
    return p


def test_corrupted_shard_names_its_index(packed):
    shards = list(packed.shards)
    bad = bytearray(shards[1])
    bad[7] ^= 0x01
    shards[1] = bytes(bad)
    with pytest.raises(ShardHashError) as err:
        unpack_version(packed.manifest_fields(), shards)
    assert err.value.index == 1


def test_truncated_and_extended_shards(packed):
    last = len(packed.shards) - 1
    for i, data in [(0, packed.shards[0][:-1]), (last, packed.shards[last][:-1]),
                    (last, packed.shards[last] + b"\0")]:
        shards = list(packed.shards)
        shards[i] = data
        with pytest.raises(ShardHashError) as err:
            unpack_version(packed.manifest_fields(), shards)
        assert err.value.index == i


def test_wrong_shard_count(packed):
    with pytest.raises(ShardCountError):
        unpack_version(packed.manifest_fields(), list(packed.shards)[:-1])


def test_wrong_root_and_tampered_fields(packed):
    fields = packed.manifest_fields()
    with pytest.raises(RootMismatchError):
        unpack_version(dict(fields, root=bytes(32)), list(packed.shards))
    tensors = [dict(t) for t in fields["tensors"]]
    tensors[0]["name"] = "renamed"
    with pytest.raises(RootMismatchError):
        unpack_version(dict(fields, tensors=tensors), list(packed.shards))
    with pytest.raises(RootMismatchError):
        unpack_version(dict(fields, shuffle=not fields["shuffle"]), list(packed.shards))


@pytest.mark.parametrize(
    "change",
    [
        {"format": "swarm-weights/9"},
        {"encoding": "delta"},
        {"delta_op": "xor"},
        {"delta_op": "add"},
        {"dtype": "int4"},
        {"shard_size": 10},
        {"raw_size": 1 << 40},
        {"compressed_size": 1},
        {"shard_hashes": []},
        {"piece_hashes": []},
        {"piece_size": 1000},
        {"piece_size": 2048},
        {"piece_size": 128},
        {"depth": -1},
        {"shuffle": 1},
    ],
)
def test_malformed_manifest_rejected(packed, change):
    with pytest.raises(ManifestError):
        unpack_version(dict(packed.manifest_fields(), **change), list(packed.shards))


def test_pieces_cut_the_stream_and_their_hashes_are_bound_into_the_root():
    """Pieces (what peers relay) are a uniform cut of the compressed stream inside the shards; a relay
    that swaps a piece hash, or re-cuts the pieces, changes the version's name."""
    p = pack_version(model(0), None, shard_size=1024, piece_size=256)
    stream = b"".join(p.shards)
    assert p.piece_size == 256 and len(p.piece_hashes) == -(-len(stream) // 256) == -(-p.compressed_size // 256)
    assert all(blake2b256(stream[i * 256:(i + 1) * 256]) == h for i, h in enumerate(p.piece_hashes))
    fields = p.manifest_fields()
    assert unpack_version(fields, list(p.shards)).keys() == model(0).keys()
    swapped = list(fields["piece_hashes"])
    swapped[0], swapped[1] = swapped[1], swapped[0]
    with pytest.raises(RootMismatchError):
        unpack_version(dict(fields, piece_hashes=swapped), list(p.shards))
    stream_cut = [blake2b256(stream[i:i + 512]) for i in range(0, len(stream), 512)]
    with pytest.raises(RootMismatchError):
        unpack_version(dict(fields, piece_size=512, piece_hashes=stream_cut), list(p.shards))
    with pytest.raises(ValueError, match="piece_size"):
        pack_version(model(0), None, shard_size=1024, piece_size=384)
    # the default: 256 KiB where it divides the shard size, else one piece per shard
    assert pack_version(model(0), None, shard_size=1 << 20).piece_size == 256 << 10
    assert pack_version(model(0), None, shard_size=1024).piece_size == 1024


def test_malformed_manifest_not_a_dict_or_missing_keys(packed):
    with pytest.raises(ManifestError):
        unpack_version([1, 2], [])
    fields = packed.manifest_fields()
    del fields["depth"]
    with pytest.raises(ManifestError):
        unpack_version(fields, list(packed.shards))


def test_zstd_bomb_stops_at_declared_size(packed):
    """A publisher signs a root over a frame that expands to 64 MiB; we read raw_size + 1 bytes.

    Measured in memory, not time: the peak Python allocation while unpacking stays near raw_size (about
    10 KB here; expanding the frame would allocate 64 MiB), which a loaded machine cannot blur."""
    bomb = zstandard.ZstdCompressor(level=3).compress(bytes(64 * 1024 * 1024))
    assert len(bomb) < 16 * 1024
    fields, shards = reshard(packed.manifest_fields(), bomb)
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            unpack_version(fields, shards)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak
    # Same bomb without a content size in the frame header (streaming writers omit it).
    chunks = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    frame = chunks.compress(bytes(16 * 1024 * 1024)) + chunks.flush()
    fields, shards = reshard(packed.manifest_fields(), frame)
    with pytest.raises(DecompressionLimitError):
        unpack_version(fields, shards)


def test_hard_cap_applies_before_decompressing(packed):
    with pytest.raises(DecompressionLimitError):
        unpack_version(packed.manifest_fields(), list(packed.shards), max_raw_size=1000)


def test_short_payload_and_garbage_frame(packed):
    fields, shards = reshard(packed.manifest_fields(), zstandard.ZstdCompressor().compress(b"x" * 10))
    with pytest.raises(PayloadError):
        unpack_version(fields, shards)
    fields, shards = reshard(packed.manifest_fields(), b"not a zstd frame" * 8)
    with pytest.raises(PayloadError):
        unpack_version(fields, shards)


def test_payload_that_is_not_safetensors_or_wrong_layout(packed):
    raw = packed.raw_size
    fields, shards = reshard(packed.manifest_fields(), zstandard.ZstdCompressor().compress(b"\xff" * raw))
    with pytest.raises(PayloadError):
        unpack_version(fields, shards)
    # Valid safetensors, right names, wrong layout (flat bytes where byte planes are declared).
    flat = {t.name: np.zeros(t.nbytes, np.uint8) for t in packed.tensors}
    blob = st_save(flat)
    fields = dict(packed.manifest_fields(), raw_size=len(blob))
    with pytest.raises(PayloadError, match="layout"):
        unpack_version(*reshard(fields, zstandard.ZstdCompressor().compress(blob)))
    # Valid safetensors, a tensor missing.
    blob = st_save(dict(list(flat.items())[1:]))
    fields = dict(packed.manifest_fields(), raw_size=len(blob))
    with pytest.raises(ManifestError):  # raw_size below the tensor bytes is refused up front
        unpack_version(*reshard(fields, zstandard.ZstdCompressor().compress(blob)))
    blob = st_save(dict(list(flat.items())[1:], extra=np.zeros(4096, np.uint8)))
    fields = dict(packed.manifest_fields(), raw_size=len(blob))
    with pytest.raises(PayloadError, match="differ from the index"):
        unpack_version(*reshard(fields, zstandard.ZstdCompressor().compress(blob)))


def test_tensor_hash_checked_even_when_payload_decodes(packed):
    """A publisher whose payload decodes fine but disagrees with its own index is caught."""
    fields = packed.manifest_fields()
    tensors = [dict(t) for t in fields["tensors"]]
    tensors[-1]["hash"] = bytes(32)
    fields, shards = reshard(dict(fields, tensors=tensors), b"".join(packed.shards))
    with pytest.raises(TensorHashError) as err:
        unpack_version(fields, shards)
    assert err.value.name == tensors[-1]["name"]


def test_delta_op_is_bound_into_the_root():
    v0 = model(0)
    p0 = pack_version(v0, None)
    p1 = pack_version(model(1), v0, parent_root=p0.root, delta_op="sub")
    if p1.encoding == "delta":
        with pytest.raises(RootMismatchError):
            unpack_version(dict(p1.manifest_fields(), delta_op="xor"), list(p1.shards), v0)


def test_verify_shard(packed):
    fields = packed.manifest_fields()
    for i, data in enumerate(packed.shards):
        assert verify_shard(fields, i, data)
    assert not verify_shard(fields, 0, packed.shards[1])
    assert not verify_shard(fields, 0, packed.shards[0][:-1])
    assert not verify_shard(fields, len(packed.shards), packed.shards[0])
    assert not verify_shard(fields, -1, packed.shards[-1])
    with pytest.raises(RootMismatchError):
        verify_shard(dict(fields, root=bytes(32)), 0, packed.shards[0])
