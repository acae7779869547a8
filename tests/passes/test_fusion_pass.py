"""Producer-consumer fusion (``passes/fusion.py``): which instructions end up together, what is
duplicated and what is not, that the fused module still verifies and prints, and that fused
modules compute what the unfused ones do (host target against the interpreter), on hand-written
cases and on random elementwise graphs."""
from __future__ import annotations

import random

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.hlo.verifier import verify_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes import run_passes
from hlo_compile.passes.fusion import MAX_FUSED_INSTRUCTIONS

from codegen_helpers import run_on_host

SOFTMAX = """HloModule softmax
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64,256] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[64] reduce(x, ninf), dimensions={1}, to_apply=max
  mxb = f32[64,256] broadcast(mx), dimensions={0}
  d = f32[64,256] subtract(x, mxb)
  ex = f32[64,256] exponential(d)
  zero = f32[] constant(0)
  sum = f32[64] reduce(ex, zero), dimensions={1}, to_apply=add
  sb = f32[64,256] broadcast(sum), dimensions={0}
  ROOT out = f32[64,256] divide(ex, sb)
}"""


def _fusions(module) -> dict[str, list[str]]:
    """{fusion name: opcodes of its fused computation (parameters left out)} of ENTRY."""
    return {i.name: sorted(x.opcode for x in i.fused_computation.instructions if x.opcode != "parameter")
            for i in module.entry.instructions if i.opcode == "fusion"}


def _entry_opcodes(module) -> list[str]:
    return [i.opcode for i in module.entry.instructions]


def test_softmax_is_two_reductions_and_two_loops():
    module = run_passes(parse_module(SOFTMAX))
    fusions = _fusions(module)
    assert fusions == {
        "mx": ["constant", "reduce"],
        "ex": ["broadcast", "exponential", "subtract"],       # exp has two users: not duplicated
        "sum": ["constant", "reduce"],
        "out": ["broadcast", "divide"],
    }
    kinds = {i.name: i.attr("kind") for i in module.entry.instructions if i.opcode == "fusion"}
    assert kinds == {"mx": "kInput", "ex": "kLoop", "sum": "kInput", "out": "kLoop"}
    assert _entry_opcodes(module) == ["parameter", "fusion", "fusion", "fusion", "fusion"]
    verify_module(parse_module(module.to_text()))  # prints, re-parses and verifies
    ok, report = run_on_host(parse_module(SOFTMAX))
    assert ok, report


def test_fusion_can_be_turned_off():
    module = parse_module(SOFTMAX)
    fused = plan_module(module, CompileOptions())
    unfused = plan_module(module, CompileOptions(fusion=False))
    assert len(fused.kernels) == 4 and len(unfused.kernels) == 7  # constants need no kernel


def test_cheap_producers_are_duplicated_and_their_original_dropped():
    text = """HloModule dup
ENTRY e {
  x = f32[32] parameter(0)
  y = f32[32] parameter(1)
  c = f32[] constant(2)
  b = f32[32] broadcast(c), dimensions={}
  m = f32[32] multiply(x, b)
  ex = f32[32] exponential(y)
  a = f32[32] add(ex, b)
  mm = f32[32] multiply(m, m)
  ROOT t = (f32[32], f32[32]) tuple(mm, a)
}"""
    module = run_passes(parse_module(text))
    fusions = _fusions(module)
    # the broadcast (and its constant) is read by both groups: one copy in each, none left
    assert fusions == {"mm": ["broadcast", "constant", "multiply", "multiply"],
                       "a": ["add", "broadcast", "constant", "exponential"]}
    assert "broadcast" not in _entry_opcodes(module) and "constant" not in _entry_opcodes(module)
    ok, report = run_on_host(parse_module(text))
    assert ok, report


def test_expensive_producers_are_neither_duplicated_nor_broadcast():
    text = """HloModule expensive
ENTRY e {
  x = f32[16] parameter(0)
  l = f32[16] log(x)
  a = f32[16] add(l, l)
  n = f32[16] negate(l)
  b = f32[16,8] broadcast(a), dimensions={0}
  ROOT t = (f32[16], f32[16,8]) tuple(n, b)
}"""
    module = run_passes(parse_module(text))
    fusions = _fusions(module)
    # log has two users in different kernels: computed once, in a kernel of its own; the add
    # (cheap) goes into the broadcast's kernel
    assert fusions["l"] == ["log"] and fusions["b"] == ["add", "broadcast"] and fusions["n"] == ["negate"]
    text2 = text.replace("n = f32[16] negate(l)", "n = f32[16] negate(x)").replace(
        "a = f32[16] add(l, l)", "a = f32[16] exponential(x)")
    fusions2 = _fusions(run_passes(parse_module(text2)))
    assert fusions2["a"] == ["exponential"] and fusions2["b"] == ["broadcast"]  # exp read 8 times: not fused
    for t in (text, text2):
        ok, report = run_on_host(parse_module(t))
        assert ok, report


