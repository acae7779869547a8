"""A renamed module hits the kernel cache (issue 17's leftover): XLA renumbers ``%fusion.123``
between dumps, so a kernel's entry is keyed on its IR under canonical names
(``kernel_names``), and its optimised IR and PTX are named again on the way out, the same bytes
as a cold compile of the renamed module. The whole result stays keyed on the exact text."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as compile_main
from hlo_compile.driver.kernel_cache import KernelCache
from hlo_compile.driver.kernel_names import CanonicalKernel, canonical_ir, ptx_symbol, restore_ir, restore_ptx
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import needs_libdevice

# XLA:GPU's style after its fusion passes: two loop fusions of one structure (one kernel), a
# reduction with its reducer, names as XLA numbers them
MODULE = """\
HloModule renamed_model, entry_computation_layout={(f32[64,256]{1,0}, f32[256]{0})->(f32[64]{0}, f32[64,256]{1,0})}

%region_0.7 (Arg_0.8: f32[], Arg_1.9: f32[]) -> f32[] {
  %Arg_0.8 = f32[] parameter(0)
  %Arg_1.9 = f32[] parameter(1)
  ROOT %add.10 = f32[] add(f32[] %Arg_0.8, f32[] %Arg_1.9)
}

%fused_computation (param_0: f32[64,256], param_1.2: f32[256]) -> f32[64,256] {
  %param_0 = f32[64,256]{1,0} parameter(0)
  %param_1.2 = f32[256]{0} parameter(1)
  %broadcast.3 = f32[64,256]{1,0} broadcast(f32[256]{0} %param_1.2), dimensions={1}
  %add.4 = f32[64,256]{1,0} add(f32[64,256]{1,0} %param_0, f32[64,256]{1,0} %broadcast.3)
  ROOT %tanh.5 = f32[64,256]{1,0} tanh(f32[64,256]{1,0} %add.4)
}

%fused_computation.1 (param_0.1: f32[64,256]) -> f32[64] {
  %param_0.1 = f32[64,256]{1,0} parameter(0)
  %multiply.6 = f32[64,256]{1,0} multiply(f32[64,256]{1,0} %param_0.1, f32[64,256]{1,0} %param_0.1)
  %constant.11 = f32[] constant(0)
  ROOT %reduce.12 = f32[64]{0} reduce(f32[64,256]{1,0} %multiply.6, f32[] %constant.11), dimensions={1}, \
to_apply=%region_0.7
}

%fused_computation.2 (param_0.3: f32[64,256], param_1.4: f32[256]) -> f32[64,256] {
  %param_0.3 = f32[64,256]{1,0} parameter(0)
  %param_1.4 = f32[256]{0} parameter(1)
  %broadcast.13 = f32[64,256]{1,0} broadcast(f32[256]{0} %param_1.4), dimensions={1}
  %add.14 = f32[64,256]{1,0} add(f32[64,256]{1,0} %param_0.3, f32[64,256]{1,0} %broadcast.13)
  ROOT %tanh.15 = f32[64,256]{1,0} tanh(f32[64,256]{1,0} %add.14)
}

ENTRY %main.20 (Arg_0.1: f32[64,256], Arg_1.2: f32[256]) -> (f32[64], f32[64,256]) {
  %Arg_0.1 = f32[64,256]{1,0} parameter(0)
  %Arg_1.2 = f32[256]{0} parameter(1)
  %loop_tanh_fusion = f32[64,256]{1,0} fusion(f32[64,256]{1,0} %Arg_0.1, f32[256]{0} %Arg_1.2), kind=kLoop, \
calls=%fused_computation
  %loop_tanh_fusion.1 = f32[64,256]{1,0} fusion(f32[64,256]{1,0} %loop_tanh_fusion, f32[256]{0} %Arg_1.2), \
kind=kLoop, calls=%fused_computation.2
  %input_reduce_fusion = f32[64]{0} fusion(f32[64,256]{1,0} %loop_tanh_fusion.1), kind=kInput, \
calls=%fused_computation.1
  ROOT %tuple.21 = (f32[64]{0}, f32[64,256]{1,0}) tuple(f32[64]{0} %input_reduce_fusion, f32[64,256]{1,0} \
%loop_tanh_fusion.1)
}
""".replace("\\\n", "")

_NAME = re.compile(r"%([A-Za-z_][\w.\-]*)")
_SIGNATURE_PARAM = re.compile(r"([(,] ?)([A-Za-z_][\w.\-]*)(: )")


def rename_all(text: str, tag: str = "v2") -> str:
    """Every instruction and computation name changed (as XLA renumbers between dumps): each
    ``%name`` and each parameter name of a computation's signature, consistently."""
    names = {m.group(1) for m in _NAME.finditer(text)}
    new = {n: f"{tag}_{re.sub(r'[^A-Za-z0-9]', '_', n)}.{k}" for k, n in enumerate(sorted(names))}
    out = _NAME.sub(lambda m: "%" + new[m.group(1)], text)
    lines = [_SIGNATURE_PARAM.sub(lambda m: m.group(1) + new.get(m.group(2), m.group(2)) + m.group(3), line)
             if line.startswith(("%", "ENTRY")) and "->" in line else line for line in out.splitlines()]
    return "\n".join(lines) + "\n"


