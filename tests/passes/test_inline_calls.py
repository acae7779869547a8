"""inline_calls: every ``call`` of ENTRY is replaced by the body of its callee; the module still
prints, re-parses (with verification) and evaluates bit for bit as before."""
from __future__ import annotations


import numpy as np
import pytest

import hlo_compile
from conftest import corpus_root
from hlo_compile.hlo.attributes import Attribute
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes.inline_calls import inline_calls
from hlo_compile.runtime import literals

SCALAR = """HloModule m
add_one {
  x = f32[] parameter(0)
  one = f32[] constant(1)
  ROOT s = f32[] add(x, one)
}
ENTRY e {
  p = f32[] parameter(0)
  c = f32[] call(p), to_apply=add_one
  ROOT n = f32[] negate(c)
}"""

NESTED = """HloModule m
inner {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  ROOT m = f32[4] multiply(a, b)
}
middle {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  s = f32[4] add(x, y)
  ROOT c = f32[4] call(s, x), to_apply=inner
}
outer {
  u = f32[4] parameter(0)
  e = f32[4] exponential(u)
  ROOT c = f32[4] call(e, u), to_apply=middle
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] call(p), to_apply=outer
}"""

TUPLE = """HloModule m
split {
  x = f32[3] parameter(0)
  y = s32[3] parameter(1)
  n = f32[3] negate(x)
  a = s32[3] abs(y)
  ROOT t = (f32[3], s32[3]) tuple(n, a)
}
ENTRY e {
  p = f32[3] parameter(0)
  q = s32[3] parameter(1)
  c = (f32[3], s32[3]) call(p, q), to_apply=split
  g0 = f32[3] get-tuple-element(c), index=0
  g1 = s32[3] get-tuple-element(c), index=1
  f = f32[3] convert(g1)
  ROOT s = f32[3] add(g0, f)
}"""

TWICE = """HloModule m
sq {
  x = f32[2,2] parameter(0)
  ROOT m = f32[2,2] multiply(x, x)
}
ENTRY e {
  p = f32[2,2] parameter(0)
  m = f32[2,2] add(p, p)
  c1 = f32[2,2] call(p), to_apply=sq
  c2 = f32[2,2] call(c1), to_apply=sq
  ROOT t = (f32[2,2], f32[2,2], f32[2,2]) tuple(m, c1, c2)
}"""

PARAM_ROOT = """HloModule m
second {
  a = f32[5] parameter(0)
  ROOT b = f32[5] parameter(1)
  unused = f32[5] negate(a)
}
ENTRY e {
  p = f32[5] parameter(0)
  q = f32[5] parameter(1)
  c = f32[5] call(p, q), to_apply=second
  d = f32[5] call(q, c), to_apply=second
  ROOT s = f32[5] subtract(p, d)
}"""

CALL_IS_ROOT_WITH_REDUCE = """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
rowsum {
  a = f32[4,6] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(a, z), dimensions={1}, to_apply=add
}
ENTRY e {
  p = f32[4,6] parameter(0)
  ROOT c = f32[4] call(p), to_apply=rowsum
}"""

CONTROL = """HloModule m
body {
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  ROOT n = f32[4] negate(x), control-predecessors={e}
}
ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] sine(p)
  c = f32[4] call(p), to_apply=body, control-predecessors={a}
  ROOT b = f32[4] cosine(p), control-predecessors={c}
}"""

MODULES = {
    "scalar": (SCALAR, [((), np.float32)]),
    "nested": (NESTED, [((4,), np.float32)]),
    "tuple": (TUPLE, [((3,), np.float32), ((3,), np.int32)]),
    "twice": (TWICE, [((2, 2), np.float32)]),
    "param_root": (PARAM_ROOT, [((5,), np.float32), ((5,), np.float32)]),
    "call_is_root_with_reduce": (CALL_IS_ROOT_WITH_REDUCE, [((4, 6), np.float32)]),
    "control": (CONTROL, [((4,), np.float32)]),
}


def _args(specs, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * 3).astype(dtype) for shape, dtype in specs]


def _same(a, b) -> bool:
    """Bit-identical results (NaNs included)."""
    la, lb = literals.flatten(a), literals.flatten(b)
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(la, lb))


def _check(module: hlo_compile.HloModule, args: list, before) -> hlo_compile.HloModule:
    """``module`` (inlined) has no call in ENTRY, prints and re-parses to the same text, and
    both it and its re-parse evaluate to ``before``. Returns the re-parsed module."""
    assert all(i.opcode != "call" for i in module.entry.instructions)
    text = module.to_text()
    reparsed = hlo_compile.parse_module(text)  # verifies
    assert reparsed.to_text() == text
    assert _same(evaluate_module(module, args), before)
    assert _same(evaluate_module(reparsed, args), before)
    return reparsed


def _inlined(text: str) -> tuple[hlo_compile.HloModule, hlo_compile.HloModule]:
    return hlo_compile.parse_module(text), inline_calls(hlo_compile.parse_module(text))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_inlined_module_prints_reparses_and_evaluates_the_same(name):
    text, specs = MODULES[name]
    original, module = _inlined(text)
    args = _args(specs)
    _check(module, args, evaluate_module(original, args))
    names = [i.name for i in module.entry.instructions]
    assert len(names) == len(set(names))
    for inst in module.entry.instructions:
        assert inst.parent is module.entry
        assert all(op.parent is module.entry for op in inst.operands)
        assert all(inst in op.users for op in inst.operands)


def _entry_ops(module) -> list[tuple[str, str, list[str]]]:
    return [(i.name, i.opcode, [o.name for o in i.operands]) for i in module.entry.instructions]


