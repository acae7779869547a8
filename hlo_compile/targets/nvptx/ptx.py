"""LLVM IR → PTX for the NVPTX target (notes/nvptx.md §2-3).

``compile_to_ptx`` parses a module, links the libdevice functions it uses, internalises
everything but the kernels, runs O3 through the NVPTX target machine's pass builder and emits
PTX. ``check_lowerable`` refuses, before LLVM sees them, the constructs that make the NVPTX
backend abort the process.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ...codegen.errors import CodegenError
from .libdevice import default_linker
from .target import MATH_FUNCTIONS, TRIPLE, is_ptx_identifier, target_machine


@dataclass
class PtxResult:
    llvm_opt: str  # the module after linking libdevice and O3
    ptx: str
    seconds: dict[str, float] = field(default_factory=dict)  # parse, link, opt, emit


# Intrinsics the NVPTX backend cannot select: LLVM 22 aborts the process on them.
_FATAL_INTRINSICS = frozenset([
    "exp", "exp10", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "tanh", "pow", "sincos", "sincospi", "modf",
])
_DECLARED_INTRINSIC = re.compile(r'^declare\b[^@\n]*@"?(llvm\.([a-z0-9]+)\.[\w.]+)"?\(', re.M)
_I128_FP_CONVERSION = re.compile(
    r"\bfpto[su]i\b[^\n]*\bto\s+(?:<\d+\s+x\s+)?i128\b|\b[su]itofp\s+(?:<\d+\s+x\s+)?i128\b")


def _fatal_intrinsic(full_name: str, base: str) -> bool:
    # llvm.exp2 is fine on f32/f16 (ex2.approx) but has no f64 lowering
    return base in _FATAL_INTRINSICS or (base == "exp2" and "f64" in full_name)


def check_lowerable(text: str) -> None:
    """Raise ``CodegenError`` for constructs that make the NVPTX backend abort the process
    ("Cannot select", "no libcall available") instead of reporting an error."""
    for m in _DECLARED_INTRINSIC.finditer(text):
        if _fatal_intrinsic(m.group(1), m.group(2)):
            base = m.group(2)
            hint = (f"; use Target.math({base!r}, ...) (libdevice)" if base in MATH_FUNCTIONS else "")
            raise CodegenError(f"{m.group(1)} cannot be lowered to PTX (LLVM would abort){hint}")
    m = _I128_FP_CONVERSION.search(text)
    if m:
        raise CodegenError(f"conversion between floating point and i128 cannot be lowered to PTX: {m.group(0)!r}")


def _check_declarations(module: llvm.ModuleRef) -> None:
    """The same check on a parsed module's declarations (after O3, which could create them)."""
    for fn in module.functions:
        if fn.is_declaration and fn.name.startswith("llvm."):
            base = fn.name.split(".")[1]
            if _fatal_intrinsic(fn.name, base):
                raise CodegenError(f"{fn.name} cannot be lowered to PTX (LLVM would abort)")


def compile_to_ptx(module: ir.Module | str, arch: str, kernel_names: Sequence[str],
                   opt_level: int = 3) -> PtxResult:
    """LLVM IR (an llvmlite module or its text) → optimised IR and PTX for ``arch``.

    Every function not in ``kernel_names`` becomes internal, so O3 inlines and drops it:
    the PTX has one ``.entry`` per kernel and no libdevice ``.func``.
    """
    tm = target_machine(arch, opt_level)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    text = str(module)
    check_lowerable(text)
    try:
        mod = llvm.parse_assembly(text)
    except RuntimeError as e:
        raise CodegenError(f"LLVM could not parse the module: {e}") from None
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    try:
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM verifier: {e}") from None
    for name in kernel_names:
        if not is_ptx_identifier(name):
            raise CodegenError(f"kernel name {name!r} is not a PTX identifier (ptxas would reject the PTX)")
        try:
            fn = mod.get_function(name)
        except NameError:
            raise CodegenError(f"kernel {name!r} is not defined in the module") from None
        if fn.is_declaration:
            raise CodegenError(f"kernel {name!r} is declared but not defined")
    t1 = time.perf_counter()
    seconds["parse"] = t1 - t0

    default_linker().link_into(mod)
    kernels = set(kernel_names)
    for fn in mod.functions:
        if not fn.is_declaration and fn.name not in kernels:
            fn.linkage = llvm.Linkage.internal
    t2 = time.perf_counter()
    seconds["link"] = t2 - t1

    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=opt_level))
    pb.getModulePassManager().run(mod, pb)
    _check_declarations(mod)
    llvm_opt = str(mod)
    t3 = time.perf_counter()
    seconds["opt"] = t3 - t2

    ptx = tm.emit_assembly(mod)
    seconds["emit"] = time.perf_counter() - t3
    for name in kernel_names:
        if not re.search(rf"\.entry\s+{re.escape(name)}\s*\(", ptx):
            raise CodegenError(f"{name!r} is not a kernel in the PTX: give it the ptx_kernel calling "
                               "convention (NvptxTarget.begin_kernel does)")
    return PtxResult(llvm_opt=llvm_opt, ptx=ptx, seconds=seconds)
