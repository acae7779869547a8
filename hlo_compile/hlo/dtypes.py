"""numpy dtypes of XLA element types (ml_dtypes for bf16, the f8/f6/f4 families and sub-byte ints).

numpy and ml_dtypes load on the first question (~100 ms of start-up that a compile whose
constants are plain scalars never needs: issue 17).
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from .element_types import TYPE_ALIASES

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

_ML_NAMES = {
    "f8e5m2": "float8_e5m2", "f8e4m3": "float8_e4m3", "f8e4m3fn": "float8_e4m3fn",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz", "f8e3m4": "float8_e3m4", "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e4m3fnuz": "float8_e4m3fnuz", "f8e8m0fnu": "float8_e8m0fnu", "f6e3m2fn": "float6_e3m2fn",
    "f6e2m3fn": "float6_e2m3fn", "f4e2m1fn": "float4_e2m1fn", "s4": "int4", "u4": "uint4",
    "s2": "int2", "u2": "uint2", "s1": "int1", "u1": "uint1",
}


@lru_cache(maxsize=None)
def _table() -> dict[str, object]:
    import ml_dtypes
    import numpy as np
    table: dict[str, object] = {
        "pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
        "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
        "f16": np.float16, "f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128,
        "bf16": ml_dtypes.bfloat16,
    }
    for hlo, ml in _ML_NAMES.items():
        if hasattr(ml_dtypes, ml):
            table[hlo] = getattr(ml_dtypes, ml)
    return table


def has_numpy_dtype(element_type: str) -> bool:
    return TYPE_ALIASES.get(element_type, element_type) in _table()


def numpy_dtype(element_type: str) -> np.dtype:
    """The numpy dtype that holds ``element_type``; KeyError names the type if there is none."""
    import numpy as np
    try:
        return np.dtype(_table()[TYPE_ALIASES.get(element_type, element_type)])
    except KeyError:
        raise KeyError(f"element type {element_type} has no numpy representation") from None
