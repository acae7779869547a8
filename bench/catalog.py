"""The fixed list of benchmark modules (``bench/modules/*.hlo``), the emitter each kernel is
meant to get, and the rules shared by both suites: scaling a module down for the host,
checking our results against the interpreter, and counting bytes and flops.

Each module is written at a size that fills an H100/H200 (hundreds of MB moved). The host suite
runs the same text scaled down by ``scaled_text``: every dimension of 128 or more is divided by
the factor, every one from 32 to 127 by at most 4, smaller ones (window sizes, the rows of a
multi-row reduction) stay. The rule depends on the value only, so dimensions that must agree
still agree, and sizes that add up (a concatenate) still add up.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hlo_compile import parse_module
from hlo_compile.hlo import HloModule
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.physical import buffer_bytes

MODULES_DIR = Path(__file__).resolve().parent / "modules"


@dataclass(frozen=True)
class BenchModule:
    file: str
    emitters: tuple[str, ...]               # per kernel of ENTRY, in order
    variants: tuple[str | None, ...] = ()   # per kernel, where the variant matters

    @property
    def name(self) -> str:
        return self.file.removesuffix(".hlo")

    @property
    def path(self) -> Path:
        return MODULES_DIR / self.file

    def text(self, scale: int = 1) -> str:
        text = self.path.read_text()
        return text if scale == 1 else scaled_text(text, scale)


MODULES: list[BenchModule] = [
    BenchModule("gelu_bf16_6x512x4096.hlo", ("loop",)),
    BenchModule("gelu_bf16_16x2048x4096.hlo", ("loop",)),
    BenchModule("transpose_2d_f32.hlo", ("transpose",), ("tiled",)),
    BenchModule("transpose_2d_bf16.hlo", ("transpose",), ("packed",)),
    BenchModule("transpose_021_f32.hlo", ("transpose",), ("tiled",)),
    BenchModule("transpose_210_bf16.hlo", ("transpose",), ("packed",)),
    BenchModule("reduce_row_bf16.hlo", ("reduction",), ("row",)),
    BenchModule("reduce_multirow_f32.hlo", ("reduction",), ("multi-row",)),
    BenchModule("reduce_column_bf16.hlo", ("reduction",), ("column",)),
    BenchModule("softmax_f32.hlo", ("reduction", "reduction", "loop"), ("row", "row", None)),
    BenchModule("layernorm_bf16.hlo", ("reduction", "loop"), ("row", None)),
    BenchModule("concatenate_f32.hlo", ("concatenate",)),
    BenchModule("dus_bf16.hlo", ("in-place-dus",)),
    BenchModule("scatter_add_f32.hlo", ("scatter",)),
    BenchModule("dot_f32.hlo", ("dot",)),
    BenchModule("convolution_f32.hlo", ("convolution",)),
]

_SHAPE = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]+)\]")


def _scale_dim(d: int, factor: int) -> int:
    f = factor if d >= 128 else min(factor, 4) if d >= 32 else 1
    if d % f:
        raise ValueError(f"dimension {d} is not a multiple of the scale factor {f}")
    return d // f


def scaled_text(text: str, factor: int) -> str:
    """``text`` with its array dimensions scaled down by ``factor`` (see the module docstring)."""
    def sub(m: re.Match) -> str:
        dims = ",".join(str(_scale_dim(int(d), factor)) for d in m.group(2).split(","))
        return f"{m.group(1)}[{dims}]"
    return _SHAPE.sub(sub, text)


def load(bm: BenchModule, scale: int = 1) -> tuple[str, HloModule]:
    text = bm.text(scale)
    return text, parse_module(text, str(bm.path) + (f" (scaled 1/{scale})" if scale != 1 else ""))


def check_emitters(bm: BenchModule, plan) -> str | None:
    """None when every kernel got the intended emitter (and variant), else what differs."""
    got = tuple(k.analysis.emitter for k in plan.kernels)
    if got != bm.emitters:
        return f"emitters {got}, intended {bm.emitters}"
    for k, want in zip(plan.kernels, bm.variants):
        if want is not None and k.analysis.variant != want:
            return f"kernel {k.kernel_name}: variant {k.analysis.variant}, intended {want}"
    return None


def reference(module: HloModule, seed: int = 0) -> tuple[list, list[np.ndarray]]:
    """Random inputs (never all zeros) and the interpreter's results on them."""
    from hlo_compile.interpreter import evaluate_module
    args = literals.random_inputs(module, seed)
    expected = literals.flatten(evaluate_module(module, args))
    return args, expected


def check_results(expected: list[np.ndarray], got: list[np.ndarray]) -> str | None:
    """None when ``got`` matches the interpreter (and is not all zeros), else why not."""
    if all(not np.any(np.asarray(e).astype(np.float64) if e.dtype.kind == "V" else e) for e in expected):
        return "the expected result is all zeros: refusing to time it"
    cmp = compare.compare_results(expected, got)
    return None if cmp.ok else "results differ from the interpreter's: " + cmp.report()[:600]


_CONTRACTION = re.compile(r"^(\s*(?:ROOT\s+)?%?[\w.-]+\s*=\s*f32\[[^\]]*\]\S*\s+(?:dot|convolution)\(.*)$", re.M)


def full_precision(text: str) -> str:
    """``text`` with every f32 dot and convolution asking for ``operand_precision={highest,highest}``:
    XLA:GPU then computes them in FP32 as our kernels and the interpreter do (with the default
    precision it uses TF32 tensor cores: 3.8e-4 off on the convolution module, 387 TFLOP/s on
    the dot, a different computation)."""
    return _CONTRACTION.sub(lambda m: m.group(1) if "operand_precision" in m.group(1)
                            else m.group(1) + ", operand_precision={highest,highest}", text)


def kernel_bytes(plan) -> int:
    """Bytes our kernels read and write, intermediates included: each launch's operands and
    outputs, except that an in-place kernel (dynamic-update-slice, scatter) counts its other
    operands read and the updated region written (read too, for scatter's combiner) instead of
    the whole updated buffer."""
    from hlo_compile.codegen.kernel import output_leaves
    total = 0
    for k in plan.kernels:
        f = k.fusion
        ops = [buffer_bytes(o.shape) for o in f.operands]
        outs = [buffer_bytes(s) for _, s in output_leaves(f)]
        in_place = k.in_place_operands
        if not in_place:
            total += sum(ops) + sum(outs)
            continue
        aliased = set(in_place.values())
        others = [b for i, b in enumerate(ops) if i not in aliased]
        region = max(others, default=0) * (2 if k.analysis.emitter == "scatter" else 1)
        total += sum(others) + region + sum(b for i, b in enumerate(outs) if i not in in_place)
    return total


def flops(module: HloModule) -> int | None:
    """2 x multiply-adds of the module's dots and convolutions (None when it has none)."""
    total = 0
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "dot":
                dn = inst.dot_dimension_numbers
                k = math.prod(inst.operands[0].shape.dimensions[d] for d in dn.lhs_contracting_dimensions)
                total += 2 * math.prod(inst.shape.dimensions) * k
            elif inst.opcode == "convolution":
                dn = inst.convolution_dimension_numbers
                w = inst.operands[1].shape.dimensions
                per_out = math.prod(w) // w[dn.kernel_output_feature_dimension]
                total += 2 * math.prod(inst.shape.dimensions) * per_out
    return total or None