_needs_libdevice = needs_libdevice


def _compile(text: str, cache):
    return run_pipeline(parse_module(text), CompileOptions(), emit="ptx", cache=cache)


def test_renaming_changes_every_name():
    renamed = rename_all(MODULE)
    old, new = parse_module(MODULE), parse_module(renamed)
    names = lambda m: {c.name for c in m.computations} | {i.name for c in m.computations for i in c.instructions}  # noqa: E731
    assert names(old).isdisjoint(names(new)) and len(names(old)) == len(names(new))
    assert [f.name for f in new.entry.instructions if f.opcode == "fusion"] == [
        "v2_loop_tanh_fusion.14", "v2_loop_tanh_fusion_1.15", "v2_input_reduce_fusion.13"]


def test_renamed_module_hits_every_kernel_with_the_bytes_of_a_cold_compile(tmp_path):
    _needs_libdevice()
    cache = KernelCache(tmp_path)
    original = _compile(MODULE, cache)
    assert original.cache_hits == [] and original.values["llvm-opt"].from_cache == 0
    renamed = rename_all(MODULE)
    warm = _compile(renamed, cache)
    v = warm.values["llvm-opt"]
    kernels = len(warm.plan.unique_kernels)
    assert kernels == 2
    assert (v.from_cache, v.renamed) == (kernels, kernels) and warm.cache_hits == ["llvm-opt"]
    cold = _compile(renamed, None)
    for stage in ("llvm", "llvm-opt", "ptx"):
        assert warm.artifacts[stage] == cold.artifacts[stage], stage
    assert warm.values["llvm-opt"].optimized == cold.values["llvm-opt"].optimized
    ptx = warm.artifacts["ptx"]
    assert ".entry v2_loop_tanh_fusion_14(" in ptx and "v2_loop_tanh_fusion_14_param_0" in ptx
    assert "v2_input_reduce_fusion_13" in ptx and "loop_tanh_fusion(" not in ptx
    assert "__hlo_" not in ptx + warm.artifacts["llvm-opt"]
    for name in ("%in0.v2_param_0.", "@v2_loop_tanh_fusion_14"):  # the IR names the renamed module's
        assert name in warm.artifacts["llvm-opt"]
    # under its own names again: found under them, not renamed
    again = _compile(MODULE, cache).values["llvm-opt"]
    assert (again.from_cache, again.renamed) == (kernels, 0)
    assert _compile(MODULE, cache).artifacts["ptx"] == original.artifacts["ptx"]


def test_a_changed_kernel_is_not_found_under_another_names(tmp_path):
    _needs_libdevice()
    cache = KernelCache(tmp_path)
    _compile(MODULE, cache)
    changed = rename_all(MODULE).replace("constant(0)", "constant(1)")  # the reduction's init
    v = _compile(changed, cache).values["llvm-opt"]
    assert (v.from_cache, v.renamed) == (1, 1)  # the loop kernel only
    cold = _compile(changed, None)
    assert _compile(changed, cache).artifacts["ptx"] == cold.artifacts["ptx"]


def test_kernel_compiled_under_its_names_where_they_cannot_be_put_back(tmp_path, monkeypatch):
    _needs_libdevice()
    import hlo_compile.driver.kernel_names as kn
    reference = _compile(MODULE, None)
    monkeypatch.setattr(kn, "restore_ptx", lambda text, kernel: None)
    cache = KernelCache(tmp_path)
    r = _compile(MODULE, cache)
    assert r.artifacts["ptx"] == reference.artifacts["ptx"]  # the same bytes LLVM makes under its names
    assert r.values["llvm-opt"].from_cache == 0
    # the canonical entry was kept; it cannot be named back here either, so the kernel is compiled again
    assert _compile(rename_all(MODULE), cache).values["llvm-opt"].renamed == 0


def test_whole_result_is_keyed_on_the_exact_text(tmp_path):
    _needs_libdevice()
    a, b = tmp_path / "a.hlo", tmp_path / "b.hlo"
    a.write_text(MODULE)
    b.write_text(rename_all(MODULE))
    runner = CliRunner()
    d = tmp_path / "cache"
    first = runner.invoke(compile_main, [str(a), "--emit=ptx", "--cache-dir", str(d)])
    assert first.exit_code == 0, first.output
    warm = runner.invoke(compile_main, [str(b), "--emit=ptx", "--cache-dir", str(d)])
    cold = runner.invoke(compile_main, [str(b), "--emit=ptx", "--no-cache"])
    assert warm.exit_code == cold.exit_code == 0
    assert warm.stdout == cold.stdout != first.stdout
    assert "v2_loop_tanh_fusion_14" in warm.stdout and ".entry loop_tanh_fusion(" not in warm.stdout


