"""Generators of elementwise ops: unary, binary, compare, select, clamp, convert,
bitcast-convert, and the scalar expressions of map bodies."""
from __future__ import annotations

from .builder import Value
from .exactness import needs_exact_operands, result_exact
from .gen_core import Gen, GenRefused
from .registry import op_generator
from .shapes import BITS, FLOATS, FShape, is_float, is_int, same_width_types, scalar

UNARY = {
    "float": ["abs", "negate", "sign", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "sqrt", "rsqrt",
              "cbrt", "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sine", "cosine",
              "tan", "tanh", "erf", "is-finite", "reduce-precision", "copy"],
    "int": ["abs", "negate", "sign", "not", "popcnt", "count-leading-zeros", "copy"],
    "pred": ["not", "copy"],
}
UNARY_NOT_XLA = ["asin", "acos", "asinh", "acosh", "atanh", "sinh", "cosh"]
BINARY = {
    "float": ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "atan2"],
    "int": ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
            "shift-left", "shift-right-logical", "shift-right-arithmetic", "power"],
    "pred": ["and", "or", "xor", "maximum", "minimum"],
}
BINARY_NOT_XLA = {"int": ["mulhi"]}
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


def fam(et: str) -> str:
    return "pred" if et == "pred" else "float" if is_float(et) else "int"


def _out_shape(g: Gen, x: FShape, et: str | None = None) -> FShape:
    """The result shape of an elementwise op on ``x``: x's layout, or sometimes a new one."""
    et = et or x.et
    if g.chance(0.3):
        return g.relayout(FShape(et, x.dims))
    return FShape(et, x.dims, x.m2m, x.tiles if et == x.et else "")


def _op_exact(op: str, et: str, operands: list[Value], result_et: str) -> bool:
    return result_exact(op, [result_et], [o.exact for o in operands])


@op_generator("unary", weight=8)
def gen_unary(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.et in FLOATS or is_int(v.shape.et) or v.shape.et == "pred")
    f = fam(x.shape.et)
    ops = list(UNARY[f]) + (UNARY_NOT_XLA if f == "float" and not g.cfg.xla_compatible else [])
    if f == "int" and x.shape.et.startswith("u"):
        ops = [o for o in ops if o != "negate"] + ["negate"]
    op = g.choice(ops)
    if not x.exact and needs_exact_operands(op, x.shape.et, [x.shape.et]):
        op = g.choice(["abs", "negate", "copy", "tanh", "logistic", "sine", "cosine"] if f == "float" else ["copy"])
    et = "pred" if op == "is-finite" else x.shape.et
    attrs = []
    if op == "reduce-precision":
        attrs = [f"exponent_bits={g.randint(1, 8)}", f"mantissa_bits={g.randint(0, 23)}"]
    shape = _out_shape(g, x.shape, et)
    return g.emit(op, shape, [x], attrs, exact=_op_exact(op, et, [x], et))


def second_operand(g: Gen, x: Value, exact: bool) -> Value:
    """The other operand of a binary op on ``x``: same dims and type, sometimes a scalar (our
    verifier accepts scalar operands; XLA does not)."""
    if not g.cfg.xla_compatible and x.shape.rank and g.chance(0.08):
        g.stats.features.add("scalar-operand")
        return g.pick(lambda v: v.shape.rank == 0 and v.shape.et == x.shape.et, exact) or \
            g.scalar_constant(x.shape.et)
    if g.cfg.allows("degenerate-broadcast") and not g.cfg.xla_compatible and x.shape.rank and g.chance(0.1):
        # a size-1 dim stretches over the other operand's (a zero-size one stays: 1 against 0 is 0)
        dims = tuple(1 if d and g.chance(0.5) else d for d in x.shape.dims)
        g.stats.features.add("degenerate-broadcast")
        return g.like(dims, x.shape.et, exact)
    return g.like(x.shape.dims, x.shape.et, exact)


@op_generator("binary", weight=10)
def gen_binary(g: Gen) -> Value:
    x = g.pick_or_refuse()
    f = fam(x.shape.et)
    ops = BINARY[f] + (BINARY_NOT_XLA.get(f, []) if not g.cfg.xla_compatible else [])
    op = g.choice(ops)
    if needs_exact_operands(op, x.shape.et, [x.shape.et]) and not x.exact:
        op = g.choice(["add", "subtract", "multiply", "maximum", "minimum"])
    exact_needed = needs_exact_operands(op, x.shape.et, [x.shape.et])
    y = second_operand(g, x, exact_needed)
    if g.chance(0.5):
        x, y = y, x
    dims = max(x.shape.dims, y.shape.dims, key=len) if x.shape.rank != y.shape.rank else \
        tuple(max(a, b) if min(a, b) == 1 else a for a, b in zip(x.shape.dims, y.shape.dims))
    base = x.shape if x.shape.dims == dims else y.shape
    shape = _out_shape(g, FShape(base.et, dims, base.m2m if base.dims == dims else None))
    return g.emit(op, shape, [x, y], exact=_op_exact(op, shape.et, [x, y], shape.et))


