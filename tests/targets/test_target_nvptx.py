"""The NVPTX target: building blocks → PTX (FileCheck), libdevice laziness, ptxas, toolkit search.

No GPU needed. Tests that need libdevice or ptxas skip cleanly when the toolkit is absent.
"""
from __future__ import annotations

import re
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from codegen_helpers import filecheck
from llvmlite import ir

from hlo_compile.codegen.errors import CodegenError, ToolError
from hlo_compile.codegen.llvm_types import F16, F32, F64, I32, I64
from hlo_compile.codegen.target import KernelParam
from hlo_compile.hlo.errors import HloError
from hlo_compile.targets.nvptx import libdevice as libdevice_mod
from hlo_compile.targets.nvptx import toolkit
from hlo_compile.targets.nvptx.libdevice import LibDeviceLinker
from hlo_compile.targets.nvptx import (
    PTX_ARCHS, NvptxTarget, UnsupportedArchError, compile_to_ptx, is_ptx_identifier,
    ptx_identifier, ptx_isa_version,
)
from hlo_compile.targets.nvptx.ptxas import parse_resource_usage, run_ptxas
from hlo_compile.targets.nvptx.toolkit import ToolkitNotFound, find_libdevice, find_ptxas


# ------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def have_libdevice() -> Path:
    try:
        return find_libdevice()
    except ToolkitNotFound:
        pytest.skip("libdevice not found (pip install nvidia-nvvm)")


@pytest.fixture(scope="module")
def ptxas() -> Path:
    found = find_ptxas()
    if found is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    return found


def axpy_module(target: NvptxTarget) -> ir.Module:
    """y[i] = a * x[i] + y[i] for i = block * ntid + tid."""
    m = target.new_module("axpy")
    k = target.begin_kernel(m, "axpy", [KernelParam("x"), KernelParam("y", readonly=False)])
    b = k.builder
    i = b.add(b.mul(target.block_id(b, 0), target.block_dim(b, 0)), target.thread_id(b, 0))
    i64 = b.zext(i, I64)
    px = b.gep(k.args[0], [i64], source_etype=F32)
    py = b.gep(k.args[1], [i64], source_etype=F32)
    ax = b.fmul(ir.Constant(F32, 2.5), b.load(px, typ=F32), flags=["contract"])
    b.store(b.fadd(ax, b.load(py, typ=F32), flags=["contract"]), py)
    target.end_kernel(b)
    return m


def unary_math_module(target: NvptxTarget, fns: list[str], ty: ir.Type) -> ir.Module:
    """out[tid] = f_n(...f_1(in[tid]))."""
    m = target.new_module("math")
    k = target.begin_kernel(m, "unary", [KernelParam("x"), KernelParam("out", readonly=False)])
    b = k.builder
    i = b.zext(target.thread_id(b, 0), I64)
    v = b.load(b.gep(k.args[0], [i], source_etype=ty), typ=ty)
    for fn in fns:
        v = target.math(b, fn, [v])
    b.store(v, b.gep(k.args[1], [i], source_etype=ty))
    target.end_kernel(b)
    return m


def row_sum_module(target: NvptxTarget) -> ir.Module:
    """One block of 256 threads sums a row: warp shuffles, a shared array, a barrier, an
    early exit of warps 1..7, then a butterfly over the 8 partial sums."""
    m = target.new_module("rowsum")
    k = target.begin_kernel(m, "row_sum", [KernelParam("x"), KernelParam("out", readonly=False)])
    b = k.builder
    c = lambda v: ir.Constant(I32, v)  # noqa: E731
    tid, row = target.thread_id(b, 0), target.block_id(b, 0)
    v = b.load(b.gep(k.args[0], [b.zext(b.add(b.mul(row, c(256)), tid), I64)], source_etype=F32), typ=F32)
    for delta in (16, 8, 4, 2, 1):
        v = b.fadd(v, target.shfl_down(b, v, delta))
    partial = target.shared_array(b, "partial", F32, 8)
    warp, lane = b.lshr(tid, c(5)), b.and_(tid, c(31))
    with b.if_then(b.icmp_unsigned("==", lane, c(0))):
        b.store(v, b.gep(partial, [warp], source_etype=F32))
    target.barrier(b)
    with b.if_then(b.icmp_unsigned("!=", warp, c(0))):
        target.ret(b)
    w = b.load(b.gep(partial, [b.and_(lane, c(7))], source_etype=F32), typ=F32)
    w = b.bitcast(target.shfl_xor(b, b.bitcast(w, I32), 4), F32)  # the i32 variant
    for mask in (2, 1):
        w = b.fadd(w, target.shfl_xor(b, w, mask))
    with b.if_then(b.icmp_unsigned("==", lane, c(0))):
        b.store(w, b.gep(k.args[1], [b.zext(row, I64)], source_etype=F32))
    target.end_kernel(b)
    return m


