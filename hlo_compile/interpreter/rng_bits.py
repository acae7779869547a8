"""``rng-bit-generator`` in numpy, bit for bit as XLA:CPU and XLA:GPU compute it.

The op is a pure function of its state operand: ``(new_state, bits) = rng-bit-generator(state)``.
XLA lowers it before code generation (``RngBitGeneratorExpander``) into one of two counter-based
generators of Salmon et al. ("Parallel random numbers: as easy as 1, 2, 3", SC 2011):

- ``rng_three_fry``: Threefry-2x32 with 20 rounds; key = ``state[0]``, a 64-bit counter =
  ``state[1]``; the state must be ``u64[2]``.
- ``rng_philox``: Philox-4x32 with 10 rounds; key = ``state[0]``; a 128-bit counter whose low
  half is ``state[1]`` and whose high half is ``state[2]`` for a ``u64[3]`` state, or ``state[0]``
  (the key again) for a ``u64[2]`` state.
- ``rng_default``: the backend's choice. XLA:CPU and XLA:GPU both register the expander with
  Philox (``cpu_compiler.cc``, ``gpu_compiler.cc``), so default is Philox here.

Layout of the bits (notes/xla-async-spmd.md §4.2 has test vectors):

- Philox, 32-bit words: block ``b`` (counter ``c + b``, 128-bit add) yields four words; element
  ``4b + w`` of the row-major output is word ``w``. 64-bit outputs take two words per element,
  ``w0 | w1 << 32`` and ``w2 | w3 << 32``. Unused trailing words are dropped; the counter
  advances by the number of blocks.
- Threefry, 64-bit: element ``i`` (row-major) comes from counter ``c + i``, ``x0 | x1 << 32``.
  32-bit: the shape is halved along one dimension (the first of even size, else the first
  largest); counters run over the halved shape and its two output words land at positions
  ``2h`` and ``2h + 1`` of that dimension; a scalar keeps ``x0`` of one counter. The counter
  advances by the number of counters used.
- Narrower outputs (8, 16 bits and sub-byte types) are the 32-bit generation truncated.
- Signed and floating-point outputs carry the bits of the unsigned type of their width. XLA
  refuses pred, complex and widths without an unsigned type (1, 6 bits); so do we.

New state: the key is kept; Threefry stores the advanced counter in ``state[1]``; Philox the
advanced low half in ``state[1]`` and, for ``u64[3]``, the advanced high half in ``state[2]``
(for ``u64[2]`` the carry into the high half is lost).

This file is the reference: it shares nothing with the compiler's expansion of the op
(``passes/expand_rng_bit_generator.py``) on purpose.
"""
from __future__ import annotations

import numpy as np

from ..hlo.element_types import bit_width, element_type
from ..hlo.errors import HloUnsupportedError
from .numerics import dtype_of

U32 = np.uint64(0xFFFFFFFF)  # 32-bit words are kept in uint64 arrays, masked after each step

# the algorithm ``rng_default`` stands for on XLA:CPU and XLA:GPU
DEFAULT_ALGORITHM = "rng_philox"