@op_generator("compare", weight=4)
def gen_compare(g: Gen) -> Value:
    x = g.pick_or_refuse(exact=True)
    y = second_operand(g, x, True)
    attrs = [f"direction={g.choice(DIRECTIONS)}"]
    if is_float(x.shape.et) and g.chance(0.3):
        attrs.append("type=TOTALORDER")
    elif is_int(x.shape.et) and g.chance(0.1):
        attrs.append(f"type={'SIGNED' if x.shape.et.startswith('s') else 'UNSIGNED'}")
    dims = x.shape.dims if x.shape.rank >= y.shape.rank else y.shape.dims
    return g.emit("compare", _out_shape(g, FShape("pred", dims)), [x, y], attrs)


def predicate_for(g: Gen, dims) -> Value:
    p = g.pick(lambda v: v.shape.et == "pred" and v.shape.dims == tuple(dims), exact=True)
    if p is None or g.chance(0.3):
        if g.chance(0.2):
            return g.pick(lambda v: v.shape.et == "pred" and v.shape.rank == 0, exact=True) or \
                g.scalar_constant("pred")
        p = g.fresh(g.shape("pred", dims))
    return p


@op_generator("select", weight=3)
def gen_select(g: Gen) -> Value:
    x = g.pick_or_refuse()
    y = g.like(x.shape.dims, x.shape.et)
    p = predicate_for(g, x.shape.dims)
    if p.shape.rank == 0 and x.shape.rank:
        g.stats.features.add("scalar-predicate")
    return g.emit("select", _out_shape(g, x.shape), [p, x, y])


@op_generator("clamp", weight=2)
def gen_clamp(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.et != "pred")
    bounds = []
    for _ in range(2):
        if g.chance(0.6):
            bounds.append(g.pick(lambda v: v.shape.rank == 0 and v.shape.et == x.shape.et) or
                          g.scalar_constant(x.shape.et))
        else:
            bounds.append(g.like(x.shape.dims, x.shape.et))
    return g.emit("clamp", _out_shape(g, x.shape), [bounds[0], x, bounds[1]])


@op_generator("convert", weight=4)
def gen_convert(g: Gen) -> Value:
    x = g.pick_or_refuse()
    et = g.et(exclude=[x.shape.et])
    if not x.exact and is_float(x.shape.et) and not is_float(et):
        et = g.choice([t for t in FLOATS if t != x.shape.et])
    return g.emit("convert", _out_shape(g, x.shape, et), [x], exact=x.exact)


@op_generator("bitcast-convert", weight=2)
def gen_bitcast_convert(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.et != "pred" and same_width_types(v.shape.et) != [], exact=True)
    if g.cfg.allows("bitcast-convert-width") and g.chance(0.3):
        return _bitcast_convert_width(g, x)
    et = g.choice(same_width_types(x.shape.et))
    return g.emit("bitcast-convert", _out_shape(g, x.shape, et), [x])


def _bitcast_convert_width(g: Gen, x: Value) -> Value:
    bits = BITS[x.shape.et]
    wider = [t for t in ("s16", "u16", "f16", "s32", "u32", "f32", "s64", "u64", "f64") if BITS[t] > bits]
    narrower = [t for t in ("s8", "u8", "s16", "u16", "f16", "bf16", "s32", "u32", "f32") if BITS[t] < bits]
    g.stats.features.add("bitcast-convert-width")
    if narrower and (g.chance(0.5) or not wider):
        et = g.choice(narrower)
        dims = x.shape.dims + (bits // BITS[et],)
        return g.emit("bitcast-convert", FShape(et, dims), [x])
    for et in g.rng.sample(wider, len(wider)):
        ratio = BITS[et] // bits
        if x.shape.rank and x.shape.dims[-1] == ratio:
            return g.emit("bitcast-convert", FShape(et, x.shape.dims[:-1]), [x])
    raise GenRefused("no wider type fits")


# ---- scalar expressions (map bodies) ---------------------------------------------------------

def scalar_expression(g: Gen, params: list[Value], result_et: str) -> Value:
    """A few elementwise ops over scalar ``params`` ending in a value of ``result_et``."""
    et = params[0].shape.et
    f = fam(et)
    vals = list(params)
    safe = ["add", "subtract", "multiply", "maximum", "minimum"] if f != "pred" else BINARY["pred"]
    for _ in range(g.randint(1, 4)):
        if len(vals) >= 2 and g.chance(0.6):
            a, b = g.choice(vals), g.choice(vals)
            op = g.choice(BINARY[f])
            if not (a.exact and b.exact) and needs_exact_operands(op, et, [et]):
                op = g.choice(safe)
            vals.append(g.emit(op, scalar(et), [a, b], exact=_op_exact(op, et, [a, b], et)))
        else:
            a = g.choice(vals)
            op = g.choice([o for o in UNARY[f] if o not in ("is-finite", "reduce-precision")])
            if not a.exact and needs_exact_operands(op, et, [et]):
                op = "negate" if f != "pred" else "not"
            vals.append(g.emit(op, scalar(et), [a], exact=_op_exact(op, et, [a], et)))
    out = vals[-1]
    if result_et != et:
        if not out.exact and (result_et == "pred" or not is_float(result_et)):
            raise GenRefused("an inexact map body cannot end in a discontinuous op")
        if result_et == "pred":
            other = g.scalar_constant(et)
            out = g.emit("compare", scalar("pred"), [out, other], [f"direction={g.choice(DIRECTIONS)}"])
        else:
            out = g.emit("convert", scalar(result_et), [out])
    return out
