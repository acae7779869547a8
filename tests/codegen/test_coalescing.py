"""The coalescing analysis (codegen/model/coalescing.py) on XLA's own test cases.

Each case is the HLO and the expected per-operand verdicts of XLA's
``xla/service/gpu/model/coalescing_analysis_test.cc`` (``CoalescingTest``), planned by our
emitters for the device those tests use (RTX A6000: 84 SMs, 1536 threads per SM, which
sets the loop emitter's unrolling); plus raw-map cases of the transaction estimate, the
heuristic XLA falls back to, writes, and a deliberately uncoalesced kernel.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.model.coalescing import analyze_kernel, read_coalesced_heuristic, warp_access
from hlo_compile.codegen.compiler import plan_fusion
from hlo_compile.gpu.device_info import A100_SXM, H100_SXM
from hlo_compile.codegen.analysis.emitter_kind import EmitterKind
from hlo_compile.indexing import affine as A
from hlo_compile.indexing.indexing_map import IndexingMap

# XLA's TestGpuDeviceInfo::RTXA6000DeviceInfo: what the launch configs of its cases assume
RTX_A6000 = replace(A100_SXM, name="RTX A6000", arch="sm_86", core_count=84, threads_per_core_limit=1536)

ADD = """add {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT add = f32[] add(p0, p1)
}
"""
MAX2 = """max {
  p0 = s32[] parameter(0)
  p1 = s32[] parameter(1)
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
  max01 = s32[] maximum(p0, p1)
  max23 = s32[] maximum(p2, p3)
  ROOT max = (s32[], s32[]) tuple(max01, max23)
}
"""


def _module(fused: str, params: list[str], root_shape: str, kind: str = "kLoop", extra: str = "") -> str:
    """An XLA test module: ``fusion { fused }`` called by ENTRY on parameters of ``params``."""
    entry = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    return (f"HloModule m\n{extra}fusion {{\n{fused}\n}}\nENTRY e {{\n{entry}\n"
            f"  ROOT fusion = {root_shape} fusion({args}), kind={kind}, calls=fusion\n}}\n")


# (XLA's test name, module, expected IsReadCoalesced per operand)
XLA_CASES = [
    ("IdentityLayout", _module("""  p0 = f32[100, 200] parameter(0)
  p1 = f32[100, 200] parameter(1)
  ROOT add = f32[100, 200] add(p0, p1)""", ["f32[100, 200]"] * 2, "f32[100, 200]", "kInput"), [True, True]),
    ("RhsTransposedLayout", _module("""  p0 = f32[100, 200]{1, 0} parameter(0)
  p1 = f32[100, 200]{0, 1} parameter(1)
  ROOT exp = f32[100, 200]{1, 0} add(p0, p1)""", ["f32[100, 200]{1, 0}", "f32[100, 200]{0, 1}"], "f32[100, 200]{1, 0}",
                                   "kInput"), [True, False]),
    ("OutputTransposedLayout", _module("""  p0 = f32[100, 200]{1, 0} parameter(0)
  p1 = f32[100, 200]{1, 0} parameter(1)
  ROOT exp = f32[100, 200]{0, 1} add(p0, p1)""", ["f32[100, 200]{1, 0}"] * 2, "f32[100, 200]{0, 1}", "kInput"),
     [False, False]),
    ("OutputAndLhsTransposedLayout", _module("""  p0 = f32[100, 200]{1, 0} parameter(0)
  p1 = f32[100, 200]{0, 1} parameter(1)
  ROOT add = f32[100, 200]{1, 0} add(p0, p1)""", ["f32[100, 200]{1, 0}", "f32[100, 200]{0, 1}"], "f32[100, 200]{1, 0}",
                                            "kInput"), [True, False]),
    ("Transpose", _module("""  input = f32[100, 64, 32] parameter(0)
  ROOT transpose = f32[32, 100, 64] transpose(input), dimensions={2, 0, 1}""", ["f32[100, 64, 32]"],
                          "f32[32, 100, 64]"), [True]),
    ("ConcatenateInLoopEmitter", _module("""  p0 = bf16[42] parameter(0)
  p1 = bf16[42] parameter(1)
  p2 = bf16[42] parameter(2)
  p3 = bf16[42] parameter(3)
  p4 = bf16[44] parameter(4)
  p5 = bf16[44] parameter(5)
  concatenate = bf16[256] concatenate(p0, p1, p2, p3, p4, p5), dimensions={0}
  broadcast = bf16[256] parameter(6)
  ROOT multiply = bf16[256] multiply(concatenate, broadcast)""",
                                         ["bf16[42]"] * 4 + ["bf16[44]"] * 2 + ["bf16[256]"], "bf16[256]"),
     [True] * 7),
    ("ConcatenateWitBitcastInLoopEmitter", _module("""  p0 = bf16[42] parameter(0)
  p1 = bf16[42] parameter(1)
  p2 = bf16[42] parameter(2)
  p3 = bf16[42] parameter(3)
  p4 = bf16[44] parameter(4)
  p5 = bf16[44] parameter(5)
  concatenate = bf16[256] concatenate(p0, p1, p2, p3, p4, p5), dimensions={0}
  broadcast = bf16[256] parameter(6)
  multiply = bf16[256] multiply(concatenate, broadcast)
  ROOT bitcast = bf16[16,16] bitcast(multiply)""", ["bf16[42]"] * 4 + ["bf16[44]"] * 2 + ["bf16[256]"], "bf16[16,16]"),
     [True] * 7),
    ("TransposeOnlyOuterDims", _module("""  input = f32[100, 32, 64] parameter(0)
  ROOT transpose = f32[32, 100, 64] transpose(input), dimensions={1, 0, 2}""", ["f32[100, 32, 64]"],
                                       "f32[32, 100, 64]"), [True]),
    ("PadOp", _module("""  p0 = f32[997, 436] parameter(0)
  p1 = f32[] parameter(1)
  ROOT pad = f32[1024, 512] pad(p0, p1), padding=10_17x24_52""", ["f32[997, 436]", "f32[]"], "f32[1024, 512]"),
     [True, True]),
    ("RowReduction", _module("""  input = f32[100,64,512] parameter(0)
  c0 = f32[] constant(0)
  ROOT reduce = f32[100,64] reduce(input, c0), dimensions={2}, to_apply=add""", ["f32[100,64,512]"], "f32[100,64]",
                             "kInput", ADD), [True]),
    ("MultiRowReduction", _module("""  input = f32[100,64,4] parameter(0)
  c0 = f32[] constant(0)
  ROOT reduce = f32[100,64] reduce(input, c0), dimensions={2}, to_apply=add""", ["f32[100,64,4]"], "f32[100,64]",
                                  "kInput", ADD), [True]),
    ("ColumnReduction", _module("""  input = f32[100,64,32] parameter(0)
  c0 = f32[] constant(0)
  ROOT reduce = f32[100,32] reduce(input, c0), dimensions={1}, to_apply=add""", ["f32[100,64,32]"], "f32[100,32]",
                                "kInput", ADD), [True]),
    ("VariadicReduceViaLoopEmitter", _module("""  p0 = s32[5696,10,4] parameter(0)
  p1 = s32[5696,10,4] parameter(1)
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
  ROOT reduce = (s32[5696,4], s32[5696,4]) reduce(p0, p1, p2, p3), dimensions={1}, to_apply=max""",
                                             ["s32[5696,10,4]"] * 2 + ["s32[]"] * 2, "(s32[5696,4], s32[5696,4])",
                                             "kInput", MAX2), [False, False, True, True]),
    ("VariadicReduceViaReductionEmitter", _module("""  p0 = s32[32,40] parameter(0)
  p1 = s32[32,40] parameter(1)
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
  ROOT reduce = (s32[32], s32[32]) reduce(p0, p1, p2, p3), dimensions={1}, to_apply=max""",
                                                  ["s32[32,40]"] * 2 + ["s32[]"] * 2, "(s32[32], s32[32])",
                                                  "kInput", MAX2), [True, True, True, True]),
    ("Gather", _module("""  operand = f32[33, 76, 70] parameter(0)
  indices = s32[1806, 2] parameter(1)
  ROOT gather = f32[1806, 7, 8, 4] gather(operand, indices), offset_dims={1,2,3}, collapsed_slice_dims={},
    start_index_map={0,1}, index_vector_dim=1, slice_sizes={7,8,4}""", ["f32[33, 76, 70]", "s32[1806, 2]"],
                       "f32[1806, 7, 8, 4]"), [False, True]),
    ("DynamicSlice", _module("""  src = s32[2,2,258] parameter(0)
  of1 = s32[] parameter(1)
  of2 = s32[] parameter(2)
  of3 = s32[] parameter(3)
  ROOT ds = s32[1,2,32] dynamic-slice(src, of1, of2, of3), dynamic_slice_sizes={1, 2, 32}""",
                             ["s32[2,2,258]", "s32[]", "s32[]", "s32[]"], "s32[1,2,32]"), [True] * 4),
    ("UnusedParameter", _module("""  p0 = f32[100000] parameter(0)
  p1 = f32[100000] parameter(1)
  ROOT neg = f32[100000] negate(p0)""", ["f32[100000]"] * 2, "f32[100000]"), [True, True]),
    ("Param", _module("""  p0 = u32[48,2,1280] parameter(0)
  p1 = u32[48,1,1280] parameter(1)
  p2 = u32[48,1,1280] parameter(2)
  concat = u32[48,2,1280] concatenate(p1, p2), dimensions={1}
  ROOT shift = u32[48,2,1280] shift-right-logical(concat, p0)""", ["u32[48,2,1280]", "u32[48,1,1280]",
                                                                    "u32[48,1,1280]"], "u32[48,2,1280]"),
     [True, True, True]),
]


def _plan(text: str, device=RTX_A6000):
    module = parse_module(text)
    return plan_fusion(module.entry.root, device, "k")


@pytest.mark.parametrize("name,text,expected", XLA_CASES, ids=[c[0] for c in XLA_CASES])
def test_xla_coalescing_cases(name, text, expected):
    kernel = _plan(text)
    reads = analyze_kernel(kernel).reads
    assert [r.coalesced for r in reads] == expected, [(r.name, r.how, r.efficiency) for r in reads]


HEURISTIC_CASES = [  # XLA's TransposeOf{Broadcast,Iota,Add}Heuristic: producer in ENTRY, consumer the fusion
    ("TransposeOfBroadcastHeuristic", """HloModule m
