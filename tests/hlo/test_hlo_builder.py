"""``hlo/builder.py``: the one builder of new instructions for passes that lower an instruction
into others. Result shapes come from shape inference (layouts: default, an operand's for
tuples/get-tuple-element/while, the first same-dims operand's with ``keep_layout``, or the one
asked for); names are fresh ``<like>.<what>``; the instructions go into the computation before
the lowered one, in the order they were made; operands that shape inference refuses raise."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.builder import HloBuilder
from hlo_compile.hlo.printer import module_to_text
from hlo_compile.hlo.shape import Shape
from hlo_compile.hlo.shape_inference import ShapeInferenceError
from hlo_compile.hlo.verifier import verify_module

TEXT = """
HloModule m

ENTRY main {
  x = f32[2,3]{0,1} parameter(0)
  y = f32[2,3]{1,0} parameter(1)
  i = s32[3]{0} parameter(2)
  op = f32[2,3]{1,0} add(x, y)
  ROOT n = f32[2,3]{1,0} negate(op)
}
"""


def _setup(**kw):
    module = parse_module(TEXT)
    comp = module.entry
    by = {i.name: i for i in comp.instructions}
    return module, comp, by, HloBuilder(comp, by["op"], **kw)


def test_shapes_are_inferred():
    _, _, by, b = _setup()
    x, y, i = by["x"], by["y"], by["i"]
    s = b.binary("multiply", x, y)
    assert s.shape == Shape.array("f32", (2, 3))          # default layout, not x's {0,1}
    assert b.compare(s, y, "LT").shape == Shape.array("pred", (2, 3))
    assert b.transpose(s, (1, 0)).shape == Shape.array("f32", (3, 2))
    d = b.dot(s, b.transpose(y, (1, 0)), (1,), (0,))
    assert d.shape == Shape.array("f32", (2, 2))
    assert b.dot(s, s, (1,), (1,), (0,), (0,), et="f64").shape == Shape.array("f64", (2,))
    r = b.reduce(s, b.constant("f32", "0"), (1,), "add")
    assert r.shape == Shape.array("f32", (2,))
    assert b.slice(i, (1,), (3,)).shape == Shape.array("s32", (2,))
    assert b.concatenate([i, i], 0).shape == Shape.array("s32", (6,))
    assert b.pad(i, b.constant("s32", "0"), [(1, 2)]).shape == Shape.array("s32", (6,))
    t = b.tuple_of([x, i])
    assert t.shape == Shape.tuple_of([x.shape, i.shape])    # the operands' shapes, layouts included
    assert b.get_tuple_element(t, 0).shape == x.shape
    # explicit where the operands do not say
    assert b.convert(s, "bf16").shape == Shape.array("bf16", (2, 3))
    assert b.convert(s, "f32") is s
    assert b.broadcast(i, (2, 3), (1,)).shape == Shape.array("s32", (2, 3))
    assert b.reshape(s, (6,)).shape == Shape.array("f32", (6,))
    assert b.iota((4, 5), 1).shape == Shape.array("s32", (4, 5))
    assert b.binary("add", s, s, layout=(0, 1)).shape == Shape.array("f32", (2, 3), layout=(0, 1))


def test_keep_layout_follows_the_operand():
    _, _, by, b = _setup(keep_layout=True)
    x, y = by["x"], by["y"]
    assert b.binary("add", x, y).shape == x.shape            # {0,1}: the first operand's
    assert b.convert(x, "f16").shape == Shape.array("f16", (2, 3), layout=(0, 1))
    assert b.transpose(x, (1, 0)).shape == Shape.array("f32", (3, 2))   # not elementwise: default


def test_names_are_fresh_and_metadata_copied():
    _, _, by, b = _setup()
    x, y = by["x"], by["y"]
    a1 = b.binary("add", x, y)
    a2 = b.binary("add", a1, y)
    c = b.constant("f32", "1", name="one")
    assert [a1.name, a2.name, c.name] == ["op.add", "op.add.1", "op.one"]
    assert all(inst.location is by["op"].location for inst in (a1, a2, c))
    # a name the module holds already is not handed out again
    b2 = HloBuilder(b.comp, by["op"])
    assert b2.binary("add", x, y).name == "op.add"          # its own scope: the module's names
    _, _, by3, b3 = _setup()
    b3.names.fresh("op.negate")
    assert b3.unary("negate", by3["x"]).name == "op.negate.1"


def test_insert_before_the_lowered_instruction_in_order():
    module, comp, by, b = _setup()
    x, y = by["x"], by["y"]
    s = b.binary("subtract", x, y)
    m = b.binary("multiply", s, y)
    made = b.insert()
    assert made == [s, m] and b.new == []
    names = [i.name for i in comp.instructions]
    assert names == ["x", "y", "i", "op.subtract", "op.multiply", "op", "n"]
    assert m in s.users and s.parent is comp
    verify_module(module)


def test_reducer_made_once_per_kind_and_type():
    module, comp, by, b = _setup()
    s = b.binary("add", by["x"], by["y"])
    zero = b.constant("f32", "0")
    r1 = b.reduce(s, zero, (0,), "add")
    r2 = b.reduce(s, zero, (1,), "add")
    r3 = b.reduce(s, zero, (1,), "maximum")
    fork = b.fork()
    assert fork.new == [] and fork.reducer("add") is r1.attr("to_apply")
    assert r1.attr("to_apply") is r2.attr("to_apply") is not r3.attr("to_apply")
    names = [c.name for c in module.computations]
    assert names == ["op.add_computation", "op.maximum_computation", "main"]
    b.insert()
    verify_module(module)
    text = module_to_text(module)
    assert "to_apply=%op.add_computation" in text and "op.maximum" in text


def test_refused_operands_raise():
    _, _, by, b = _setup()
    x, i = by["x"], by["i"]
    with pytest.raises(ShapeInferenceError):
        b.binary("add", x, i)                                 # f32[2,3] + s32[3]
    with pytest.raises(ShapeInferenceError):
        b.dot(x, x, (1,), (0,))                               # 3 against 2
    with pytest.raises(ShapeInferenceError):
        b.transpose(x, (0, 0))
    with pytest.raises(ShapeInferenceError):
        b.reshape(x, (4,))
    with pytest.raises(ShapeInferenceError):
        b.broadcast(i, (2, 3), (0,))                          # 3 is not dimension 0's 2
    with pytest.raises(ShapeInferenceError):
        b.slice(i, (0,), (4,))
    assert b.new == []                                        # nothing made by a refused op


def test_loop_computation_from_a_fork():
    module, comp, by, b = _setup()
    shape = Shape.tuple_of([Shape.array("s32", ()), by["x"].shape])
    body_b = b.fork()
    p = body_b.parameter(0, shape, name="body.param")
    k = body_b.get_tuple_element(p, 0)
    root = body_b.tuple_of([body_b.binary("add", k, body_b.constant("s32", "1")), body_b.get_tuple_element(p, 1)])
    assert root.shape == shape and p.name == "op.body.param"
    assert body_b.new[0] is p and b.new == []
