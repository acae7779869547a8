"""Input values for a module's ENTRY parameters, deterministic in (module, seed).

Floats are mostly small dyadic numbers (k/4, |k| <= 16: exact in every float type, so sums
and products stay exact for a while), sometimes wider normal values, and rarely special
values (one array in five: ±0, ±inf, NaN, subnormals). Integers are mostly small (so they
make interesting indices, shift amounts and divisors, zero included) and sometimes drawn
from the whole range. pred is a coin toss.
"""
from __future__ import annotations

import zlib

import numpy as np

from ..hlo.ir import HloModule
from ..hlo.shape import Shape


def _numpy_dtype(et: str) -> np.dtype:
    import ml_dtypes
    table = {"pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
             "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16,
             "f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "s4": ml_dtypes.int4,
             "u4": ml_dtypes.uint4}
    if et not in table:
        raise ValueError(f"no fuzz inputs for element type {et}")
    return np.dtype(table[et])


def _floats(n: int, dt: np.dtype, rng: np.random.Generator) -> np.ndarray:
    kind = rng.random()
    if kind < 0.75:
        x = rng.integers(-16, 17, n).astype(np.float64) / 4
    elif kind < 0.9:
        x = rng.integers(0, 9, n).astype(np.float64) / 8     # non-negative: logs, square roots
    else:
        x = rng.normal(0, 2, n)
    info = np.finfo(dt) if dt.kind == "f" else None
    # one array in five holds special values, at a few percent of its elements
    special = rng.random(n) < (0.03 if rng.random() < 0.2 else 0.0)
    if special.any():
        # no huge finite values: beside small ones they make sums cancel catastrophically, and
        # the order of a float accumulation is the implementation's (three right answers)
        tiny = float(info.smallest_subnormal) if info is not None else 1e-40
        choices = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny])
        x[special] = rng.choice(choices, int(special.sum()))
    return x.astype(dt)


def _ints(n: int, dt: np.dtype, rng: np.random.Generator) -> np.ndarray:
    lo, hi = (-8, 16) if np.issubdtype(dt, np.signedinteger) or dt.name == "int4" else (0, 16)
    if dt.name in ("int4", "uint4"):
        lo, hi = (-8, 8) if dt.name == "int4" else (0, 16)
        return rng.integers(lo, hi, n).astype(dt)
    x = rng.integers(lo, hi, n).astype(dt)
    if rng.random() < 0.15:
        info = np.iinfo(dt)
        wide = rng.random(n) < 0.3
        k = int(wide.sum())
        if dt == np.uint64:
            vals = rng.integers(0, 2**64, k, dtype=np.uint64)
        else:
            vals = rng.integers(int(info.min), int(info.max), k, dtype=np.int64, endpoint=True)
        x[wide] = vals.astype(dt)
    return x


def random_leaf(shape: Shape, rng: np.random.Generator) -> np.ndarray:
    et = shape.element_type
    dt = _numpy_dtype(et)
    n = shape.element_count()
    if et == "pred":
        x = rng.random(n) < 0.5
    elif et in ("f16", "bf16", "f32", "f64"):
        x = _floats(n, dt, rng)
    else:
        x = _ints(n, dt, rng)
    return np.asarray(x, dtype=dt).reshape(shape.dimensions)


def make_inputs(module: HloModule, seed: int, participant: int | None = None) -> list:
    """Arguments for ENTRY, in parameter order (tuples as tuples). Each parameter's values
    depend only on the seed, its name and its shape (and ``participant``, of an SPMD run: every
    participant gets its own values, so a value from the wrong peer shows), so removing another
    parameter (as the shrinker does) leaves them unchanged."""
    extra = [] if participant is None else [participant + 1]

    def make(shape: Shape, key: str):
        if shape.is_tuple:
            return tuple(make(s, f"{key}.{i}") for i, s in enumerate(shape.tuple_shapes))
        rng = np.random.default_rng([seed, zlib.crc32(f"{key}:{shape.to_text()}".encode())] + extra)
        return random_leaf(shape, rng)
    return [make(p.shape, p.name) for p in module.entry.parameters]