def test_scalar_call_body_replaces_the_call():
    _, m = _inlined(SCALAR)
    assert _entry_ops(m) == [("p", "parameter", []), ("one", "constant", []), ("s", "add", ["p", "one"]),
                             ("n", "negate", ["s"])]
    assert m.entry.root.name == "n"


def test_nested_calls_are_inlined_recursively_with_unique_names():
    _, m = _inlined(NESTED)
    assert _entry_ops(m) == [("p", "parameter", []), ("e", "exponential", ["p"]), ("s", "add", ["e", "p"]),
                             ("m", "multiply", ["s", "e"])]
    assert m.entry.root.name == "m"
    # the callee computations stay in the module, untouched
    assert [i.opcode for i in m.computation("middle").instructions][-1] == "call"


def test_tuple_root_gives_a_tuple_that_gte_users_read():
    _, m = _inlined(TUPLE)
    t = m.entry.instruction("t")
    assert t.opcode == "tuple" and [o.name for o in t.operands] == ["n", "a"]
    assert [u.name for u in t.users] == ["g0", "g1"]
    assert m.entry.instruction("g1").operands == [t]


def test_two_calls_to_one_computation_get_suffixed_names():
    _, m = _inlined(TWICE)
    # ENTRY already has "m": the first copy of sq's "m" becomes m.1, the second m.2
    assert _entry_ops(m) == [("p", "parameter", []), ("m", "add", ["p", "p"]), ("m.1", "multiply", ["p", "p"]),
                             ("m.2", "multiply", ["m.1", "m.1"]), ("t", "tuple", ["m", "m.1", "m.2"])]


def test_parameter_root_forwards_the_operand():
    _, m = _inlined(PARAM_ROOT)
    # c yields q; d yields c, i.e. q: nothing but the unused negates is left of the calls
    assert _entry_ops(m) == [("p", "parameter", []), ("q", "parameter", []), ("unused", "negate", ["p"]),
                             ("unused.1", "negate", ["q"]), ("s", "subtract", ["p", "q"])]


def test_call_as_root_and_shared_reducer():
    _, m = _inlined(CALL_IS_ROOT_WITH_REDUCE)
    root = m.entry.root
    assert root.opcode == "reduce" and root.name == "r"
    assert root.to_apply is m.computation("add")


def test_control_dependencies_follow_the_call():
    _, m = _inlined(CONTROL)
    e, n, b = (m.entry.instruction(x) for x in ("e", "n", "b"))
    a = m.entry.instruction("a")
    assert e.attr("control-predecessors") == (a,)
    assert n.attr("control-predecessors") == (e, a)
    assert b.attr("control-predecessors") == (n,)
    assert b.attributes["control-predecessors"].raw == "{%n}"


def test_copies_keep_the_callee_source_location():
    _, m = _inlined(NESTED)
    lines = NESTED.splitlines()
    for inst in m.entry.instructions:
        assert inst.location is not None
        assert lines[inst.location.line - 1].strip().removeprefix("ROOT ").startswith(inst.name + " ")


def test_module_without_calls_is_unchanged():
    text = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}"
    module = hlo_compile.parse_module(text)
    before = module.to_text()
    assert inline_calls(module) is module and module.to_text() == before


def test_calls_outside_entry_are_left_alone():
    text = """HloModule m
neg {
  x = s32[] parameter(0)
  ROOT n = s32[] negate(x)
}
body {
  t = s32[] parameter(0)
  one = s32[] constant(1)
  a = s32[] add(t, one)
  ROOT c = s32[] call(a), to_apply=neg
}
cond {
  t = s32[] parameter(0)
  ten = s32[] constant(-10)
  ROOT lt = pred[] compare(t, ten), direction=GT
}
ENTRY e {
  p = s32[] parameter(0)
  ROOT w = s32[] while(p), condition=cond, body=body
}"""
    original, m = _inlined(text)
    assert m.to_text() == original.to_text()


# ---- the JAX corpus ---------------------------------------------------------------------------

def _jax_cases() -> list:
    root = corpus_root()
    jax = root / "jax" if root is not None else None
    if jax is None or not jax.is_dir():
        return [pytest.param(None, id="no-corpus")]
    return [pytest.param(c.name, id=c.name) for c in sorted(jax.iterdir()) if (c / "unoptimized.hlo").is_file()]


@pytest.mark.parametrize("case", _jax_cases())
def test_jax_unoptimized_modules(corpus, case):
    if case is None or not (corpus / "jax" / case).is_dir():
        pytest.skip("no JAX corpus")
    case_dir = corpus / "jax" / case
    path = case_dir / "unoptimized.hlo"
    text = path.read_text()
    original = hlo_compile.parse_module(text, str(path))
    args = literals.load_inputs(case_dir / "inputs.npz", original)
    before = evaluate_module(original, args)
    module = inline_calls(hlo_compile.parse_module(text, str(path)))
    _check(module, args, before)


def test_recursive_call_is_an_error():
    text = """HloModule m
g {
  y = f32[] parameter(0)
  ROOT n = f32[] negate(y)
}
ENTRY e {
  p = f32[] parameter(0)
  ROOT c = f32[] call(p), to_apply=g
}"""
    module = hlo_compile.parse_module(text)
    g = module.computation("g")
    loop = hlo_compile.HloInstruction("loop", "call", g.root.shape, [g.parameter(0)],
                                      {"to_apply": Attribute("to_apply", "%g", g)})
    g.instructions.append(loop)
    g.root = loop
    with pytest.raises(hlo_compile.HloError, match="recursively"):
        inline_calls(module)
