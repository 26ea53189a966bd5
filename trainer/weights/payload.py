"""The compressed payload: a safetensors blob of per-tensor byte arrays, in one zstd frame.

Each tensor travels as uint8: shape (itemsize, numel) when byte-shuffled (one row per byte plane),
shape (nbytes,) otherwise. Real dtypes and shapes live in the manifest's tensor index, which the
root binds; keeping the blob uint8 lets the same container carry full bytes, XOR deltas and shuffled
planes without pretending any of them are numbers. safetensors is used (not pickle, not a homemade
container) because parsing it cannot execute code and its header is bounded and checked.

Decompression is where a hostile publisher could hurt a peer (a few KB of zstd can expand to GBs),
so it streams and stops one byte past the size the manifest declared; the manifest parser already
bounded that size by the tensor index.
"""

from __future__ import annotations

import io

import numpy as np
import zstandard
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from .errors import DecompressionLimitError, PayloadError
from .manifest import TensorEntry
from .tensors import ITEMSIZE, shuffle, unshuffle

# Absolute ceiling on one payload, whatever a manifest declares (a peer may lower it per call).
HARD_MAX_RAW_SIZE = 32 * 1024**3
_CHUNK = 1 << 20
_RACE_CHUNK = 4 << 20  # input fed to a raced compression between checks of its length


def encode(arrays: dict[str, np.ndarray], itemsizes: dict[str, int], shuffled: bool) -> bytes:
    """Serialise flat uint8 arrays (byte-shuffled if asked) as a safetensors blob."""
    out = {}
    for name, raw in arrays.items():
        out[name] = shuffle(raw, itemsizes[name]) if shuffled else raw
    return st_save(out)


def decode(blob: bytes, index: tuple[TensorEntry, ...], shuffled: bool) -> dict[str, np.ndarray]:
    """Parse a safetensors blob back to flat uint8 arrays, checking names and layouts."""
    try:
        loaded = st_load(blob)
    except Exception as exc:  # the Rust binding raises SafetensorError, but also others
        raise PayloadError(f"payload is not valid safetensors: {exc}") from exc
    names = {t.name for t in index}
    if set(loaded) != names:
        raise PayloadError(
            f"payload tensors differ from the index: extra {sorted(set(loaded) - names)[:5]}, "
            f"missing {sorted(names - set(loaded))[:5]}"
        )
    out = {}
    for t in index:
        arr = loaded[t.name]
        k = ITEMSIZE[t.dtype]
        want = (k, t.numel) if shuffled else (t.nbytes,)
        if arr.dtype != np.uint8 or arr.shape != want:
            raise PayloadError(f"tensor {t.name!r}: payload layout {arr.dtype}{arr.shape} != uint8{want}")
        out[t.name] = unshuffle(arr, k) if shuffled else arr
    return out


def compress(blob: bytes, level: int, give_up_above: int | None = None) -> bytes | None:
    """One zstd frame, content size recorded, single-threaded (peers share few cores).

    give_up_above: stop and return None as soon as the frame is known to be longer than this many
    bytes (a frame only grows as input goes in). Why: a trainer compresses both a full version and a
    delta to send the smaller, and a delta is usually a fraction of the full size, so racing the full
    frame against it skips most of the full compression, about a second and a half of the trainer's
    critical path per version of a 135M-parameter model. The input is always fed in the same chunks,
    so a frame is the same bytes whether it was raced or not."""
    cobj = zstandard.ZstdCompressor(level=level, write_content_size=True).compressobj(size=len(blob))
    view, out, size = memoryview(blob), [], 0
    for i in range(0, len(view), _RACE_CHUNK):
        out.append(cobj.compress(view[i : i + _RACE_CHUNK]))
        size += len(out[-1])
        if give_up_above is not None and size > give_up_above:
            return None
    out.append(cobj.flush())
    frame = b"".join(out)
    return None if give_up_above is not None and len(frame) > give_up_above else frame


def decompress(frame: bytes, raw_size: int, hard_max: int = HARD_MAX_RAW_SIZE) -> bytes:
    """Decompress exactly `raw_size` bytes from one zstd frame; never produce more than that."""
    if raw_size > hard_max:
        raise DecompressionLimitError(f"declared raw size {raw_size} exceeds the cap {hard_max}")
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(frame)) as reader:
            while len(out) <= raw_size:
                chunk = reader.read(min(_CHUNK, raw_size + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
    except zstandard.ZstdError as exc:
        raise PayloadError(f"bad zstd frame: {exc}") from exc
    if len(out) > raw_size:
        raise DecompressionLimitError(f"payload expands past its declared raw size {raw_size}")
    if len(out) != raw_size:
        raise PayloadError(f"payload is {len(out)} bytes, manifest declares {raw_size}")
    return bytes(out)