def test_no_fusion_into_dots_scatters_or_sorts_and_reductions_are_not_producers():
    text = """HloModule heavy
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  nx = f32[8,16] negate(x)
  d = f32[8,4] dot(nx, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  r = f32[8] reduce(d, z), dimensions={1}, to_apply=add
  rr = f32[8] multiply(r, r)
  ROOT s = f32[8] sort(rr), dimensions={0}, to_apply=%lt
}"""
    module = run_passes(parse_module(text))
    fusions = _fusions(module)
    assert fusions["d"] == ["dot"] and fusions["nx"] == ["negate"]
    assert fusions["r"] == ["constant", "reduce"] and fusions["rr"] == ["multiply"] and fusions["s"] == ["sort"]
    ok, report = run_on_host(parse_module(text))
    assert ok, report


def test_group_size_is_bounded():
    lines = ["HloModule chain", "ENTRY e {", "  v0 = f32[8] parameter(0)"]
    n = 150
    lines += [f"  v{i} = f32[8] add(v{i - 1}, v{i - 1})" for i in range(1, n)]
    lines += [f"  ROOT v{n} = f32[8] negate(v{n - 1})", "}"]
    text = "\n".join(lines)
    module = run_passes(parse_module(text))
    sizes = [len(v) for v in _fusions(module).values()]
    assert max(sizes) == MAX_FUSED_INSTRUCTIONS and sum(sizes) == n and len(sizes) == 3
    ok, report = run_on_host(parse_module(text))
    assert ok, report


def test_control_predecessors_keep_their_instruction_alone():
    text = """HloModule ctl
ENTRY e {
  x = f32[8] parameter(0)
  a = f32[8] negate(x)
  b = f32[8] exponential(a), control-predecessors={a}
  ROOT c = f32[8] add(b, x)
}"""
    module = run_passes(parse_module(text))
    fusions = _fusions(module)
    assert fusions["b"] == ["exponential"] and fusions["c"] == ["add"]


_UNARY = ["negate", "exponential", "abs", "tanh", "log-plus-one", "sqrt", "floor"]
_BINARY = ["add", "multiply", "subtract", "maximum", "minimum", "divide"]


def _random_graph(rng: random.Random) -> str:
    """A random DAG of elementwise ops, broadcasts of scalars, reshapes, transposes, slices and
    row reductions over f32[6,8] values, with values reused by several consumers and several
    results."""
    lines = ["HloModule random", "add {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
             "  ROOT s = f32[] add(a, b)", "}", "ENTRY e {",
             "  p0 = f32[6,8] parameter(0)", "  p1 = f32[6,8] parameter(1)"]
    values = ["p0", "p1"]
    for i in range(rng.randint(4, 18)):
        name = f"v{i}"
        kind = rng.random()
        a, b = rng.choice(values), rng.choice(values)
        if kind < 0.35:
            op = rng.choice(_UNARY)
            if op in ("sqrt", "log-plus-one"):  # keep them real: read an abs
                lines.append(f"  {name}a = f32[6,8] abs({a})")
                a = f"{name}a"
            lines.append(f"  {name} = f32[6,8] {op}({a})")
        elif kind < 0.7:
            lines.append(f"  {name} = f32[6,8] {rng.choice(_BINARY)}({a}, {b})")
        elif kind < 0.8:
            lines.append(f"  {name}c = f32[] constant({rng.choice([0.5, 2, -1.25])})")
            lines.append(f"  {name}b = f32[6,8] broadcast({name}c), dimensions={{}}")
            lines.append(f"  {name} = f32[6,8] multiply({a}, {name}b)")
        elif kind < 0.88:
            lines.append(f"  {name}t = f32[8,6] transpose({a}), dimensions={{1,0}}")
            lines.append(f"  {name}r = f32[6,8] reshape({name}t)")
            lines.append(f"  {name} = f32[6,8] add({name}r, {b})")
        else:
            lines.append(f"  {name}z = f32[] constant(0)")
            lines.append(f"  {name}s = f32[6] reduce({a}, {name}z), dimensions={{1}}, to_apply=add")
            lines.append(f"  {name}b = f32[6,8] broadcast({name}s), dimensions={{0}}")
            lines.append(f"  {name} = f32[6,8] subtract({b}, {name}b)")
        values.append(name)
    outs = rng.sample(values[2:], k=min(len(values) - 2, rng.randint(1, 3)))
    lines.append(f"  ROOT out = ({', '.join('f32[6,8]' for _ in outs)}) tuple({', '.join(outs)})")
    lines.append("}")
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(24))
def test_random_graphs_fused_match_the_interpreter(seed):
    text = _random_graph(random.Random(seed))
    module = parse_module(text)
    fused = run_passes(module)
    verify_module(parse_module(fused.to_text()))
    unfused = plan_module(module, CompileOptions(fusion=False))
    assert len(plan_module(module, CompileOptions()).kernels) <= len(unfused.kernels)
    ok, report = run_on_host(module, seed=seed)
    assert ok, f"{report}\n{text}"


def test_fusion_pass_leaves_its_input_alone():
    module = parse_module(SOFTMAX)
    before = module.to_text()
    run_passes(module)
    assert module.to_text() == before
