"""The target boundary (DESIGN §1, §3): code generation reaches a machine only through the
target interface of ``codegen/target.py``; NVPTX intrinsics, address spaces and names live in
``targets/nvptx/``, the host's in ``targets/host/``.

- No source under ``hlo_compile/codegen/`` mentions NVVM intrinsics, address spaces or NVPTX
  (comments and docstrings included: they would be the first step back).
- ``codegen/`` imports nothing of ``targets/`` (the layering of DESIGN §1).
- The interface's optional features on both targets: tensor cores (``has_tensor_cores``,
  ``warp_mma``: the host refuses, NVPTX only where the arch and the options allow) and the
  symbols each target links by name (``linked_symbols``), which the planner keeps kernels off.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from llvmlite import ir

import hlo_compile.codegen as codegen_pkg
from hlo_compile import parse_module
from hlo_compile.codegen.compiler import kernel_symbol, plan_module
from hlo_compile.codegen.llvm_types import F16, F32, I32
from hlo_compile.codegen.target import KernelParam, Target, TargetFeatureError, WarpMma
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.targets import reserved_kernel_symbols
from hlo_compile.targets.host import HostTarget
from hlo_compile.targets.nvptx import NvptxTarget, compile_to_ptx

CODEGEN = Path(codegen_pkg.__file__).parent
FORBIDDEN = re.compile(r"nvvm|addrspace\s*[(=]|nvptx", re.IGNORECASE)  # addrspace(3) in IR, addrspace=3 in llvmlite


def _codegen_sources() -> list[Path]:
    files = sorted(CODEGEN.rglob("*.py"))
    assert len(files) > 10, f"found only {files} under {CODEGEN}"
    return files


def test_codegen_never_names_a_target():
    hits = [f"{path.relative_to(CODEGEN.parent)}:{n}: {line.strip()}"
            for path in _codegen_sources()
            for n, line in enumerate(path.read_text().splitlines(), 1) if FORBIDDEN.search(line)]
    assert not hits, ("target knowledge in codegen/ (move it behind the Target interface, "
                      "codegen/target.py):\n" + "\n".join(hits))


def test_the_forbidden_words_are_found():
    """The pattern itself catches what the boundary is about (a grep that finds nothing
    because it looks for nothing would pass forever)."""
    for text in ("llvm.nvvm.barrier0", "ptr addrspace(3)", "ir.PointerType(addrspace=3)", "NVPTX",
                 "NvptxTarget", "targets.nvptx"):
        assert FORBIDDEN.search(text), text


def _imported_modules(path: Path) -> list[str]:
    """Absolute names of every module ``path`` imports, or imports a name from (relative
    imports resolved; ``from .. import x`` counts as both ``hlo_compile`` and ``hlo_compile.x``)."""
    package = ["hlo_compile", *path.relative_to(CODEGEN.parent).parts[:-1]]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out += [module] + [f"{module}.{a.name}" for a in node.names]
    return out


def test_codegen_imports_nothing_of_targets():
    bad = [f"{path.relative_to(CODEGEN.parent)}: {m}" for path in _codegen_sources()
           for m in _imported_modules(path) if m == "hlo_compile.targets" or m.startswith("hlo_compile.targets.")]
    assert not bad, bad


def test_the_import_check_resolves_relative_imports():
    emitters = CODEGEN / "emitters"
    assert "hlo_compile.codegen.target" in _imported_modules(emitters / "gemm" / "dot_mma.py")
    assert "hlo_compile.codegen.target" in _imported_modules(CODEGEN / "compiler.py")


# ---- tensor cores ---------------------------------------------------------------------------------

def _kernel(target: Target):
    module = target.new_module("m")
    kf = target.begin_kernel(module, "k", [KernelParam("p", readonly=False)])
    return module, kf.builder


def test_host_has_no_tensor_cores():
    t = HostTarget()
    assert t.has_tensor_cores() is False
    module, b = _kernel(t)
    with pytest.raises(TargetFeatureError, match="host target has no tensor cores"):
        t.warp_mma(b, "bf16")
    assert not [g for g in module.globals if "mma" in g or "ldmatrix" in g]


def test_host_ignores_the_option_attribute():
    t = HostTarget("coro")
    t.dot_tensor_cores = True  # whatever a caller sets, the CPU has no tensor cores
    assert not t.has_tensor_cores()


@pytest.mark.parametrize("arch,flag,expected", [
    ("sm_80", True, True), ("sm_90", True, True), ("sm_90a", True, True), ("sm_120", True, True),
    ("sm_75", True, False), ("sm_80", False, False), ("sm_90", False, False),
])
def test_nvptx_tensor_cores_need_the_arch_and_the_option(arch, flag, expected):
    assert NvptxTarget(arch, dot_tensor_cores=flag).has_tensor_cores() is expected


@pytest.mark.parametrize("arch,flag,why", [("sm_75", True, "sm_75 has no mma"), ("sm_90", False, "dot_tensor_cores is off")])
def test_nvptx_refuses_mma_without_tensor_cores(arch, flag, why):
    t = NvptxTarget(arch, dot_tensor_cores=flag)
    _, b = _kernel(t)
    with pytest.raises(TargetFeatureError, match=why):
        t.warp_mma(b, "f16")


def test_nvptx_mma_takes_f16_or_bf16_only():
    t = NvptxTarget("sm_80", dot_tensor_cores=True)
    _, b = _kernel(t)
    with pytest.raises(ValueError, match="f16 or bf16"):
        t.warp_mma(b, "f32")


@pytest.mark.parametrize("element_type,fragment,ptx_mma", [
    ("bf16", I32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
    ("f16", ir.VectorType(F16, 2), "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
])
def test_nvptx_warp_mma_is_ldmatrix_and_mma_sync(element_type, fragment, ptx_mma):
    """One warp's ldmatrix.x4 of a shared tile and one mma, through the interface only; the
    accumulators go to global memory so nothing is optimised away."""
    t = NvptxTarget("sm_80", dot_tensor_cores=True)
    module, b = _kernel(t)
    out = b.function.args[0]
    tile = t.shared_array(b, "tile", I32, 16 * 8)
    lane = t.thread_id(b, 0)
    mma = t.warp_mma(b, element_type)
    assert isinstance(mma, WarpMma) and mma.element_type == element_type
    regs = mma.load_matrix_x4(b, b.gep(tile, [b.mul(lane, ir.Constant(I32, 4))], source_etype=I32))
    assert len(regs) == 4 and all(r.type == fragment for r in regs)
    c = [ir.Constant(F32, float(i)) for i in range(4)]
    d = mma.mma(b, regs, regs[:2], c)
    for r in range(4):
        index = b.add(b.mul(lane, ir.Constant(I32, 4)), ir.Constant(I32, r))
        b.store(b.extract_value(d, r), b.gep(out, [index], source_etype=F32))
    t.end_kernel(b)
    text = str(module)
    assert text.count("declare") == 3  # the tid sreg, mma, ldmatrix: declared once each
    ptx = compile_to_ptx(module, "sm_80", ["k"]).ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert ptx_mma in ptx


def test_warp_mma_declares_once_per_module():
    t = NvptxTarget("sm_90", dot_tensor_cores=True)
    module, b = _kernel(t)
    t.warp_mma(b, "bf16")
    t.warp_mma(b, "bf16")
    assert sum(1 for name in module.globals if "mma" in name or "ldmatrix" in name) == 2


# ---- symbols a kernel must not take ---------------------------------------------------------------

def test_host_links_libm_and_libc_by_name():
    names = HostTarget.linked_symbols
    for n in ("exp", "expf", "tanhf", "pow", "fmodf", "sqrtf", "malloc", "free", "memcpy"):
        assert n in names, n
    assert not NvptxTarget.linked_symbols  # libdevice is __nv_*, which no kernel name takes
    assert reserved_kernel_symbols() == HostTarget.linked_symbols | NvptxTarget.linked_symbols


def test_kernel_symbol_avoids_reserved_names():
    reserved = reserved_kernel_symbols()
    taken: set[str] = set()
    assert kernel_symbol("exp", taken, reserved) == "k_exp"
    assert kernel_symbol("free", taken, reserved) == "k_free"
    assert kernel_symbol("exp.1", taken, reserved) == "exp_1"
    assert kernel_symbol("exp", set()) == "exp"  # nothing reserved, nothing renamed


SINH = """HloModule m
ENTRY e {
  x = f64[64] parameter(0)
  ROOT sinh = f64[64] sinh(x)
}"""


def test_pipeline_plans_with_every_targets_symbols():
    """A fusion named like a libm function gets another kernel name, in the PTX too."""
    plan = run_pipeline(parse_module(SINH), CompileOptions(), emit="fusions").values["fusions"]
    (kernel,) = plan.kernels
    assert kernel.kernel_name == "k_sinh"
    (direct,) = plan_module(parse_module(SINH), CompileOptions(), reserved_kernel_symbols()).kernels
    assert direct.kernel_name == "k_sinh"
