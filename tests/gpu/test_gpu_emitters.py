"""Every emitter family on a real GPU against the interpreter, at two sizes.

``FAMILIES`` names one module per family (loop, transpose tiled and packed, reduction row,
multi-row, column and small-column, concatenate, in-place dynamic-update-slice, scatter, sort
bitonic and rank, dot with and without tensor cores, convolution): the benchmark modules of
``bench/catalog.py`` and a few written here. Each runs

- ``real``: at a size that fills the GPU (the benchmark's own size scaled by ``REAL_SCALE``,
  tens to hundreds of MB: the benchmark suite checks the full size again before timing);
- ``small``: scaled down 16 times, for ``compute-sanitizer`` (memcheck, racecheck), which runs
  ``-k small`` of this file in one process (``bench/device/run.sh``'s sanitizer step).

Each case asserts the intended emitter (and variant) before comparing: a family that silently
fell back to the loop emitter would check nothing. Every test is marked ``gpu`` and skips, with
``available()``'s reason, where there is no GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from hlo_compile import parse_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable

from bench import catalog

REAL_SCALE = 2     # the benchmark modules: 1/2 of their size here (the bench runs them whole)
SMALL_SCALE = 16   # under compute-sanitizer

LT_F32_S32 = """
lt (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
"""

ADD_F32 = """
add (a: f32[], b: f32[]) -> f32[] {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

def sort_module(name: str, rows: int, cols: int) -> str:
    """Keys f32[rows, cols] sorted along their rows, carrying s32 values along."""
    shape = f"[{rows},{cols}]"
    return f"""HloModule {name}
{LT_F32_S32}
ENTRY e {{
  k = f32{shape} parameter(0)
  i = s32{shape} parameter(1)
  ROOT s = (f32{shape}, s32{shape}) sort(k, i), dimensions={{1}}, is_stable=true, to_apply=lt
}}"""


EXTRA_MODULES = {
    # rows that fit shared memory: the bitonic network
    "sort_bitonic_f32": sort_module("sort_bitonic_f32", 2048, 2048),
    # rows beyond shared memory: the rank sort (its small size stays a rank sort)
    "sort_rank_f32": sort_module("sort_rank_f32", 16, 16384),
    "sort_rank_f32_small": sort_module("sort_rank_f32_small", 2, 8192),
    "dot_bf16_tensor_cores": """HloModule dot_bf16_tensor_cores
ENTRY e {
  a = bf16[2048,1024] parameter(0)
  b = bf16[1024,2048] parameter(1)
  ROOT d = f32[2048,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""",
    "dot_f16_tensor_cores_batched": """HloModule dot_f16_tensor_cores_batched
ENTRY e {
  a = f16[8,512,256] parameter(0)
  b = f16[8,256,384] parameter(1)
  ROOT d = f16[8,512,384] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}""",
    "reduce_small_column_f32": f"""HloModule reduce_small_column_f32
{ADD_F32}
fused (p: f32[8192,2048,4]) -> f32[8192,4] {{
  p = f32[8192,2048,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8192,4] reduce(p, z), dimensions={{1}}, to_apply=add
}}

ENTRY e {{
  p = f32[8192,2048,4] parameter(0)
  ROOT f = f32[8192,4] fusion(p), kind=kInput, calls=fused
}}""",
}


@dataclass(frozen=True)
class Family:
    name: str
    source: str                       # a bench/modules file or a key of EXTRA_MODULES
    emitter: str                      # the emitter every kernel must get (first kernel, at least)
    variant: str | None = None
    tensor_cores: bool = False
    all_kernels: bool = True          # every kernel of ENTRY has ``emitter`` (else the first)
    small_source: str | None = None   # a key of EXTRA_MODULES run unscaled as the small size


FAMILIES = [
    Family("loop", "gelu_bf16_16x2048x4096.hlo", "loop"),
    Family("transpose_tiled", "transpose_021_f32.hlo", "transpose", "tiled"),
    Family("transpose_packed", "transpose_2d_bf16.hlo", "transpose", "packed"),
    Family("reduction_row", "reduce_row_bf16.hlo", "reduction", "row"),
    Family("reduction_multirow", "reduce_multirow_f32.hlo", "reduction", "multi-row"),
    Family("reduction_column", "reduce_column_bf16.hlo", "reduction", "column"),
    Family("reduction_small_column", "reduce_small_column_f32", "reduction", "small-column"),
    Family("softmax", "softmax_f32.hlo", "reduction", "row", all_kernels=False),
    Family("concatenate", "concatenate_f32.hlo", "concatenate"),
    Family("dynamic_update_slice", "dus_bf16.hlo", "in-place-dus"),
    Family("scatter", "scatter_add_f32.hlo", "scatter"),
    Family("sort_bitonic", "sort_bitonic_f32", "sort", "bitonic"),
    Family("sort_rank", "sort_rank_f32", "sort", "rank", small_source="sort_rank_f32_small"),
    Family("dot", "dot_f32.hlo", "dot"),
    Family("dot_tensor_cores", "dot_bf16_tensor_cores", "dot", tensor_cores=True),
    Family("dot_tensor_cores_batched", "dot_f16_tensor_cores_batched", "dot", tensor_cores=True),
    Family("convolution", "convolution_f32.hlo", "convolution"),
]
SIZES = {"real": REAL_SCALE, "small": SMALL_SCALE}


def family_text(fam: Family, size: str) -> str:
    """The module of ``fam`` at ``size``: scaled down ``SIZES[size]`` times
    (``catalog.scaled_text``'s rule), or its own small module."""
    if size == "small" and fam.small_source:
        return EXTRA_MODULES[fam.small_source]
    scale = SIZES[size]
    text = EXTRA_MODULES.get(fam.source)
    if text is None:
        text = (catalog.MODULES_DIR / fam.source).read_text()
    return text if scale == 1 else catalog.scaled_text(text, scale)


def variant_of(kernel) -> str | None:
    """XLA's emitter variant of a planned kernel (reduction, transpose), or the sort's algorithm."""
    if kernel.analysis.variant is not None:
        return str(kernel.analysis.variant)
    return kernel.spec.summary_fields().get("algorithm")


def plan_mismatch(fam: Family, plan) -> str | None:
    """None when the kernels of ``plan`` got ``fam``'s emitter (and variant), else what differs."""
    kernels = plan.kernels if fam.all_kernels else plan.kernels[:1]
    for k in kernels:
        if k.analysis.emitter != fam.emitter:
            return f"{k.kernel_name}: emitter {k.analysis.emitter}, intended {fam.emitter} ({k.analysis.reason})"
    if fam.variant is not None and variant_of(kernels[0]) != fam.variant:
        return f"{kernels[0].kernel_name}: variant {variant_of(kernels[0])}, intended {fam.variant}"
    return None


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_family_is_planned_as_intended_for_sm90(fam, size):
    """Without a GPU: each family's module at each size gets its emitter and variant when
    planned for the H100/H200 (sm_90), so the GPU run below checks what it says it checks."""
    from hlo_compile.codegen.compiler import plan_module
    module = parse_module(family_text(fam, size), fam.name)
    plan = plan_module(module, CompileOptions(arch="sm_90", dot_tensor_cores=fam.tensor_cores))
    assert plan_mismatch(fam, plan) is None, plan_mismatch(fam, plan)


@pytest.mark.gpu
@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_family_on_cuda(gpu, fam, size):
    module = parse_module(family_text(fam, size), f"{fam.name}.hlo")
    args, expected = catalog.reference(module)
    exe = compile_executable(module, "cuda", CompileOptions(dot_tensor_cores=fam.tensor_cores))
    try:
        kernels = exe.plan.kernels
        why = plan_mismatch(fam, exe.plan)
        assert why is None, why
        if fam.tensor_cores:
            assert "mma.sync.aligned.m16n8k16" in exe.platform.ptx, "no mma.sync in the PTX"
        got = literals.flatten(exe.run(args))
    finally:
        exe.platform.device.close()
    why = catalog.check_results(expected, got)
    assert why is None, f"{fam.name} ({size}): {why}"
    print(f"{fam.name} ({size}): {len(kernels)} kernel(s) "
          + ", ".join(f"{k.kernel_name} grid {k.launch.grid} block {k.launch.block}" for k in kernels))