# ------------------------------------------------------------------------------------------
# IR → PTX


@pytest.mark.parametrize("arch,version", [("sm_80", "7.0"), ("sm_90", "7.8")])
def test_axpy_ptx(arch: str, version: str, tmp_path: Path) -> None:
    result = compile_to_ptx(axpy_module(NvptxTarget(arch)), arch, ["axpy"])
    filecheck(result.ptx, f"""
CHECK: .version {version}
CHECK: .target {arch}
CHECK: .visible .entry axpy(
CHECK-DAG: mov.u32 {{{{.*}}}}%tid.x
CHECK-DAG: mov.u32 {{{{.*}}}}%ctaid.x
CHECK-DAG: mov.u32 {{{{.*}}}}%ntid.x
CHECK-DAG: ld.global.nc.b32
CHECK: fma.rn.f32
CHECK: st.global.b32
CHECK-NOT: .func
""", tmp_path)
    assert set(result.seconds) == {"parse", "link", "opt", "emit"}
    assert "noalias" in result.llvm_opt and "ptx_kernel" in result.llvm_opt


@pytest.mark.parametrize("ty,suffix", [(F32, "f"), (F64, "")])
def test_math_inlined_from_libdevice(have_libdevice: Path, ty: ir.Type, suffix: str, tmp_path: Path) -> None:
    target = NvptxTarget("sm_90")
    module = unary_math_module(target, ["tanh", "exp"], ty)
    assert f"declare {ty} @\"__nv_tanh{suffix}\"" in str(module)
    result = compile_to_ptx(module, "sm_90", ["unary"])
    # internalised and inlined: no libdevice function survives, in the IR or the PTX
    assert "@__nv_" not in result.llvm_opt
    filecheck(result.ptx, """
CHECK-NOT: .func
CHECK: .visible .entry unary(
CHECK-NOT: call
CHECK: ret;
CHECK-NOT: .func
""", tmp_path)


def test_row_sum_shared_barrier_shuffles(tmp_path: Path) -> None:
    result = compile_to_ptx(row_sum_module(NvptxTarget("sm_90")), "sm_90", ["row_sum"])
    filecheck(result.ptx, """
CHECK: .visible .entry row_sum(
CHECK: .shared .align 16 .b8 partial[32];
CHECK-COUNT-5: shfl.sync.down.b32 {{.*}}, 31, -1;
CHECK: st.shared.b32
CHECK: bar.sync 0;
CHECK: ld.shared.b32
CHECK-COUNT-3: shfl.sync.bfly.b32
CHECK: st.global.b32
""", tmp_path)
    # --nvptx-short-ptr: shared addresses are 32-bit
    assert "mov.b32" in result.ptx and "partial;" in result.ptx


def test_shared_arrays_get_unique_names_and_dynamic_shared(tmp_path: Path) -> None:
    target = NvptxTarget("sm_80")
    m = target.new_module("smem")
    k = target.begin_kernel(m, "k", [KernelParam("out", readonly=False)])
    b = k.builder
    a1 = target.shared_array(b, "tile", F32, 4)
    a2 = target.shared_array(b, "tile", F32, 4)
    dyn = target.shared_array(b, "dyn", F32, 0)
    assert a1.name != a2.name
    tid = target.thread_id(b, 0)
    for arr in (a1, a2, dyn):
        b.store(ir.Constant(F32, 1.0), b.gep(arr, [tid], source_etype=F32))
    target.barrier(b)
    s = b.fadd(b.load(b.gep(a1, [tid], source_etype=F32), typ=F32), b.load(b.gep(dyn, [tid], source_etype=F32), typ=F32))
    s = b.fadd(s, b.load(b.gep(a2, [tid], source_etype=F32), typ=F32))
    b.store(s, b.gep(k.args[0], [b.zext(tid, I64)], source_etype=F32))
    target.end_kernel(b)
    ptx = compile_to_ptx(m, "sm_80", ["k"]).ptx
    filecheck(ptx, """
CHECK-DAG: .extern .shared .align 16 .b8 dyn[];
CHECK-DAG: .shared .align 16 .b8 tile[16];
CHECK-DAG: .shared .align 16 .b8 tile_1[16];
""", tmp_path)


