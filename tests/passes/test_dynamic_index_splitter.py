"""The old form of dynamic-slice / dynamic-update-slice (one start-index vector, as in XLA's
parser tests) split into scalar start indices (XLA's DynamicIndexSplitter), on the host target
against the interpreter, with starts in range, negative and past the end (both clamp)."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.dynamic_index_splitter import split_dynamic_indices
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import compile_executable

STARTS = [(0, 0, 0), (1, 2, 3), (-4, 7, 100), (5, 0, -1)]

DS = """HloModule ds
ENTRY e {
  x = f32[4,6,9] parameter(0)
  i = s32[3] parameter(1)
  ROOT d = f32[2,3,4] dynamic-slice(x, i), dynamic_slice_sizes={2,3,4}
}"""

DUS = """HloModule dus
ENTRY e {
  x = f32[4,6,9] parameter(0)
  u = f32[2,3,4] parameter(1)
  i = s64[3] parameter(2)
  ROOT d = f32[4,6,9] dynamic-update-slice(x, u, i)
}"""


def _check(text: str, args, fusion: bool) -> None:
    module = parse_module(text)
    expected = literals.flatten(evaluate_module(module, args))
    got = literals.flatten(compile_executable(module, "host", CompileOptions(fusion=fusion)).run(args))
    cmp = compare.compare_results(expected, got, tolerances=[(0.0, 0.0)] * len(expected))
    assert cmp.ok, cmp.report()


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("starts", STARTS)
def test_dynamic_slice_index_vector(starts, fusion):
    x = np.arange(4 * 6 * 9, dtype=np.float32).reshape(4, 6, 9)
    _check(DS, [x, np.array(starts, np.int32)], fusion)


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("starts", STARTS)
def test_dynamic_update_slice_index_vector(starts, fusion):
    x = np.arange(4 * 6 * 9, dtype=np.float32).reshape(4, 6, 9)
    u = -np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) - 1
    _check(DUS, [x, u, np.array(starts, np.int64)], fusion)


def test_split_reads_scalar_indices():
    module = split_dynamic_indices(parse_module(DS))
    d = module.entry.root
    assert [op.shape.rank for op in d.operands[1:]] == [0, 0, 0]
    assert all(op.opcode == "reshape" and op.operands[0].opcode == "slice" for op in d.operands[1:])
    text = module.to_text()
    assert parse_module(text).entry.root.opcode == "dynamic-slice"  # still valid HLO


def test_scalar_form_untouched():
    text = """HloModule ds
ENTRY e {
  x = f32[8] parameter(0)
  i = s32[] parameter(1)
  ROOT d = f32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
}"""
    module = split_dynamic_indices(parse_module(text))
    assert len(module.entry.instructions) == 3
