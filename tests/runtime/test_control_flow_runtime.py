"""while and conditional on the host platform (XLA semantics), against the interpreter:
loop-carried tuples, fusions with a transpose in a body, nested loops, calls in bodies,
conditionals by pred and by index (out of range too), the JAX corpus control-flow cases;
kernels of sub-computations planned at compile time; buffers freed exactly when dead."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes import run_passes
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import Executable, compile_executable

from codegen_helpers import TrackingHostPlatform, run_on_host
from test_jax_corpus import run_case

COUNTER_ACC = """HloModule m
cond {
  p = (s32[], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(7)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8,4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  half = f32[] constant(0.5)
  h = f32[8,4] broadcast(half), dimensions={}
  fi = f32[] convert(i)
  b = f32[8,4] broadcast(fi), dimensions={}
  x2 = f32[8,4] multiply(x, h)
  x3 = f32[8,4] add(x2, b)
  ROOT t = (s32[], f32[8,4]) tuple(i2, x3)
}
ENTRY e {
  x = f32[8,4] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[8,4]) tuple(z, x)
  ROOT w = (s32[], f32[8,4]) while(t), condition=cond, body=body
}"""

TRANSPOSE_BODY = """HloModule m
fused_t {
  a = f32[16,16] parameter(0)
  c = f32[16,16] parameter(1)
  t = f32[16,16] transpose(a), dimensions={1,0}
  ROOT s = f32[16,16] add(t, c)
}
cond {
  p = (s32[], f32[16,16], f32[16,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[16,16], f32[16,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[16,16] get-tuple-element(p), index=1
  c = f32[16,16] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x2 = f32[16,16] fusion(x, c), kind=kInput, calls=fused_t
  ROOT t = (s32[], f32[16,16], f32[16,16]) tuple(i2, x2, c)
}
ENTRY e {
  x = f32[16,16] parameter(0)
  c = f32[16,16] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[16,16], f32[16,16]) tuple(z, x, c)
  w = (s32[], f32[16,16], f32[16,16]) while(t), condition=cond, body=body
  ROOT r = f32[16,16] get-tuple-element(w), index=1
}"""

NESTED = """HloModule m
inner_cond {
  p = (s32[], f32[6]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(j, n), direction=LT
}
inner_body {
  p = (s32[], f32[6]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  x = f32[6] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j2 = s32[] add(j, one)
  k = f32[6] constant({1, 2, 3, 4, 5, 6})
  x2 = f32[6] add(x, k)
  ROOT t = (s32[], f32[6]) tuple(j2, x2)
}
outer_cond {
  p = (s32[], f32[6], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
outer_body {
  p = (s32[], f32[6], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[6] get-tuple-element(p), index=1
  total = s32[] get-tuple-element(p), index=2
  z = s32[] constant(0)
  it = (s32[], f32[6]) tuple(z, x)
  w = (s32[], f32[6]) while(it), condition=inner_cond, body=inner_body
  j = s32[] get-tuple-element(w), index=0
  x2 = f32[6] get-tuple-element(w), index=1
  x3 = f32[6] multiply(x2, x2)
  s = f32[6] sqrt(x3)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  total2 = s32[] add(total, j)
  ROOT t = (s32[], f32[6], s32[]) tuple(i2, s, total2)
}
ENTRY e {
  x = f32[6] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[6], s32[]) tuple(z, x, z)
  ROOT w = (s32[], f32[6], s32[]) while(t), condition=outer_cond, body=outer_body
}"""

BRANCHES = """b0 {
  p = f32[4,8] parameter(0)
  ROOT n = f32[4,8] negate(p)
}
b1 {
  p = (f32[4,8], f32[4,8]) parameter(0)
  a = f32[4,8] get-tuple-element(p), index=0
  b = f32[4,8] get-tuple-element(p), index=1
  ROOT s = f32[4,8] add(a, b)
}
b2 {
  p = f32[4,8] parameter(0)
  e = f32[4,8] exponential(p)
  ROOT m = f32[4,8] multiply(e, p)
}
"""

INDEXED = "HloModule m\n" + BRANCHES + """ENTRY e {
  i = s32[] parameter(0)
  x = f32[4,8] parameter(1)
  y = f32[4,8] parameter(2)
  xy = (f32[4,8], f32[4,8]) tuple(x, y)
  ROOT c = f32[4,8] conditional(i, x, xy, y), branch_computations={b0, b1, b2}
}"""

PRED = "HloModule m\n" + BRANCHES + """ENTRY e {
  a = f32[] parameter(0)
  x = f32[4,8] parameter(1)
  y = f32[4,8] parameter(2)
  zero = f32[] constant(0)
  p = pred[] compare(a, zero), direction=GT
  ROOT c = f32[4,8] conditional(p, x, y), true_computation=b0, false_computation=b2
}"""

# a conditional whose branch holds a while whose body calls a computation
WHILE_IN_BRANCH = """HloModule m
scale {
  v = f32[5] parameter(0)
  two = f32[] constant(2)
  t = f32[5] broadcast(two), dimensions={}
  ROOT m = f32[5] multiply(v, t)
}
cond {
  p = (s32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[5] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x2 = f32[5] call(x), to_apply=scale
  ROOT t = (s32[], f32[5]) tuple(i2, x2)
}
loop_branch {
  x = f32[5] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[5]) tuple(z, x)
  w = (s32[], f32[5]) while(t), condition=cond, body=body
  ROOT r = f32[5] get-tuple-element(w), index=1
}
plain_branch {
  x = f32[5] parameter(0)
  ROOT r = f32[5] abs(x)
}
ENTRY e {
  p = pred[] parameter(0)
  x = f32[5] parameter(1)
  ROOT c = f32[5] conditional(p, x, x), true_computation=loop_branch, false_computation=plain_branch
}"""


def _parse(text: str):
    return parse_module(text, "test.hlo")


def _check(text: str, args=None, seed: int = 0):
    ok, report = run_on_host(_parse(text), seed=seed, args=args)
    assert ok, report


# ---- while ------------------------------------------------------------------------------------

def test_while_counter_and_accumulator():
    _check(COUNTER_ACC)
    r = compile_executable(_parse(COUNTER_ACC), "host").run([np.ones((8, 4), np.float32)])
    assert r[0] == 7


def test_while_body_with_transpose_fusion():
    _check(TRANSPOSE_BODY)
    _check(TRANSPOSE_BODY, seed=3)


def test_nested_while():
    _check(NESTED)
    r = compile_executable(_parse(NESTED), "host").run([np.arange(6, dtype=np.float32)])
    assert r[0] == 4 and r[2] == 12


def test_while_that_never_runs_returns_its_operand():
    text = COUNTER_ACC.replace("constant(7)", "constant(-1)")
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    r = compile_executable(_parse(text), "host").run([x])
    assert r[0] == 0 and np.array_equal(r[1], x)


def test_while_over_a_bare_array_and_aliased_state():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  x = f32[3] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(x, z), dimensions={0}, to_apply=add
  lim = f32[] constant(100)
  ROOT lt = pred[] compare(r, lim), direction=LT
}
body {
  x = f32[3] parameter(0)
  ROOT d = f32[3] add(x, x)
}
ENTRY e {
  x = f32[3] parameter(0)
  w = f32[3] while(x), condition=cond, body=body
  ROOT t = (f32[3], f32[3], f32[3]) tuple(w, x, w)
}"""
    _check(text, args=[np.array([1, 2, 3], np.float32)])
    r = compile_executable(_parse(text), "host").run([np.array([1, 2, 3], np.float32)])
    assert list(r[0]) == [32, 64, 96] and list(r[1]) == [1, 2, 3]


def test_runs_twice_with_the_same_executable():
    exe = compile_executable(_parse(NESTED), "host")
    a = exe.run([np.ones(6, np.float32)])
    b = exe.run([np.ones(6, np.float32)])
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


# ---- conditional ------------------------------------------------------------------------------

@pytest.mark.parametrize("index", [0, 1, 2, 3, 17, -1, -5])
def test_conditional_by_index(index):
    rng = np.random.default_rng(index & 0xff)
    x, y = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    _check(INDEXED, args=[np.int32(index), x, y])


@pytest.mark.parametrize("a", [1.5, -2.0])
def test_conditional_by_pred(a):
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    _check(PRED, args=[np.float32(a), x, y])


@pytest.mark.parametrize("p", [True, False])
def test_while_with_call_inside_a_conditional_branch(p):
    x = np.array([1, -2, 3, -4, 5], np.float32)
    _check(WHILE_IN_BRANCH, args=[np.bool_(p), x])
    r = compile_executable(_parse(WHILE_IN_BRANCH), "host").run([np.bool_(p), x])
    assert np.array_equal(r, x * 8 if p else np.abs(x))


# ---- compile-time planning and errors -------------------------------------------------------

def test_sub_computations_are_planned_at_compile_time():
    plan = plan_module(_parse(WHILE_IN_BRANCH), CompileOptions())
    names = [c.name for c in plan.computations]
    assert names[0] == "e" and set(names[1:]) == {"loop_branch", "plain_branch", "cond", "body"}
    fusions = {k.fusion.name for k in plan.kernels}
    # the call in the body was inlined, its multiply wrapped as a fusion; cond's compare too
    assert {"m", "lt", "i2", "r"} <= fusions
    assert len({k.kernel_name for k in plan.kernels}) == len(plan.kernels)


def test_fusion_names_are_unique_across_computations():
    # ``lt`` and ``i2`` exist in both loops' conditions and bodies
    module = run_passes(_parse(NESTED.replace("j2 = s32[] add(j, one)", "i2 = s32[] add(j, one)")
                               .replace("tuple(j2, x2)", "tuple(i2, x2)")))
    from hlo_compile.passes.prepare_control_flow import executed_computations
    names = [i.name for c in executed_computations(module) for i in c.instructions if i.opcode == "fusion"]
    assert len(names) == len(set(names)), names
    exe = compile_executable(_parse(NESTED.replace("j2 = s32[] add(j, one)", "i2 = s32[] add(j, one)")
                                    .replace("tuple(j2, x2)", "tuple(i2, x2)")), "host")
    assert len(exe.kernels) == len(exe.plan.kernels)


def test_unsupported_op_in_a_body_names_op_and_line():
    text = COUNTER_ACC.replace("x3 = f32[8,4] add(x2, b)",
                               'x3 = f32[8,4] custom-call(x2, b), custom_call_target="foo"')
    with pytest.raises(HloUnsupportedError) as e:
        compile_executable(_parse(text), "host")
    line = next(n for n, l in enumerate(text.splitlines(), 1) if "custom-call" in l)
    assert "custom-call '%x3'" in str(e.value) and f"line {line}" in str(e.value)


def test_input_module_is_left_untouched():
    module = _parse(WHILE_IN_BRANCH)
    before = module.to_text()
    compile_executable(module, "host")
    assert module.to_text() == before


# ---- memory: every buffer freed once, none used after it was freed ------------------------------

@pytest.mark.parametrize("text", [NESTED, WHILE_IN_BRANCH, TRANSPOSE_BODY], ids=["nested", "branch", "transpose"])
def test_buffers_freed_when_dead(text):
    module = _parse(text)
    host = compile_executable(module, "host")
    platform = TrackingHostPlatform()
    exe = Executable(host.plan, platform, host.kernels)
    args = literals.random_inputs(module, 0)
    if text is WHILE_IN_BRANCH:
        args = [np.bool_(True), args[1]]
    got = literals.flatten(exe.run(args))
    want = literals.flatten(evaluate_module(module, args))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)
    # only the constants (uploaded once, kept for later runs) are still allocated
    assert len(platform.live) == len(exe._constants)


# ---- the JAX corpus ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["cf_fori_power_iter_f32", "cf_switch_s32"])
@pytest.mark.parametrize("hlo", ["unoptimized.hlo", "optimized_cpu.hlo"])
def test_jax_control_flow_cases(corpus, case, hlo):
    case_dir = corpus / "jax" / case
    if not (case_dir / hlo).is_file():
        pytest.skip(f"{case}/{hlo} not in the corpus")
    result = run_case(case_dir, hlo, run=lambda m, a: compile_executable(m, "host").run(a))
    assert result.ok, result.report()


# ---- the runtime steps, one by one --------------------------------------------------------------

STEPS = """HloModule m
fused_neg {
  p = f32[4,2] parameter(0)
  ROOT n = f32[4,2] negate(p)
}
ENTRY e {
  x = f32[8] parameter(0)
  k = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})
  b = f32[4,2] bitcast(x)
  n = f32[4,2] fusion(b), kind=kLoop, calls=fused_neg
  t = (f32[8], f32[4,2]) tuple(k, n)
  o = (f32[8], f32[4,2]) opt-barrier(t)
  ROOT g = f32[4,2] get-tuple-element(o), index=1
}"""


def _inst(module, name):
    return next(i for i in module.entry.instructions if i.name == name)


def _frame(params=(), kernels=None):
    from hlo_compile.runtime.steps import ConstantPool, Frame, Resources
    return Frame(Resources(kernels or {}, ConstantPool()), list(params))


def _scalar(platform, value, et):
    from hlo_compile.hlo.shape import Shape
    from hlo_compile.runtime.values import upload_value
    return upload_value(platform, np.asarray(value), Shape.array(et, ()))


def test_each_simple_step_runs():
    from hlo_compile.runtime.host_platform import HostPlatform
    from hlo_compile.runtime.steps import (Bitcast, Constant, GetTupleElement, KernelLaunch, MakeTuple, Parameter,
                                           PassThrough)
    from hlo_compile.runtime.values import download_value, upload_value
    host = compile_executable(_parse(STEPS), "host")
    m, p = host.module, HostPlatform()
    x = np.arange(8, dtype=np.float32)
    frame = _frame([upload_value(p, x, _inst(m, "x").shape)], host.kernels)
    for step in (Parameter(_inst(m, "x")), Constant(_inst(m, "k")), Bitcast(_inst(m, "b"))):
        step.run(p, frame)
    assert frame.values[_inst(m, "x")] is frame.params[0]
    assert frame.values[_inst(m, "b")].data is frame.params[0].data
    assert frame.values[_inst(m, "b")].shape == _inst(m, "b").shape
    Constant(_inst(m, "k")).run(p, frame)  # uploaded once, shared by every use
    assert len(frame.resources.constants) == 1
    n = _inst(m, "n")
    KernelLaunch(n, host.plan.kernel_for(n)).run(p, frame)
    assert list(frame.owned.values()) == [frame.values[n].data]  # the launch owns its output
    for step in (MakeTuple(_inst(m, "t")), PassThrough(_inst(m, "o")), GetTupleElement(_inst(m, "g"))):
        step.run(p, frame)
    assert frame.values[_inst(m, "o")] is frame.values[_inst(m, "t")]
    np.testing.assert_array_equal(download_value(p, frame.values[_inst(m, "g")]), -x.reshape(4, 2))
    np.testing.assert_array_equal(download_value(p, frame.values[_inst(m, "t")])[0], np.arange(1, 9))


class _CountingProgram:
    """A stand-in program: counts its runs; ``result`` maps the argument to the root's value."""

    def __init__(self, result):
        self.result, self.runs = result, 0

    def run(self, platform, resources, params):
        self.runs += 1
        return self.result(params[0]), {}


def test_while_step_runs_body_until_the_predicate_is_false():
    from hlo_compile.runtime.control_flow import While
    from hlo_compile.runtime.host_platform import HostPlatform
    from hlo_compile.runtime.values import read_scalar
    p = HostPlatform()
    w = _inst(_parse(COUNTER_ACC), "w")
    cond = _CountingProgram(lambda s: _scalar(p, read_scalar(p, s) < 3, "pred"))
    body = _CountingProgram(lambda s: _scalar(p, read_scalar(p, s) + 1, "s32"))
    frame = _frame()
    frame.values[w.operands[0]] = _scalar(p, 0, "s32")
    While(w, cond, body).run(p, frame)
    assert (cond.runs, body.runs, int(read_scalar(p, frame.values[w]))) == (4, 3, 3)


@pytest.mark.parametrize("selector,et,taken", [(True, "pred", 0), (False, "pred", 1), (1, "s32", 1),
                                               (7, "s32", 2), (-1, "s32", 2)])
def test_conditional_step_runs_the_selected_branch(selector, et, taken):
    from hlo_compile.runtime.control_flow import Conditional
    from hlo_compile.runtime.host_platform import HostPlatform
    p = HostPlatform()
    c = _inst(_parse(INDEXED), "c")
    n = 2 if et == "pred" else 3
    branches = [_CountingProgram(lambda arg, i=i: (i, arg)) for i in range(n)]
    frame = _frame()
    frame.values[c.operands[0]] = _scalar(p, selector, et)
    for i, o in enumerate(c.operands[1:]):
        frame.values[o] = f"operand {i + 1}"
    Conditional(c, branches, by_index=et == "s32").run(p, frame)
    assert frame.values[c] == (taken, f"operand {taken + 1}")
    assert [b.runs for b in branches] == [int(i == taken) for i in range(n)]


def test_every_opcode_of_a_program_is_a_step():
    from hlo_compile.runtime.program import STEP_TYPES
    exe = compile_executable(_parse(NESTED), "host")
    kinds = {type(s).__name__ for prog in exe.programs.values() for s in prog.steps}
    assert {"Parameter", "Constant", "GetTupleElement", "MakeTuple", "KernelLaunch", "While"} <= kinds
    assert set(STEP_TYPES) >= {"parameter", "constant", "bitcast", "opt-barrier", "get-tuple-element", "tuple",
                               "fusion", "while", "conditional", "custom-call"}  # custom-call: library calls