fusion {
  input = f32[32, 100, 64] parameter(0)
  ROOT slice = f32[32, 100, 1] slice(input), slice={[0:32:1], [0:100:1], [0:1:1]}
}
ENTRY e {
  p0 = f32[32] parameter(0)
  broadcast = f32[100, 64, 32] broadcast(p0), dimensions={2}
  transpose = f32[32, 100, 64] transpose(broadcast), dimensions={2, 0, 1}
  ROOT fusion = f32[32, 100, 1] fusion(transpose), kind=kLoop, calls=fusion
}""", True),
    ("TransposeOfIotaHeuristic", """HloModule m
fusion {
  p0 = f32[32, 100, 64] parameter(0)
  ROOT slice = f32[32, 100, 1] slice(p0), slice={[0:32:1], [0:100:1], [0:1:1]}
}
ENTRY e {
  iota = f32[100, 64, 32] iota(), iota_dimension=1
  transpose = f32[32, 100, 64] transpose(iota), dimensions={2, 0, 1}
  ROOT fusion = f32[32, 100, 1] fusion(transpose), kind=kLoop, calls=fusion
}""", True),
    ("TransposeOfAddHeuristic", """HloModule m
fusion {
  p0 = f32[32, 100, 64] parameter(0)
  ROOT slice = f32[32, 100, 1] slice(p0), slice={[0:32:1], [0:100:1], [0:1:1]}
}
ENTRY e {
  input = f32[100, 64, 32] parameter(0)
  add = f32[100, 64, 32] add(input, input)
  transpose = f32[32, 100, 64] transpose(add), dimensions={2, 0, 1}
  ROOT fusion = f32[32, 100, 1] fusion(transpose), kind=kLoop, calls=fusion
}""", False),
]


@pytest.mark.parametrize("name,text,expected", HEURISTIC_CASES, ids=[c[0] for c in HEURISTIC_CASES])
def test_xla_heuristic_cases(name, text, expected):
    root = parse_module(text).entry.root
    assert read_coalesced_heuristic(EmitterKind.LOOP, root.operands[0], root) is expected


def _thread_x_map(expr, ranges=(), constraints=()) -> IndexingMap:
    return IndexingMap.make([expr], [(0, 31)], list(ranges), (), list(constraints))


@pytest.mark.parametrize("expr,ranges,bits,coalesced", [
    (A.dim(0), (), 32, True),                                            # thread_x
    (A.mul(A.dim(0), 100), (), 32, False),                               # thread_x * 100
    (A.add(A.mul(A.dim(0), 4), A.sym(0)), [(0, 3)], 32, True),           # a vector of 4 per thread
    (A.add(A.dim(0), A.mul(A.sym(0), 1024)), [(0, 1)], 32, True),        # column reduction's loop
    (A.add(A.mul(A.dim(0), 2), A.sym(0)), [(0, 0)], 32, False),          # every other element
    (A.dim(0), (), 8, True),                                             # 32 bytes in one transaction
    (A.mul(A.dim(0), 2), (), 8, False),  # XLA counts a transaction per interval, even within 64 bytes
    (A.mul(A.dim(0), 64), (), 8, False),                                 # one byte per 64
])
def test_transaction_estimate(expr, ranges, bits, coalesced):
    assert warp_access(_thread_x_map(expr, ranges), bits).coalesced is coalesced


def test_efficiency_is_useful_bytes_over_segments():
    assert warp_access(_thread_x_map(A.dim(0)), 32).efficiency == 1.0
    assert warp_access(_thread_x_map(A.mul(A.dim(0), 100)), 32).efficiency == pytest.approx(4 / 64)
    assert warp_access(_thread_x_map(A.mul(A.dim(0), 2)), 32).efficiency == pytest.approx(0.5)
    assert warp_access(None, 32).coalesced is False   # undefined: uncoalesced, as XLA


def test_constraints_drop_lanes():
    # lanes 0..7 fall in padding: the rest still read consecutive addresses
    m = _thread_x_map(A.add(A.dim(0), -8), constraints=[(A.dim(0), (8, 31))])
    w = warp_access(m, 32)
    assert w.coalesced and w.intervals == ((0, 23),)


TRANSPOSE = """HloModule t
fusion {
  p0 = f32[2048, 1024] parameter(0)
  ROOT t = f32[1024, 2048] transpose(p0), dimensions={1, 0}
}
ENTRY e {
  p0 = f32[2048, 1024] parameter(0)
  ROOT fusion = f32[1024, 2048] fusion(p0), kind=kInput, calls=fusion
}
"""


def test_transpose_by_loop_emitter_is_flagged():
    """The same transpose planned by the loop emitter (forced) reads with a stride: flagged;
    the shared-memory transpose reads and writes coalesced."""
    from hlo_compile.codegen.emitters.loop import plan_loop_kernel
    tiled = _plan(TRANSPOSE, H100_SXM)
    assert tiled.analysis.emitter == EmitterKind.TRANSPOSE
    c = analyze_kernel(tiled)
    assert c.reads[0].coalesced and c.writes[0].coalesced and c.all_coalesced
    spec = plan_loop_kernel(tiled.fusion, tiled.analysis, H100_SXM, "k_loop")
    from hlo_compile.codegen.model.coalescing import analyze_spec
    loop = analyze_spec(spec, EmitterKind.LOOP)
    assert not loop.reads[0].coalesced and loop.writes[0].coalesced
    assert loop.reads[0].efficiency == pytest.approx(4 / 64)