def test_kernel_without_math_never_loads_libdevice(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = LibDeviceLinker()
    monkeypatch.setattr(libdevice_mod, "_DEFAULT", fresh)

    def forbidden() -> bytes:
        raise AssertionError("libdevice was loaded for a module that calls no __nv_ function")

    monkeypatch.setattr(libdevice_mod, "read_libdevice_bitcode", forbidden)
    result = compile_to_ptx(axpy_module(NvptxTarget("sm_80")), "sm_80", ["axpy"])
    assert ".entry axpy" in result.ptx and not fresh.loaded
    result = compile_to_ptx(row_sum_module(NvptxTarget("sm_80")), "sm_80", ["row_sum"])
    assert not fresh.loaded
    # while a module that does call libdevice goes to the loader
    with pytest.raises(AssertionError, match="libdevice was loaded"):
        compile_to_ptx(unary_math_module(NvptxTarget("sm_80"), ["tanh"], F32), "sm_80", ["unary"])


def test_missing_libdevice_is_a_clean_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libdevice_mod, "_DEFAULT", LibDeviceLinker())

    def missing() -> Path:
        raise ToolkitNotFound("libdevice (libdevice.10.bc) not found")

    monkeypatch.setattr(libdevice_mod, "find_libdevice", missing)
    with pytest.raises(HloError, match="libdevice"):
        compile_to_ptx(unary_math_module(NvptxTarget("sm_80"), ["exp"], F32), "sm_80", ["unary"])


