"""Helpers for the interpreter unit tests: evaluate a small HLO module on arguments."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import hlo_compile
from hlo_compile.interpreter import evaluate_module

BF16 = ml_dtypes.bfloat16


def run(text: str, *args, seed=None):
    module = hlo_compile.parse_module(text, "<test>")
    return evaluate_module(module, list(args), seed=seed)


def unary(op: str, ty: str, x, out_ty: str | None = None, attrs: str = ""):
    x = np.asarray(x)
    dims = ",".join(str(d) for d in x.shape)
    out_ty = out_ty or ty
    return run(f"""HloModule m
ENTRY e {{
  p = {ty}[{dims}] parameter(0)
  ROOT r = {out_ty}[{dims}] {op}(p){attrs}
}}""", x)


def binary(op: str, ty: str, a, b, out_ty: str | None = None, attrs: str = ""):
    a, b = np.asarray(a), np.asarray(b)
    dims = ",".join(str(d) for d in a.shape)
    out_ty = out_ty or ty
    return run(f"""HloModule m
ENTRY e {{
  a = {ty}[{dims}] parameter(0)
  b = {ty}[{dims}] parameter(1)
  ROOT r = {out_ty}[{dims}] {op}(a, b){attrs}
}}""", a, b)


def same_bits(a, b) -> bool:
    """Equal including NaN positions and the sign of zero."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes() or bool(np.all((a == b) & (np.signbit(a) == np.signbit(b))
                                                      | (np.isnan(a) & np.isnan(b))))
