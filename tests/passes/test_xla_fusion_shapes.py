"""Fusion shapes XLA's own passes produce (issue 15, items 1 and 3), on real-sized modules, on
the host target (the GPU's own kernels) against the interpreter: a multi-output reduction fusion
with a full-shape side output (BERT's softmax: ``tuple(reduce(exp(x)), exp(x))``), a horizontal
loop fusion (roots of different shapes, concatenate + slices), and a ``fusion`` inside a reducer,
a sort comparator, a scatter combiner and a reduce-window reducer (XLA fuses inside them too)."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import compile_executable


def host_matches_interpreter(text: str, args=None, tolerance=(0.0, 0.0), seed: int = 0) -> None:
    module = parse_module(text)
    args = literals.random_inputs(module, seed) if args is None else args
    got = literals.flatten(compile_executable(module, "host", CompileOptions()).run(args))
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[tolerance] * len(expected))
    assert cmp.ok, cmp.report()


ADD_MAX = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}
"""


# ---- multi-output reduction fusion with a full-shape side output --------------------------------
@pytest.mark.parametrize("et", ["f32", "bf16"])
@pytest.mark.parametrize("shape,dims", [
    ((4, 128, 128), (2,)),     # softmax rows (B, S, S)
    ((8, 64, 32), (1,)),       # middle dimension
    ((512, 64), (0,)),         # column
    ((64, 3), (0,)),           # small column
    ((3, 7, 1000), (2,)),      # long odd rows
    ((6, 10, 12), (1, 2)),     # two minor dims
    ((33, 17), (0, 1)),        # everything
])
def test_reduction_with_side_output(shape, dims, et):
    ins = ",".join(map(str, shape))
    outs = ",".join(str(n) for d, n in enumerate(shape) if d not in dims)
    rd = ",".join(map(str, dims))
    result = f"(f32[{outs}], {et}[{ins}], f32[{outs}], f32[{ins}])"
    host_matches_interpreter(f"""HloModule mo
{ADD_MAX}
fused {{
  p0 = {et}[{ins}] parameter(0)
  c = f32[{ins}] convert(p0)
  e = f32[{ins}] exponential(c)
  z = f32[] constant(0)
  r = f32[{outs}] reduce(e, z), dimensions={{{rd}}}, to_apply=add
  ninf = f32[] constant(-inf)
  m = f32[{outs}] reduce(c, ninf), dimensions={{{rd}}}, to_apply=mx
  e2 = {et}[{ins}] convert(e)
  ROOT t = {result} tuple(r, e2, m, e)
}}

ENTRY e {{
  x = {et}[{ins}] parameter(0)
  ROOT f = {result} fusion(x), kind=kInput, calls=fused
}}""", tolerance=(1e-5, 1e-5))


def test_softmax_side_output_feeds_the_division():
    host_matches_interpreter(f"""HloModule softmax
{ADD_MAX}
fused_exp_sum {{
  p0 = f32[4,128,128] parameter(0)
  e = f32[4,128,128] exponential(p0)
  z = f32[] constant(0)
  r = f32[4,128] reduce(e, z), dimensions={{2}}, to_apply=add
  ROOT t = (f32[4,128], f32[4,128,128]) tuple(r, e)
}}

fused_div {{
  p0 = f32[4,128,128] parameter(0)
  p1 = f32[4,128] parameter(1)
  b = f32[4,128,128] broadcast(p1), dimensions={{0,1}}
  ROOT d = f32[4,128,128] divide(p0, b)
}}

ENTRY e {{
  x = f32[4,128,128] parameter(0)
  f = (f32[4,128], f32[4,128,128]) fusion(x), kind=kInput, calls=fused_exp_sum
  s = f32[4,128] get-tuple-element(f), index=0
  ex = f32[4,128,128] get-tuple-element(f), index=1
  ROOT o = f32[4,128,128] fusion(ex, s), kind=kLoop, calls=fused_div
}}""", tolerance=(1e-6, 1e-5))


# ---- horizontal loop fusion ---------------------------------------------------------------------
def test_horizontal_fusion_concatenate_and_slices():
    host_matches_interpreter("""HloModule horizontal
fused_h {
  p0 = f32[128,64] parameter(0)
  p1 = f32[96] parameter(1)
  p2 = f16[32,3] parameter(2)
  a = f32[128,64] multiply(p0, p0)
  ra = f32[8192] reshape(a)
  b = f32[96] negate(p1)
  c = f16[32,3] add(p2, p2)
  rc = f16[96] reshape(c)
  cc = f32[96] convert(rc)
  cat = f32[8384] concatenate(ra, b, cc), dimensions={0}
  sl0 = f32[8192] slice(cat), slice={[0:8192]}
  sl1 = f32[96] slice(cat), slice={[8192:8288]}
  sl2 = f32[96] slice(cat), slice={[8288:8384]}
  ROOT t = (f32[8192], f32[96], f32[96]) tuple(sl0, sl1, sl2)
}

ENTRY e {
  x = f32[128,64] parameter(0)
  y = f32[96] parameter(1)
  w = f16[32,3] parameter(2)
  ROOT f = (f32[8192], f32[96], f32[96]) fusion(x, y, w), kind=kLoop, calls=fused_h
}""")


