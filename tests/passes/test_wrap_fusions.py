"""wrap_lone_instructions: every kernel-needing ENTRY op becomes a one-instruction fusion that
prints, re-parses, verifies and evaluates exactly like the original module."""
from __future__ import annotations

import numpy as np
import pytest

import hlo_compile
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes.wrap_fusions import needs_kernel, wrap_entry_as_fusion, wrap_lone_instructions

MODULES = {
    "elementwise_chain": ("""HloModule m
ENTRY e {
  p = f32[8,16] parameter(0)
  c = f32[] constant(0.5)
  b = f32[8,16] broadcast(c), dimensions={}
  m = f32[8,16] multiply(p, b)
  ROOT t = f32[8,16] tanh(m)
}""", [((8, 16), np.float32)]),
    "same_operand_twice_and_reduce": ("""HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  p = f32[4,6] parameter(0)
  sq = f32[4,6] multiply(p, p)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(sq, z), dimensions={1}, to_apply=add
}""", [((4, 6), np.float32)]),
    "tuple_gte_bitcast_iota": ("""HloModule m
ENTRY e {
  p = s32[2,3] parameter(0)
  i = s32[2,3] iota(), iota_dimension=1
  s = s32[2,3] add(p, i)
  bc = s32[6] bitcast(s)
  t = (s32[6], s32[2,3]) tuple(bc, s)
  g = s32[6] get-tuple-element(t), index=0
  n = s32[6] negate(g)
  ROOT out = (s32[6], s32[2,3]) tuple(n, s)
}""", [((2, 3), np.int32)]),
    "transpose_layout_and_slice": ("""HloModule m
ENTRY e {
  p = f32[5,7]{0,1} parameter(0)
  t = f32[7,5]{1,0} transpose(p), dimensions={1,0}
  ROOT s = f32[3,5]{1,0} slice(t), slice={[2:5], [0:5]}
}""", [((5, 7), np.float32)]),
    "control_predecessors": ("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] exponential(p)
  ROOT b = f32[4] negate(p), control-predecessors={a}
}""", [((4,), np.float32)]),
}


def _args(specs, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        out.append((rng.standard_normal(shape) * 3).astype(dtype))
    return out


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_wrap_prints_reparses_and_evaluates_the_same(name):
    text, specs = MODULES[name]
    args = _args(specs)
    before = evaluate_module(hlo_compile.parse_module(text), args)
    module = wrap_lone_instructions(hlo_compile.parse_module(text))
    reparsed = hlo_compile.parse_module(module.to_text())  # parse_module verifies
    assert reparsed.to_text() == module.to_text()
    assert _same(evaluate_module(module, args), before)
    assert _same(evaluate_module(reparsed, args), before)
    for inst in module.entry.instructions:
        assert not needs_kernel(inst), f"{inst.name} ({inst.opcode}) left unwrapped"


def test_wrapping_twice_changes_nothing():
    module = wrap_lone_instructions(hlo_compile.parse_module(MODULES["elementwise_chain"][0]))
    text = module.to_text()
    assert wrap_lone_instructions(module) is module and module.to_text() == text


def test_fusion_keeps_name_shape_and_calls_fused_computation():
    module = wrap_lone_instructions(hlo_compile.parse_module(MODULES["same_operand_twice_and_reduce"][0]))
    sq = module.entry.instruction("sq")
    assert sq.opcode == "fusion" and sq.attr("kind") == "kLoop"
    comp = sq.fused_computation
    assert comp.name == "fused_sq" and comp in module.computations
    assert [o.name for o in sq.operands] == ["p"]  # the repeated operand becomes one parameter
    assert comp.root.opcode == "multiply" and comp.root.operands[0] is comp.root.operands[1]
    r = module.entry.root
    assert r.name == "r" and r.opcode == "fusion" and r.operands[0] is sq
    assert r.fused_computation.root.to_apply.name == "add"
    assert module.computations.index(comp) < module.computations.index(module.entry)


def test_no_kernel_ops_are_left_alone():
    module = wrap_lone_instructions(hlo_compile.parse_module(MODULES["tuple_gte_bitcast_iota"][0]))
    ops = {i.name: i.opcode for i in module.entry.instructions}
    assert ops == {"p": "parameter", "i": "fusion", "s": "fusion", "bc": "bitcast", "t": "tuple",
                   "g": "get-tuple-element", "n": "fusion", "out": "tuple"}
    assert module.entry.instruction("i").operands == []


def test_control_predecessors_move_to_the_fusion():
    module = wrap_lone_instructions(hlo_compile.parse_module(MODULES["control_predecessors"][0]))
    b = module.entry.instruction("b")
    assert b.attr("control-predecessors") == (module.entry.instruction("a"),)
    assert "control-predecessors" not in b.fused_computation.root.attributes


def test_existing_fusions_and_control_flow_are_not_wrapped():
    text = """HloModule m
fused {
  x = f32[4] parameter(0)
  ROOT y = f32[4] negate(x)
}
ENTRY e {
  p = f32[4] parameter(0)
  f = f32[4] fusion(p), kind=kLoop, calls=fused
  cc = f32[4] custom-call(f), custom_call_target="foo"
  ROOT a = f32[4] add(f, cc)
}"""
    module = wrap_lone_instructions(hlo_compile.parse_module(text))
    ops = {i.name: i.opcode for i in module.entry.instructions}
    assert ops == {"p": "parameter", "f": "fusion", "cc": "custom-call", "a": "fusion"}
    assert module.entry.instruction("f").fused_computation.name == "fused"
    hlo_compile.parse_module(module.to_text())


def test_computation_names_are_made_unique():
    text = """HloModule m
fused_a {
  x = f32[4] parameter(0)
  ROOT y = f32[4] negate(x)
}
ENTRY e {
  p = f32[4] parameter(0)
  f = f32[4] fusion(p), kind=kLoop, calls=fused_a
  ROOT a = f32[4] abs(f)
}"""
    module = wrap_lone_instructions(hlo_compile.parse_module(text))
    assert module.entry.root.fused_computation.name == "fused_a.1"
    hlo_compile.parse_module(module.to_text())


def test_wrap_entry_as_fusion_for_emitter_test_files():
    text = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fusion {
  p0 = f32[8,32] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[8] reduce(p0, c), dimensions={1}, to_apply=add
}"""
    module = wrap_entry_as_fusion(hlo_compile.parse_module(text))
    assert module.entry.name == "main" and module.entry.root.opcode == "fusion"
    assert module.entry.root.fused_computation.name == "fusion"
    x = _args([((8, 32), np.float32)])
    reparsed = hlo_compile.parse_module(module.to_text())
    np.testing.assert_allclose(evaluate_module(reparsed, x), x[0].sum(axis=1), rtol=1e-5)
    assert wrap_entry_as_fusion(reparsed) is reparsed and reparsed.entry.name == "main"


def _jax_cases(corpus):
    cases = sorted(p for p in (corpus / "jax").glob("*/case.json"))
    if not cases:
        pytest.skip("no JAX cases in the corpus")
    return [c.parent for c in cases]


def test_wrapping_jax_corpus_modules_keeps_their_results(corpus):
    import ml_dtypes
    checked = 0
    for case in _jax_cases(corpus):
        inputs = np.load(case / "inputs.npz")
        for hlo in ("unoptimized.hlo", "optimized_cpu.hlo", "module.hlo"):
            path = case / hlo
            if not path.exists():
                continue
            text = path.read_text()
            module = hlo_compile.parse_module(text, str(path))
            args = [inputs[f"arg{i}"] for i in range(len(module.entry.parameters))]
            args = [a.view(ml_dtypes.bfloat16) if a.dtype.kind == "V" and p.shape.element_type == "bf16" else a
                    for a, p in zip(args, module.entry.parameters)]
            before = evaluate_module(module, args, seed=1)
            wrapped = hlo_compile.parse_module(wrap_lone_instructions(module).to_text(), str(path))
            assert _same(evaluate_module(wrapped, args, seed=1), before), f"{case.name}/{hlo}"
            checked += 1
    assert checked > 0
