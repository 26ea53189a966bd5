"""Tensors as raw little-endian bytes: casting to the carried dtype, exact deltas, byte shuffle.

Why everything goes through raw bytes: a policy version must reconstruct *bit-exactly* on every
peer, because TOPLOC proofs and logprob checks compare activations computed from those weights.
Arithmetic deltas in bf16 (new - old as floats) are lossy. Deltas of the *bit patterns* are exact
by construction and need no float semantics, so NaNs, -0.0 and denormals survive untouched:
  - XOR: `old ^ (old ^ new) == new`. A small optimizer step (lr ~3e-5) rarely moves a weight
    across a power of two, so sign and exponent bits, in the high byte of each bf16/fp16 word, XOR
    to zero; in bf16 most weights do not change at all (a step moves them a fraction of an ulp), so whole
    words are zero. Only low mantissa bits differ.
  - zigzag difference ("sub", the default): the wrapping integer difference of the bit patterns,
    zigzag-coded. Same zero high bytes, but a 1-ulp move is the word 1 or 2 instead of XOR's run of
    flipped bits, so it compresses smaller: on a real GRPO batch of the built-in model 0.23 vs 0.26
    of the raw bf16 size, on a synthetic 50 MB model 0.18 vs 0.21 (bench/weights_pack.py).
Byte shuffle (the HDF5/Blosc filter) then groups byte 0 of every word, then byte 1, ...: the
mostly-zero high bytes become long zero runs that zstd collapses, instead of alternating
zero/non-zero bytes that defeat its match finder. Measured on the 50 MB model: deltas 0.18 -> 0.22
without it, full versions 0.71 -> 0.78, so it stays on.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

if sys.byteorder != "little":  # safetensors and our hashes are defined on little-endian bytes
    raise ImportError("trainer.weights assumes a little-endian host")

# Wire names for dtypes (short, stable, independent of torch's repr).
DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
}
_NAMES = {v: k for k, v in DTYPES.items()}
ITEMSIZE: dict[str, int] = {k: torch.empty((), dtype=v).element_size() for k, v in DTYPES.items()}
CARRY_DTYPES = ("bf16", "fp16", "fp32")  # what floating weights may be carried in


def carried(t: torch.Tensor, dtype: str) -> torch.Tensor:
    """Return `t` as it travels: floats cast to `dtype` (to bf16 by `dithered_bf16`), other dtypes
    kept, contiguous on CPU.

    Casting is idempotent, so packing from fp32 master weights and packing from an already
    reconstructed bf16 version give the same bits (which is what lets a delta's parent be either).
    """
    if dtype not in CARRY_DTYPES:
        raise ValueError(f"dtype must be one of {CARRY_DTYPES}, not {dtype!r}")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
    t = t.detach().to("cpu")
    if t.is_floating_point():
        t = dithered_bf16(t) if dtype == "bf16" and t.dtype != torch.bfloat16 else t.to(DTYPES[dtype])
    elif t.dtype not in _NAMES:
        raise ValueError(f"unsupported tensor dtype {t.dtype}")
    return t.contiguous()


# Thresholds of `dithered_bf16`, as what each position adds to its float32 bit pattern: 0xFFFF minus
# (i * 40503 mod 2**16), 40503 being round(2**16 / golden ratio), a low-discrepancy (Weyl) sequence
# that repeats every 2**16 positions, so one table serves a tensor of any size.
_PERIOD = 1 << 16
_DITHER = (0xFFFF - (np.arange(_PERIOD, dtype=np.int64) * 40503) % _PERIOD).astype(np.int32)


def dithered_bf16(t: torch.Tensor) -> torch.Tensor:
    """`t` rounded to bf16 up or down by a fixed threshold per position, not to the nearest value.

    Why: a model that starts in bf16 (SmolLM2, and any checkpoint saved in it) has every master
    weight on the bf16 grid, and an optimizer step at a small lr (1e-5) moves a weight by well under
    half an ulp (2**-9 to 2**-8 of its size). Rounded to nearest, such versions are bit for bit the
    base on most weights: after 16 GRPO steps of SmolLM2 a version carried a quarter of the master's
    update (bench/rounding.py), so workers sampled, and peers scored, a policy far behind the one
    trained. Here element i rounds away from zero when the part of its magnitude below bf16's precision
    exceeds a threshold fixed for its position: across a tensor, a drift of d ulps moves a fraction d
    of its weights one ulp, so the published policy follows the master from the first step, unbiased
    on average, without noise from one version to the next (a weight changes only when its own
    master crosses its threshold, so deltas stay about as sparse as rounding to nearest's). The price
    is an error of up to one ulp per weight instead of half. Exactly representable values are kept
    (idempotent); NaN rounds as torch rounds it.

    How: adding 0xFFFF - threshold to the float32 bit pattern and dropping the low 16 bits carries
    into bf16's last bit exactly when the dropped part exceeds the threshold (the pattern is
    sign-magnitude, so the carry moves away from zero for either sign)."""
    flat = t.to(torch.float32).reshape(-1)
    if torch.isnan(flat).any():  # a NaN's payload could carry into its exponent: no dither for it
        nan = torch.isnan(flat)
        out = dithered_bf16(torch.where(nan, torch.zeros_like(flat), flat)).reshape(t.shape)
        return torch.where(nan.reshape(t.shape), t.to(torch.bfloat16), out)
    bits = flat.view(torch.int32)
    n = bits.numel()
    whole = n - n % _PERIOD
    table = torch.from_numpy(_DITHER)
    summed = torch.empty_like(bits)
    torch.add(bits[:whole].view(-1, _PERIOD), table, out=summed[:whole].view(-1, _PERIOD))
    torch.add(bits[whole:], table[:n - whole], out=summed[whole:])
    return summed.bitwise_right_shift_(16).to(torch.int16).view(torch.bfloat16).reshape(t.shape)


def dtype_name(t: torch.Tensor) -> str:
    """The wire name of `t`'s dtype."""
    return _NAMES[t.dtype]


def to_bytes(t: torch.Tensor) -> np.ndarray:
    """The tensor's raw little-endian bytes as a flat uint8 array (a view where possible)."""
    if t.numel() == 0:  # torch refuses dtype views of empty tensors (their stride may be 0)
        return np.empty(0, np.uint8)
    return t.reshape(-1).view(torch.uint8).numpy()


def from_bytes(raw: np.ndarray, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Rebuild a tensor of `dtype` and `shape` from its flat raw bytes (copies: owns its memory)."""
    if raw.size == 0:
        return torch.empty(shape, dtype=DTYPES[dtype])
    buf = torch.from_numpy(np.array(raw, dtype=np.uint8, copy=True).reshape(-1))
    return buf.view(DTYPES[dtype]).reshape(shape)


def shuffle(raw: np.ndarray, itemsize: int) -> np.ndarray:
    """Byte-transpose: (n words x k bytes) -> (k planes x n bytes); plane j holds byte j of each word."""
    words = raw.reshape(-1, itemsize)
    planes = np.empty((itemsize, words.shape[0]), np.uint8)
    for j in range(itemsize):  # one strided copy per plane: a transposed copy of uint8 is several times slower
        planes[j] = words[:, j]
    return planes


def unshuffle(planes: np.ndarray, itemsize: int) -> np.ndarray:
    """Inverse of `shuffle`: (k planes x n bytes) -> flat raw bytes."""
    planes = planes.reshape(itemsize, -1)
    raw = np.empty(planes.size, np.uint8)
    for j in range(itemsize):  # 1.6 ms instead of 9.7 ms for the built-in model's 5 MB of bf16
        raw[j::itemsize] = planes[j]
    return raw


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def sub_delta(new: np.ndarray, old: np.ndarray, itemsize: int) -> np.ndarray:
    """Zigzag-coded wrapping difference of the words' bit patterns: exact, and smaller than XOR.

    A move of k ulps (same sign and exponent) is a difference of k in the integer bit pattern; zigzag
    maps 0, -1, +1, -2, ... to 0, 1, 2, 3, ... so small moves in either direction become small
    unsigned words. XOR instead turns a 1-ulp move into a run of flipped low bits (1, 3, 7, ...
    depending on carries) and loses the direction, which costs about 0.35 bits per weight more
    (measured in bench/weights_pack.py). Unsigned arithmetic wraps, so it inverts exactly.
    """
    if new.shape != old.shape:
        raise ValueError("delta of arrays with different lengths")
    u = _UINT[itemsize]
    d = new.view(u) - old.view(u)
    sign = d >> u(8 * itemsize - 1)
    return ((d << u(1)) ^ (u(0) - sign)).view(np.uint8)


def add_delta(zz: np.ndarray, old: np.ndarray, itemsize: int) -> np.ndarray:
    """Inverse of `sub_delta`: the new words from the zigzag difference and the old words."""
    if zz.shape != old.shape:
        raise ValueError("delta of arrays with different lengths")
    u = _UINT[itemsize]
    z = zz.view(u)
    d = (z >> u(1)) ^ (u(0) - (z & u(1)))
    return (old.view(u) + d).view(np.uint8)


def xor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bytewise XOR of two equal-length uint8 arrays (word size does not matter for XOR)."""
    if a.shape != b.shape:
        raise ValueError("xor of arrays with different lengths")
    return np.bitwise_xor(a, b)