# ---- the renaming itself, on written-out IR -------------------------------------------------

KERNEL_IR = """\
; ModuleID = "{k}"
target triple = "nvptx64-nvidia-cuda"

@"lhs_tile" = internal addrspace(3) global [4 x float] undef, align 16
define ptx_kernel void @"{k}"(ptr %"in0.{p}", ptr %"out0.{r}")
{{
entry:
  %".3" = load float, ptr %"in0.{p}"
  %".4" = call float @"{k}_{r}"(float %".3")
  %"{r}.v" = call float asm "mov.b32 $0, %laneid; // %in0.param_0", "=f"()
  store float %".4", ptr %"out0.{r}"
  br label %"{r}.done"
{r}.done:
  ret void
}}

define internal float @"{k}_{r}"(float %".1") alwaysinline
{{
entry:
  %".2" = call float @"__nv_tanhf"(float %".1")
  ret float %".2"
}}

declare float @"__nv_tanhf"(float %".1")
"""


def _kernel_ir(k="fusion_3", p="param_0", r="tanh.5"):
    return KERNEL_IR.format(k=k, p=p, r=r)


def test_canonical_ir_is_the_same_for_renamed_kernels_and_keeps_what_is_not_a_name():
    a = canonical_ir(_kernel_ir(), "fusion_3")
    b = canonical_ir(_kernel_ir("loop_fusion_9", "p_7", "t.1"), "loop_fusion_9")
    assert a is not None and b is not None and a.text == b.text
    assert a.kernel == "__hlo_g1__" and a.names[("g", 1)] == "fusion_3" and b.names[("g", 1)] == "loop_fusion_9"
    assert a.names[("g", 0)] == "lhs_tile" and a.names[("v", 4)] == "entry"  # defined here: renamed
    assert '@"__nv_tanhf"' in a.text  # declared: linked by its name
    assert '%".3"' in a.text and '%".1"' in a.text  # llvmlite's numbered values
    assert "mov.b32 $0, %laneid; // %in0.param_0" in a.text  # inside a string: never renamed
    assert "tanh.5" not in a.text.replace("// %in0.param_0", "") and "param_0" not in a.text.replace(
        "// %in0.param_0", "")
    # a kernel that is not the same up to names has another text
    c = canonical_ir(_kernel_ir().replace("align 16", "align 8"), "fusion_3")
    assert c.text != a.text


@pytest.mark.parametrize("ir, kernel", [
    (_kernel_ir(p="__hlo_v1__"), "fusion_3"),       # already holds a placeholder
    (_kernel_ir(r='a b'), "fusion_3"),              # a name LLVM prints in quotes
    (_kernel_ir(), "not_defined"),                  # no such kernel
])
def test_canonical_ir_refuses_what_it_cannot_undo(ir, kernel):
    assert canonical_ir(ir, kernel) is None


def test_restore_ir_names_derived_values_and_pads_preds():
    c = CanonicalKernel("", "__hlo_g0__", {("g", 0): "fusion_3", ("v", 1): "in0.param_0", ("v", 2): ".5"})
    text = ("define void @__hlo_g0__(ptr %__hlo_v1__) {\n"
            "__hlo_v1__.i.exit:                                 ; preds = %entry\n"
            "  %__hlo_v1__.i = load float, ptr %__hlo_v1__\n}\n")
    out = restore_ir(text, c)
    assert out.startswith("define void @fusion_3(ptr %in0.param_0)")
    assert "  %in0.param_0.i = load" in out
    label = "in0.param_0.i.exit:"
    assert label + " " * (50 - len(label)) + "; preds = %entry" in out
    # a restored name equal to another name of the output: LLVM would have renamed one apart
    assert restore_ir("  %__hlo_v2__1 = add i32 %.51, 1\n", c) is None
    assert restore_ir("  %__hlo_v9__ = add i32 0, 1\n", c) is None  # not one of the kernel's


def test_restore_ptx_spells_globals_as_nvptx_and_refuses_locals():
    c = CanonicalKernel("", "__hlo_g0__", {("g", 0): "fusion_3", ("g", 1): "fusion_3_tanh.5", ("v", 2): "x"})
    ptx = ".visible .entry __hlo_g0__(\n\t.param .u64 __hlo_g0___param_0\n)\n{ call __hlo_g1__; }\n"
    out = restore_ptx(ptx, c)
    assert out == ".visible .entry fusion_3(\n\t.param .u64 fusion_3_param_0\n)\n{ call fusion_3_tanh_$_5; }\n"
    assert ptx_symbol("a.b-c") == "a_$_b_$_c"
    assert restore_ptx("mov %__hlo_v2__;", c) is None
    clash = CanonicalKernel("", "__hlo_g0__", {("g", 0): "add"})
    assert restore_ptx(".entry __hlo_g0__() { add.s32 %r1, %r1, 1; }", clash) is None  # 'add' is taken
