"""Small modules for the internal errors the shared corpus found (issue 15), each run on the host
target (the GPU's own kernels) against the interpreter: a select-and-scatter without a window
(scalar operand), a copy of a tuple (nested too). The vector start index of dynamic-slice is in
test_dynamic_index_splitter.py."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.tuple_copies import expand_tuple_copies
from hlo_compile.runtime import compare, literals, memory_estimate
from hlo_compile.runtime.executable import compile_executable

FUSION = [pytest.param(True, id="fused"), pytest.param(False, id="no-fusion")]


def host_matches_interpreter(text: str, fusion: bool = True, seed: int = 0) -> None:
    module = parse_module(text)
    args = literals.random_inputs(module, seed)
    got = literals.flatten(compile_executable(module, "host", CompileOptions(fusion=fusion)).run(args))
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[(0.0, 0.0)] * len(expected))
    assert cmp.ok, cmp.report()


@pytest.mark.parametrize("fusion", FUSION)
def test_select_and_scatter_scalar_without_window(fusion):
    host_matches_interpreter("""HloModule sas
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  s = f32[] parameter(1)
  i = f32[] parameter(2)
  ROOT r = f32[] select-and-scatter(x, s, i), select=ge, scatter=add
}""", fusion)


@pytest.mark.parametrize("fusion", FUSION)
def test_reduce_window_scalar_without_window(fusion):
    host_matches_interpreter("""HloModule rw
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  i = f32[] parameter(1)
  ROOT r = f32[] reduce-window(x, i), to_apply=add
}""", fusion)


COPY_TUPLE = """HloModule ct
ENTRY e {
  x = f32[4] parameter(0)
  y = s32[2,3] parameter(1)
  i = (s32[2,3], f32[4]) tuple(y, x)
  t = (f32[4], (s32[2,3], f32[4])) tuple(x, i)
  c = (f32[4], (s32[2,3], f32[4])) copy(t)
  c1 = (s32[2,3], f32[4]) get-tuple-element(c), index=1
  g = s32[2,3] get-tuple-element(c1), index=0
  n = s32[2,3] negate(g)
  ROOT r = (s32[2,3], (f32[4], (s32[2,3], f32[4]))) tuple(n, c)
}"""


@pytest.mark.parametrize("fusion", FUSION)
def test_copy_of_tuple(fusion):
    host_matches_interpreter(COPY_TUPLE, fusion)


def test_copy_of_tuple_is_a_tuple_of_leaf_copies():
    module = expand_tuple_copies(parse_module(COPY_TUPLE))
    c = module.entry.instruction("c")
    assert c.opcode == "tuple"
    leaves = [c.operands[0], *c.operands[1].operands]
    assert [leaf.opcode for leaf in leaves] == ["copy", "copy", "copy"]
    assert not any(i.opcode == "copy" and i.shape.is_tuple for i in module.entry.instructions)
    parse_module(module.to_text())  # still valid HLO


UNBOUNDED = """HloModule u
ENTRY e {
  a = f32[?] parameter(0)
  ROOT r = f32[3] reshape(a)
}"""


def test_unbounded_dynamic_shape_refused_by_name_and_line():
    from hlo_compile.codegen.compiler import plan_module
    from hlo_compile.hlo import HloUnsupportedError
    module = parse_module(UNBOUNDED)
    for refuse in (lambda: plan_module(module, CompileOptions()), lambda: evaluate_module(module, [None]),
                   lambda: memory_estimate.check_run(module, memory_estimate.RunRequest())):
        with pytest.raises(HloUnsupportedError, match=r"parameter 'a' has the unbounded dynamic shape f32\[\?\]") as e:
            refuse()
        assert e.value.location.line == 3


def test_interpreter_drops_values_after_their_last_use():
    """The interpreter frees each value once nothing reads it (XLA's slow-compile loop test,
    16k ops on 1280x1280 arrays, was killed for memory); values read late, dead code and a
    parameter ROOT still evaluate right."""
    import numpy as np
    from hlo_compile.interpreter.evaluator import Evaluator
    chain = "\n".join(f"  n{i + 1} = f32[3] negate(n{i})" for i in range(40))
    module = parse_module(f"""HloModule chain
ENTRY e {{
  n0 = f32[3] parameter(0)
  unused = f32[3] exponential(n0)
{chain}
  ROOT r = f32[3] add(n40, n0)
}}""")
    x = np.array([1.0, -2.0, 3.5], np.float32)
    assert np.array_equal(evaluate_module(module, [x]), x + x)
    ev = Evaluator(module)
    dead = ev._values_dead_after(module.entry)
    insts = module.entry.instructions
    freed = [v for k in range(len(insts)) for v in dead[k]]
    assert sorted(freed) == sorted(id(i) for i in insts if i is not module.entry.root)  # each once, ROOT kept
    where = {v: k for k in range(len(insts)) for v in dead[k]}
    assert where[id(insts[0])] == len(insts) - 1  # n0: read by the ROOT
    assert where[id(module.entry.instruction("unused"))] == 1  # never read: dropped at once
    passthrough = parse_module("HloModule p\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[2] parameter(1)\n}")
    assert np.array_equal(evaluate_module(passthrough, [x[:2], x[1:]]), x[1:])