def rng_bit_generator(algorithm: str, state: np.ndarray, out_type: str,
                      dims: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(new_state, bits)`` of an ``rng-bit-generator`` with ``algorithm=algorithm`` reading
    ``state`` (a ``u64`` vector) and producing an ``out_type[dims]`` array. ValueError names
    what XLA refuses (state sizes, element types)."""
    state = np.asarray(state)
    if state.dtype != np.uint64 or state.ndim != 1:
        raise ValueError(f"the state must be a u64 vector, got {state.dtype}{list(state.shape)}")
    if algorithm == "rng_default":
        algorithm = DEFAULT_ALGORITHM
    kind = element_type(out_type).kind
    width = bit_width(out_type)
    if kind not in ("signed", "unsigned", "float") or width not in (2, 4, 8, 16, 32, 64):
        raise ValueError(f"rng-bit-generator cannot produce {out_type} values")
    state = state.astype(np.uint64)
    count = int(np.prod(dims, dtype=np.int64))
    if algorithm == "rng_philox":
        bits, new_state = _philox_bits(state, count, wide=width == 64)
        bits = bits.reshape(dims)
    elif algorithm == "rng_three_fry":
        bits, new_state = _three_fry_bits(state, tuple(dims), wide=width == 64)
    else:
        raise ValueError(f"unknown rng-bit-generator algorithm '{algorithm}'")
    return new_state, _as_type(bits, out_type)


def _as_type(bits: np.ndarray, out_type: str) -> np.ndarray:
    """The low ``bit_width(out_type)`` bits of ``bits`` as an ``out_type`` array."""
    width = bit_width(out_type)
    dt = dtype_of(out_type)
    if width == 64:
        return bits.astype(np.uint64).view(dt)
    low = bits & np.uint64((1 << width) - 1)
    if width >= 8:
        return low.astype(np.dtype(f"u{width // 8}")).view(dt)
    # sub-byte types (u4, s2, f4e2m1fn...) occupy one byte each; ml_dtypes reads the low bits
    return low.astype(np.uint8).view(dt)


# ---- Philox-4x32-10 ----------------------------------------------------------------------------

PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))  # round multipliers
PHILOX_W = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))  # key schedule increments


def philox4x32(words: list[np.ndarray], k0: int, k1: int) -> list[np.ndarray]:
    """Ten Philox rounds over the counter words ``words`` (four arrays of 32-bit values in
    uint64) with the 32-bit key ``(k0, k1)``."""
    x0, x1, x2, x3 = (w.astype(np.uint64) for w in words)
    a, b = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0 = x0 * PHILOX_M[0]  # < 2**64: exact
        p1 = x2 * PHILOX_M[1]
        x0, x1, x2, x3 = ((p1 >> np.uint64(32)) ^ x1 ^ a, p1 & U32,
                          (p0 >> np.uint64(32)) ^ x3 ^ b, p0 & U32)
        a, b = (a + PHILOX_W[0]) & U32, (b + PHILOX_W[1]) & U32
    return [x0, x1, x2, x3]


def _philox_counter(state: np.ndarray) -> tuple[int, int]:
    """(low, high) 64-bit halves of the 128-bit Philox counter held by ``state``."""
    if state.size == 2:
        return int(state[1]), int(state[0])
    if state.size == 3:
        return int(state[1]), int(state[2])
    raise ValueError(f"Philox needs a u64[2] or u64[3] state, got u64[{state.size}]")


def _philox_bits(state: np.ndarray, count: int, wide: bool) -> tuple[np.ndarray, np.ndarray]:
    """(``count`` 32-bit words, or 64-bit values when ``wide``, as a flat uint64 array; the new
    state)."""
    key = int(state[0])
    lo, hi = _philox_counter(state)
    per_block = 2 if wide else 4
    blocks = -(-count // per_block)
    # counters c, c+1, ..., c+blocks-1: a 128-bit add (uint64 arrays wrap; carry by compare)
    low = np.uint64(lo) + np.arange(blocks, dtype=np.uint64)
    high = np.uint64(hi) + (low < np.uint64(lo)).astype(np.uint64)
    words = [low & U32, low >> np.uint64(32), high & U32, high >> np.uint64(32)]
    w = philox4x32(words, key & 0xFFFFFFFF, key >> 32)
    if wide:
        pairs = [w[0] | (w[1] << np.uint64(32)), w[2] | (w[3] << np.uint64(32))]
        flat = np.stack(pairs, axis=1).reshape(-1) if blocks else np.zeros(0, np.uint64)
    else:
        flat = np.stack(w, axis=1).reshape(-1) if blocks else np.zeros(0, np.uint64)
    counter = (hi << 64) | lo
    new = (counter + blocks) % (1 << 128)
    new_lo, new_hi = new & (2**64 - 1), new >> 64
    tail = [new_lo] if state.size == 2 else [new_lo, new_hi]
    return flat[:count], np.array([key] + tail, dtype=np.uint64)


# ---- Threefry-2x32-20 --------------------------------------------------------------------------

THREE_FRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREE_FRY_PARITY = 0x1BD11BDA


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & U32


def three_fry2x32(x0: np.ndarray, x1: np.ndarray, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray]:
    """Twenty Threefry rounds over the counter words ``(x0, x1)`` (32-bit values in uint64)
    with the 32-bit key ``(k0, k1)``."""
    ks = [np.uint64(k0), np.uint64(k1), np.uint64(THREE_FRY_PARITY ^ k0 ^ k1)]
    x0 = (x0.astype(np.uint64) + ks[0]) & U32
    x1 = (x1.astype(np.uint64) + ks[1]) & U32
    for block in range(5):
        for r in THREE_FRY_ROTATIONS[block % 2]:
            x0 = (x0 + x1) & U32
            x1 = _rotl(x1, r) ^ x0
        # key injection after every four rounds
        x0 = (x0 + ks[(block + 1) % 3]) & U32
        x1 = (x1 + ks[(block + 2) % 3] + np.uint64(block + 1)) & U32
    return x0, x1


def _three_fry_split(dims: tuple[int, ...]) -> int:
    """The dimension a 32-bit Threefry output is generated in halves along."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def _three_fry_bits(state: np.ndarray, dims: tuple[int, ...], wide: bool) -> tuple[np.ndarray, np.ndarray]:
    if state.size != 2:
        raise ValueError(f"Threefry needs a u64[2] state, got u64[{state.size}]")
    key, counter = int(state[0]), int(state[1])
    k0, k1 = key & 0xFFFFFFFF, key >> 32

    def run(n: int) -> tuple[np.ndarray, np.ndarray]:
        ctr = np.uint64(counter) + np.arange(n, dtype=np.uint64)  # wraps mod 2**64
        lo, hi = ctr & U32, ctr >> np.uint64(32)
        return three_fry2x32(lo, hi, k0, k1)

    if wide:
        n = int(np.prod(dims, dtype=np.int64))
        x0, x1 = run(n)
        bits = (x0 | (x1 << np.uint64(32))).reshape(dims)
    elif not dims:
        n = 1
        x0, _ = run(1)
        bits = x0.reshape(())
    else:
        s = _three_fry_split(dims)
        half = dims[:s] + (-(-dims[s] // 2),) + dims[s + 1:]
        n = int(np.prod(half, dtype=np.int64))
        x0, x1 = run(n)
        # x0 goes to even, x1 to odd positions along dimension s
        both = np.stack([x0.reshape(half), x1.reshape(half)], axis=s + 1)
        full = both.reshape(dims[:s] + (2 * half[s],) + dims[s + 1:])
        bits = full[tuple(slice(0, d) for d in dims)]
    new_state = np.array([key, (counter + n) % (1 << 64)], dtype=np.uint64)
    return bits, new_state


def evaluate(inst, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The value of the ``rng-bit-generator`` instruction ``inst`` reading ``state``."""
    state_shape, out_shape = inst.shape.tuple_shapes
    if state_shape.element_type != "u64" or len(state_shape.dimensions) != 1:
        raise HloUnsupportedError(f"rng-bit-generator needs a u64 vector state, got {state_shape.to_text(False)}",
                                  inst.location)
    try:
        return rng_bit_generator(inst.attr("algorithm", "rng_default"), np.asarray(state, dtype=np.uint64),
                                 out_shape.element_type, tuple(out_shape.dimensions))
    except ValueError as e:
        raise HloUnsupportedError(f"rng-bit-generator '{inst.name}': {e}", inst.location) from None