def test_horizontal_fusion_roots_of_different_shapes():
    host_matches_interpreter("""HloModule horizontal2
fused_h {
  p0 = f32[128,64] parameter(0)
  p1 = f32[96] parameter(1)
  p2 = s32[7,5] parameter(2)
  a = f32[128,64] multiply(p0, p0)
  b = f32[96] negate(p1)
  c = s32[7,5] add(p2, p2)
  ROOT t = (f32[128,64], f32[96], s32[7,5]) tuple(a, b, c)
}

ENTRY e {
  x = f32[128,64] parameter(0)
  y = f32[96] parameter(1)
  w = s32[7,5] parameter(2)
  ROOT f = (f32[128,64], f32[96], s32[7,5]) fusion(x, y, w), kind=kLoop, calls=fused_h
}""")


# ---- a fusion inside a reducer, comparator, combiner ------------------------------------------
PICK = """
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  take = pred[] or(gt, tie)
  v = f32[] select(take, a, b)
  i = s32[] select(take, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
"""


@pytest.mark.parametrize("inner", ["fusion", "call"])
def test_argmax_reducer_with_a_fusion(inner):
    call = ("fusion(a, ai, b, bi), kind=kLoop, calls=fused_pick" if inner == "fusion"
            else "call(a, ai, b, bi), to_apply=fused_pick")
    text = f"""HloModule argmax
fused_pick {{
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
{PICK}}}

argmax {{
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  f = (f32[], s32[]) {call}
  v = f32[] get-tuple-element(f), index=0
  i = s32[] get-tuple-element(f), index=1
  ROOT t = (f32[], s32[]) tuple(v, i)
}}

ENTRY e {{
  x = f32[16,1000] parameter(0)
  io = s32[16,1000] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[16], s32[16]) reduce(x, io, ninf, z), dimensions={{1}}, to_apply=argmax
}}"""
    host_matches_interpreter(text)
    ties = np.random.default_rng(1).integers(0, 4, size=(16, 1000)).astype(np.float32)  # many equal maxima
    host_matches_interpreter(text, args=[ties])


def test_sort_comparator_with_a_fusion():
    host_matches_interpreter("""HloModule sort
fused_lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  na = f32[] negate(a)
  nb = f32[] negate(b)
  ROOT c = pred[] compare(na, nb), direction=GT, type=TOTALORDER
}

cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ai = s32[] parameter(2)
  bi = s32[] parameter(3)
  ROOT c = pred[] fusion(a, b), kind=kLoop, calls=fused_lt
}

ENTRY e {
  x = f32[8,300] parameter(0)
  io = s32[8,300] iota(), iota_dimension=1
  ROOT s = (f32[8,300], s32[8,300]) sort(x, io), dimensions={1}, is_stable=true, to_apply=cmp
}""")


def test_scatter_combiner_with_a_fusion():
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((50, 8)).astype(np.float32), rng.integers(-2, 52, size=(30, 1)).astype(np.int32),
            rng.standard_normal((30, 8)).astype(np.float32)]
    host_matches_interpreter("""HloModule scatter
fused_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(b, b)
  ROOT c = f32[] add(a, m)
}

comb {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] fusion(a, b), kind=kLoop, calls=fused_add
}

ENTRY e {
  x = f32[50,8] parameter(0)
  i = s32[30,1] parameter(1)
  u = f32[30,8] parameter(2)
  ROOT s = f32[50,8] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}""", args=args, tolerance=(1e-5, 1e-5))


def test_reduce_window_reducer_with_a_fusion():
    host_matches_interpreter("""HloModule rw
fused_max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}

mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] fusion(a, b), kind=kLoop, calls=fused_max
}

ENTRY e {
  x = f32[4,32,32,3] parameter(0)
  ninf = f32[] constant(-inf)
  ROOT r = f32[4,16,16,3] reduce-window(x, ninf), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=mx
}""")


# ---- a variadic reduce in a multi-output fusion: roots are its get-tuple-elements ---------------
ARGMAX = """
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
""" + PICK + "}\n"


@pytest.mark.parametrize("shape,dim", [((32, 500), 1), ((16, 8), 1), ((512, 40), 0), ((300, 3), 0), ((4, 50, 6), 1)])
@pytest.mark.parametrize("roots", ["r0,r1,s", "r1,s,r0", "r0,r1", "r1", "s,r0"])
def test_variadic_reduce_roots_as_get_tuple_elements(shape, dim, roots):
    ins = ",".join(map(str, shape))
    outs = ",".join(str(n) for d, n in enumerate(shape) if d != dim)
    types = {"r0": f"f32[{outs}]", "r1": f"s32[{outs}]", "s": f"f32[{ins}]"}
    names = roots.split(",")
    result = "(" + ", ".join(types[n] for n in names) + ")"
    text = f"""HloModule variadic_side
{ARGMAX}
fused {{
  p0 = f32[{ins}] parameter(0)
  s = f32[{ins}] floor(p0)
  io = s32[{ins}] iota(), iota_dimension={dim}
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  r = (f32[{outs}], s32[{outs}]) reduce(s, io, ninf, z), dimensions={{{dim}}}, to_apply=argmax
  r0 = f32[{outs}] get-tuple-element(r), index=0
  r1 = s32[{outs}] get-tuple-element(r), index=1
  ROOT t = {result} tuple({", ".join(names)})
}}

ENTRY e {{
  x = f32[{ins}] parameter(0)
  ROOT f = {result} fusion(x), kind=kInput, calls=fused
}}"""
    host_matches_interpreter(text)  # floor of [-1, 1) inputs: many ties, the lowest index wins