def test_libdevice_snippets_are_cached(have_libdevice: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    linker = LibDeviceLinker()
    monkeypatch.setattr(libdevice_mod, "_DEFAULT", linker)
    target = NvptxTarget("sm_80")
    compile_to_ptx(unary_math_module(target, ["log1p"], F32), "sm_80", ["unary"])
    compile_to_ptx(unary_math_module(target, ["log1p"], F32), "sm_80", ["unary"])
    compile_to_ptx(unary_math_module(target, ["log1p", "erf"], F32), "sm_80", ["unary"])
    assert len(linker._snippets) == 2
    # a new set of names already seen is cut from the union module, not from libdevice
    compile_to_ptx(unary_math_module(target, ["erf"], F32), "sm_80", ["unary"])
    assert len(linker._snippets) == 3
    assert [names for names, _ in linker._unions.values()] == [frozenset({"__nv_log1pf", "__nv_erff"})]


def test_libdevice_declaration_checks(have_libdevice: Path) -> None:
    wrong_type = """
declare double @__nv_tanhf(double)
define ptx_kernel void @k(ptr %p) {
  %x = load double, ptr %p
  %y = call double @__nv_tanhf(double %x)
  store double %y, ptr %p
  ret void
}"""
    with pytest.raises(CodegenError, match="__nv_tanhf is declared as double"):
        compile_to_ptx(wrong_type, "sm_80", ["k"])
    unknown = wrong_type.replace("__nv_tanhf", "__nv_frobnicate")
    with pytest.raises(CodegenError, match="not a libdevice function: __nv_frobnicate"):
        compile_to_ptx(unknown, "sm_80", ["k"])


def test_math_rejects_bad_calls_before_llvm() -> None:
    target = NvptxTarget("sm_80")
    m = target.new_module("bad")
    k = target.begin_kernel(m, "k", [KernelParam("x")])
    b = k.builder
    x = ir.Constant(F32, 1.0)
    with pytest.raises(ValueError, match="unknown math function 'frobnicate' for the NVPTX target"):
        target.math(b, "frobnicate", [x])
    with pytest.raises(ValueError, match="takes 2 argument"):
        target.math(b, "pow", [x])
    with pytest.raises(ValueError, match="float or double"):
        target.math(b, "exp", [ir.Constant(F16, 1.0)])
    with pytest.raises(ValueError, match="float or double"):
        target.math(b, "atan2", [x, ir.Constant(F64, 1.0)])
    with pytest.raises(ValueError, match="i32 or float"):
        target.shfl_down(b, ir.Constant(F64, 1.0), 1)
    assert "__nv_" not in str(m)


@pytest.mark.parametrize("intrinsic,ty", [("llvm.sin.f32", "float"), ("llvm.tanh.f32", "float"),
                                          ("llvm.exp2.f64", "double"), ("llvm.pow.f64", "double")])
def test_aborting_intrinsics_are_reported(intrinsic: str, ty: str) -> None:
    two = intrinsic.startswith("llvm.pow")
    params = f"{ty}, {ty}" if two else ty
    args = f"{ty} %x, {ty} %x" if two else f"{ty} %x"
    text = f"""
declare {ty} @{intrinsic}({params})
define ptx_kernel void @k(ptr %p) {{
  %x = load {ty}, ptr %p
  %y = call {ty} @{intrinsic}({args})
  store {ty} %y, ptr %p
  ret void
}}"""
    with pytest.raises(CodegenError, match=intrinsic.replace(".", r"\.")):
        compile_to_ptx(text, "sm_90", ["k"])


def test_aborting_intrinsic_built_with_llvmlite_is_reported() -> None:
    target = NvptxTarget("sm_90")
    m = target.new_module("sin")
    k = target.begin_kernel(m, "k", [KernelParam("x", readonly=False)])
    b = k.builder
    p = b.gep(k.args[0], [b.zext(target.thread_id(b, 0), I64)], source_etype=F32)
    sin = m.declare_intrinsic("llvm.sin", [F32])  # printed as @"llvm.sin.f32"
    b.store(b.call(sin, [b.load(p, typ=F32)]), p)
    target.end_kernel(b)
    with pytest.raises(CodegenError, match=r"llvm\.sin\.f32 .*Target\.math\('sin'"):
        compile_to_ptx(m, "sm_90", ["k"])


def test_safe_intrinsics_compile() -> None:
    text = """
declare float @llvm.exp2.f32(float)
declare float @llvm.sqrt.f32(float)
define ptx_kernel void @k(ptr %p) {
  %x = load float, ptr %p
  %y = call float @llvm.exp2.f32(float %x)
  %z = call float @llvm.sqrt.f32(float %y)
  store float %z, ptr %p
  ret void
}"""
    ptx = compile_to_ptx(text, "sm_90", ["k"]).ptx
    assert "ex2.approx" in ptx and "sqrt.rn.f32" in ptx


def test_i128_float_conversion_is_reported() -> None:
    text = """
define ptx_kernel void @k(ptr %p) {
  %x = load double, ptr %p
  %y = fptosi double %x to i128
  store i128 %y, ptr %p
  ret void
}"""
    with pytest.raises(CodegenError, match="i128"):
        compile_to_ptx(text, "sm_90", ["k"])


def test_verifier_failure_is_codegen_error() -> None:
    text = """
define ptx_kernel void @k(ptr %p) {
entry:
  br label %a
a:
  store i32 %v, ptr %p
  ret void
b:
  %v = add i32 1, 2
  br label %a
}"""
    with pytest.raises(CodegenError, match="dominate") as info:
        compile_to_ptx(text, "sm_80", ["k"])
    assert isinstance(info.value, HloError)
    with pytest.raises(CodegenError, match="could not parse"):
        compile_to_ptx("define void @k( {", "sm_80", ["k"])


def test_kernel_names_are_checked() -> None:
    plain = "define void @f(ptr %p) {\n  ret void\n}"
    with pytest.raises(CodegenError, match="ptx_kernel"):
        compile_to_ptx(plain, "sm_80", ["f"])
    with pytest.raises(CodegenError, match="'g' is not defined"):
        compile_to_ptx(plain, "sm_80", ["g"])


def test_kernel_names_must_be_ptx_identifiers() -> None:
    target = NvptxTarget("sm_80")
    with pytest.raises(ValueError, match="'fusion_1'"):
        target.begin_kernel(target.new_module("m"), "fusion.1", [])
    assert ptx_identifier("fusion.1") == "fusion_1" and ptx_identifier("1abc") == "_1abc"
    assert is_ptx_identifier("loop_add$2") and not is_ptx_identifier("_")
    text = 'define ptx_kernel void @"fusion.1"(ptr %p) {\n  ret void\n}'
    with pytest.raises(CodegenError, match="not a PTX identifier"):
        compile_to_ptx(text, "sm_80", ["fusion.1"])


def test_arch_validation() -> None:
    assert ptx_isa_version("sm_90a") == 80 and ptx_isa_version("sm_75") == 63
    assert ptx_isa_version("sm_100") == 86 and ptx_isa_version("sm_120") == 87
    assert all(ptx_isa_version(a) <= 90 for a in PTX_ARCHS)
    for bad in ("sm_70", "sm_61", "compute_90", "gfx90a", "sm_999"):
        with pytest.raises(UnsupportedArchError, match="unsupported GPU architecture") as info:
            NvptxTarget(bad)
        assert isinstance(info.value, HloError)
    with pytest.raises(UnsupportedArchError):
        compile_to_ptx("", "sm_70", [])


# ------------------------------------------------------------------------------------------
# ptxas


def _all_kernels() -> list[tuple[str, object]]:
    return [("axpy", axpy_module), ("row_sum", row_sum_module),
            ("unary", lambda t: unary_math_module(t, ["tanh", "exp"], F32)),
            ("unary", lambda t: unary_math_module(t, ["tanh", "exp"], F64))]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_every_kernel(ptxas: Path, have_libdevice: Path, arch: str) -> None:
    for name, build in _all_kernels():
        ptx = compile_to_ptx(build(NvptxTarget(arch)), arch, [name]).ptx
        result = run_ptxas(ptx, arch, ptxas)
        assert result.cubin.startswith(b"\x7fELF")
        assert set(result.kernels) == {name}
        assert result.kernels[name].registers > 0, result.log
        assert result.kernels[name].spill_stores_bytes == 0
        if name == "row_sum":
            assert result.kernels[name].shared_bytes == 32 and result.kernels[name].barriers == 1


def test_ptxas_failure_carries_log_and_reproducer(ptxas: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ptx = compile_to_ptx(axpy_module(NvptxTarget("sm_90")), "sm_90", ["axpy"]).ptx
    broken = ptx.replace("st.global.b32", "st.global.bogus.b32")
    with pytest.raises(ToolError) as info:
        run_ptxas(broken, "sm_90", ptxas)
    err = info.value
    assert isinstance(err, HloError)
    assert "bogus" in err.tool_output or "error" in err.tool_output.lower()
    assert err.reproduce in str(err) and "-arch=sm_90" in err.reproduce and "/dev/null" in err.reproduce
    assert "--emit=ptx" in str(err) and err.kernel == "axpy", str(err)  # the PTX line's kernel
    assert not list(tmp_path.glob("hlo-compile-ptxas-*"))  # nothing kept: the message says how to rerun
    argv = shlex.split(err.reproduce)
    kept = tmp_path / "kernel.ptx"
    kept.write_text(broken)
    again = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode != 0


def _too_much_shared(ptx: str, kernel: str) -> str:
    """``ptx`` with 300000 bytes of static shared memory used in ``kernel``: ptxas compiles
    every kernel (an info report each) and then refuses that one."""
    start = ptx.index(f".entry {kernel}(")
    body = ptx.index("{", start) + 1
    end = ptx.index("ret;", body)
    return (ptx[:body] + "\n\t.shared .align 4 .b8 too_big[300000];\n\t.reg .b64 %too_big_p;\n" + ptx[body:end]
            + "mov.u64 %too_big_p, too_big;\n\tst.shared.u32 [%too_big_p+299996], 0;\n\t" + ptx[end:])


def test_ptxas_failure_names_one_kernel_briefly_and_leaves_nothing(ptxas: Path, have_libdevice: Path,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from hlo_compile.driver import stages
    from hlo_compile.cli.compile import main as compile_main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    n = 30  # XLA's fusions stay kernels: 30 info reports from ptxas
    lines = ["HloModule many"]
    for i in range(1, n + 1):
        lines += [f"c{i} {{", "  p = f32[256] parameter(0)", f"  k = f32[] constant({i}.5)",  # distinct kernels
                  "  b = f32[256] broadcast(k), dimensions={}", "  ROOT r = f32[256] multiply(p, b)", "}"]
    lines += ["ENTRY e {", "  x0 = f32[256] parameter(0)"]
    lines += [f"  {'ROOT ' if i == n else ''}x{i} = f32[256] fusion(x{i - 1}), kind=kLoop, calls=c{i}"
              for i in range(1, n + 1)]
    lines += ["}"]
    module = tmp_path / "many.hlo"
    module.write_text("\n".join(lines) + "\n")
    real = stages.run_ptxas
    victim = {}

    def refused(ptx, arch, *args, **kwargs):
        names = re.findall(r"\.entry\s+(\w+)\(", ptx)
        assert len(names) > 20, names
        victim["name"] = names[len(names) // 2]
        return real(_too_much_shared(ptx, victim["name"]), arch, *args, **kwargs)

    monkeypatch.setattr(stages, "run_ptxas", refused)
    r = CliRunner().invoke(compile_main, [str(module), "--emit=cubin", "--arch=sm_90", "--no-cache",
                                          "-q", "-j1", "-o", str(tmp_path / "out.cubin")], catch_exceptions=False)
    assert r.exit_code != 0
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert "too much shared data" in err and f"'{victim['name']}'" in err, err
    assert len(err.splitlines()) < 20, err
    other = [k for k in re.findall(r"Compiling entry function '(\w+)'", err) if k != victim["name"]]
    assert not other, err
    assert not list(tmp_path.glob("hlo-compile-ptxas-*"))


def test_ptxas_success_leaves_nothing(ptxas: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ptx = compile_to_ptx(axpy_module(NvptxTarget("sm_90")), "sm_90", ["axpy"]).ptx
    assert set(run_ptxas(ptx, "sm_90", ptxas).kernels) == {"axpy"}
    assert not list(tmp_path.iterdir())


def test_parse_resource_usage() -> None:
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'transpose' for 'sm_90'
ptxas info    : Function properties for transpose
    0 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4224 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 368 bytes cmem[0]
"""
    usage = parse_resource_usage(log)
    assert set(usage) == {"transpose", "plain"}
    t = usage["transpose"]
    assert (t.registers, t.spill_stores_bytes, t.spill_loads_bytes, t.shared_bytes, t.barriers) == (40, 16, 12, 4224, 1)
    assert (usage["plain"].registers, usage["plain"].shared_bytes) == (8, 0)


# ------------------------------------------------------------------------------------------
# toolkit search (fake directories only)


@pytest.fixture
def no_toolkit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment with no CUDA anywhere; returns an empty directory put on PATH."""
    for var in toolkit.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(toolkit, "nvidia_package_dirs", lambda: [])
    monkeypatch.setattr(toolkit, "pathfinder_lookup", lambda kind: (None, "cuda-pathfinder left out by this test"))
    monkeypatch.setattr(toolkit, "SYSTEM_ROOTS", ())
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def _fake_toolkit(root: Path, libdevice: bool = True, ptxas: bool = True) -> Path:
    if libdevice:
        (root / "nvvm" / "libdevice").mkdir(parents=True)
        (root / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    if ptxas:
        (root / "bin").mkdir(parents=True, exist_ok=True)
        exe = root / "bin" / "ptxas"
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return root


def test_nothing_found(no_toolkit: Path) -> None:
    assert find_ptxas() is None
    with pytest.raises(ToolkitNotFound) as info:
        find_libdevice()
    message = str(info.value)
    assert isinstance(info.value, HloError)
    assert "pip install nvidia-nvvm" in message and "CUDA_HOME" in message


def test_env_order(no_toolkit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = _fake_toolkit(tmp_path / "ours")
    cuda_home = _fake_toolkit(tmp_path / "cuda_home")
    cuda_path = _fake_toolkit(tmp_path / "cuda_path")
    monkeypatch.setenv("CUDA_PATH", str(cuda_path))
    assert find_libdevice() == cuda_path / "nvvm/libdevice/libdevice.10.bc"
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    assert find_ptxas() == cuda_home / "bin/ptxas"
    monkeypatch.setenv("HLO_COMPILE_CUDA_HOME", str(ours))
    assert find_libdevice() == ours / "nvvm/libdevice/libdevice.10.bc"
    assert find_ptxas() == ours / "bin/ptxas"


def test_env_root_without_the_file_falls_through(no_toolkit: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "does-not-exist"))
    with pytest.raises(ToolkitNotFound) as info:
        find_libdevice()
    assert str(tmp_path / "does-not-exist") in str(info.value) and "$CUDA_HOME" in str(info.value)
    system = _fake_toolkit(tmp_path / "usr-local-cuda")
    monkeypatch.setattr(toolkit, "SYSTEM_ROOTS", (system,))
    assert find_libdevice() == system / "nvvm/libdevice/libdevice.10.bc"
    assert find_ptxas() == system / "bin/ptxas"


@pytest.mark.parametrize("layout", ["cu13", "cuda_nvcc"])
def test_pip_wheel_layouts(no_toolkit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    site = tmp_path / "site-packages"
    _fake_toolkit(site / "nvidia" / layout)
    monkeypatch.setattr(toolkit, "SYSTEM_ROOTS", (_fake_toolkit(tmp_path / "system"),))
    monkeypatch.setattr(toolkit, "nvidia_package_dirs", lambda: [site / "nvidia"])
    assert find_libdevice() == site / "nvidia" / layout / "nvvm/libdevice/libdevice.10.bc"
    assert find_ptxas() == site / "nvidia" / layout / "bin/ptxas"


def test_wheels_found_through_the_namespace_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site-packages"
    (site / "nvidia").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    assert site / "nvidia" in toolkit.nvidia_package_dirs()


def test_ptxas_on_path_is_the_last_resort(no_toolkit: Path, tmp_path: Path) -> None:
    kit = _fake_toolkit(tmp_path / "kit")
    (no_toolkit / "ptxas").symlink_to(kit / "bin" / "ptxas")
    assert find_ptxas() == no_toolkit / "ptxas"
    # libdevice of the toolkit that ptxas (resolved) belongs to
    assert find_libdevice() == kit / "nvvm/libdevice/libdevice.10.bc"


def test_non_executable_ptxas_is_skipped(no_toolkit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kit = _fake_toolkit(tmp_path / "kit")
    (kit / "bin" / "ptxas").chmod(0o644)
    monkeypatch.setenv("CUDA_HOME", str(kit))
    assert find_ptxas() is None


@pytest.mark.parametrize("block, bounded", [((1024, 1, 1), True), ((32, 16, 1), True), ((256, 1, 1), False),
                                            (None, False)])
def test_blocks_over_256_threads_bound_the_registers(block, bounded: bool, tmp_path: Path) -> None:
    """A kernel launched with more than 256 threads per block carries ``.maxntid`` of its block,
    so ptxas keeps its registers within 65536 / threads (a 1024-thread ResNet-50 reduction got 78
    registers without it: not launchable); smaller blocks fit with any count and stay unbounded."""
    target = NvptxTarget("sm_80")
    m = target.new_module("k")
    k = target.begin_kernel(m, "k", [KernelParam("x", readonly=False)], block=block)
    target.end_kernel(k.builder)
    ptx = compile_to_ptx(m, "sm_80", ["k"]).ptx
    if bounded:
        filecheck(ptx, f"CHECK: .visible .entry k(\nCHECK: .maxntid {block[0]}, {block[1]}, {block[2]}\n", tmp_path)
    else:
        assert ".maxntid" not in ptx


def test_a_column_reduction_of_1024_threads_is_bounded(tmp_path: Path) -> None:
    from hlo_compile import parse_module
    from hlo_compile.options import CompileOptions
    from hlo_compile.driver.pipeline import run_pipeline
    text = """HloModule red
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4096,512]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[512]{0} reduce(x, z), dimensions={0}, to_apply=add
}
"""
    result = run_pipeline(parse_module(text), CompileOptions(arch="sm_80"), emit="ptx")
    filecheck(result.values["ptx"], "CHECK: .entry r(\nCHECK: .maxntid 1024, 1, 1\n", tmp_path)
