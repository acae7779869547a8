"""A scatter whose operand's layout differs from its output's: the operand is copied into the
output's layout first (``passes/scatter_layouts.py``, as XLA's layout assignment), so the kernel
that updates the output in place starts from the right bytes; host against the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes import run_passes
from hlo_compile.runtime.executable import compile_executable

LONE = """HloModule lone

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[6,5]{0,1} parameter(0)
  i = s32[4,1]{1,0} parameter(1)
  u = f32[4,5]{1,0} parameter(2)
  ROOT sc = f32[6,5]{1,0} scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""

FUSED = """HloModule fused

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_scatter {
  p0 = f32[6,5]{0,1} parameter(0)
  p1 = s32[4,1]{1,0} parameter(1)
  p2 = f32[4,5]{1,0} parameter(2)
  neg = f32[4,5]{1,0} negate(p2)
  ROOT sc = f32[6,5]{1,0} scatter(p0, p1, neg), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}

ENTRY main {
  x = f32[6,5]{0,1} parameter(0)
  i = s32[4,1]{1,0} parameter(1)
  u = f32[4,5]{1,0} parameter(2)
  ROOT f = f32[6,5]{1,0} fusion(x, i, u), kind=kInput, calls=fused_scatter
}
"""


def _args():
    rng = np.random.default_rng(1)
    return [rng.standard_normal((6, 5), dtype=np.float32), np.array([[0], [3], [3], [5]], np.int32),
            rng.standard_normal((4, 5), dtype=np.float32)]


@pytest.mark.parametrize("text", [LONE, FUSED], ids=["lone", "fused"])
@pytest.mark.parametrize("fusion", [True, False])
def test_scatter_into_an_operand_of_another_layout(text, fusion):
    module = parse_module(text)
    args = _args()
    want = evaluate_module(module, args)
    got = compile_executable(module, "host", CompileOptions(fusion=fusion)).run(args)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_operand_is_copied_into_the_output_layout():
    out = run_passes(parse_module(FUSED))
    fusion = next(i for i in out.entry.instructions if i.opcode == "fusion" and
                  i.fused_computation.root.opcode == "scatter")
    scatter = fusion.fused_computation.root
    assert scatter.operands[0].shape.layout == scatter.shape.layout
    arg = fusion.operands[0]
    assert arg.opcode == "fusion" and arg.fused_computation.root.opcode == "copy"
    assert arg.shape.layout == scatter.shape.layout
