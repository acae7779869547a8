"""Which values are bit-reproducible, and which ops may only see bit-reproducible operands.

Interpreter and host compute most ops identically to the bit: IEEE add/subtract/multiply/
divide/sqrt are correctly rounded (f16/bf16 go through f32, where double rounding is
harmless), data movement copies bits, integer ops wrap the same way. Those results are
*exact* and compared bit for bit. Three things make a float result *inexact* (compared with
tolerances): transcendental functions (libm against numpy), accumulations whose order is
the implementation's (float reduce, reduce-window, dot, convolution, combining scatters,
select-and-scatter) and anything computed from an inexact value.

Ops that are discontinuous in a float operand (compare, rounding, float→int conversion,
bit reinterpretation, sort keys, divisors, domain-restricted functions...) turn a last-bit
difference into a different answer: the generator gives them exact operands only
(``needs_exact_operands``), so a difference there is a bug, not noise.
``module_exactness`` recomputes the flags of any module (shrunk or hand-written).
"""
from __future__ import annotations

from ..hlo.ir import HloComputation, HloInstruction, HloModule

TRANSCENDENTAL = frozenset({
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sine", "cosine", "tan",
    "tanh", "erf", "cbrt", "power", "atan2", "asin", "acos", "atan", "asinh", "acosh", "atanh", "sinh", "cosh",
})
ACCUMULATING = frozenset({"reduce", "reduce-window", "dot", "convolution", "scatter", "select-and-scatter"})
# continuous everywhere with bounded amplification: fine on inexact operands
CONTINUOUS = frozenset({
    "add", "subtract", "multiply", "negate", "abs", "maximum", "minimum", "clamp", "copy", "tanh", "logistic",
    "sine", "cosine", "select", "convert", "broadcast", "reshape", "transpose", "slice", "concatenate", "pad",
    "reverse", "dynamic-slice", "dynamic-update-slice", "gather", "tuple", "get-tuple-element", "bitcast",
    "reduce", "reduce-window", "dot", "convolution", "map", "scatter", "while", "conditional", "fusion", "call",
    # collectives move values or fold them with add/multiply/minimum/maximum, ranks in one order
    "all-reduce", "all-reduce-start", "all-reduce-done", "all-gather", "all-gather-start", "all-gather-done",
    "reduce-scatter", "all-to-all", "collective-permute", "collective-permute-start", "collective-permute-done",
    "collective-broadcast",
})


def is_float_et(et: str) -> bool:
    return et in ("f16", "bf16", "f32", "f64")


def needs_exact_operands(opcode: str, result_et: str, operand_ets: list[str]) -> bool:
    """Whether ``opcode`` must only see exact float operands (it is discontinuous in them)."""
    if opcode not in CONTINUOUS:
        return True
    if opcode == "convert":  # float → int/pred truncates
        return not is_float_et(result_et)
    if opcode == "bitcast":
        return any(et != result_et for et in operand_ets)
    return False


def result_exact(opcode: str, result_ets: list[str], operands_exact: list[bool],
                 called_exact: bool = True, overwrite_scatter: bool = False) -> bool:
    """Whether the result of ``opcode`` is bit-reproducible given its operands' flags.
    ``called_exact``: the called computations are exact given exact arguments."""
    if not all(operands_exact) or not called_exact:
        return False
    floats = any(is_float_et(et) for et in result_ets)
    if not floats:
        return True
    if opcode in TRANSCENDENTAL:
        return False
    if opcode == "scatter":
        return overwrite_scatter
    if opcode in ACCUMULATING:
        return False
    return True


def _ets(shape) -> list[str]:
    return [s.element_type for _, s in shape.leaves()] if shape.is_tuple else [shape.element_type]


# A leaf's information: None when it is exact, else the loosest float type whose rounding reached
# it (an inexact bf16 sum converted to f32 still carries bf16's error: it is compared as bf16).
Info = "str | None"
_LOOSENESS = {"f64": 1, "f32": 2, "f16": 3, "bf16": 4}


def loosest(types) -> str:
    """The float type with the largest rounding error among ``types`` (f32 when there is none)."""
    floats = [t for t in types if t in _LOOSENESS]
    return max(floats, key=_LOOSENESS.get) if floats else "f32"


def _merge(*infos) -> "str | None":
    inexact = [i for i in infos if i is not None]
    return loosest(inexact) if inexact else None


def _leaves(info, shape) -> list:
    return [info] * (len(list(shape.leaves())) if shape.is_tuple else 1)


class _Analysis:
    def __init__(self) -> None:
        self.memo: dict[tuple, list] = {}

    def computation(self, comp: HloComputation, param_infos: list[list]) -> list:
        """Infos of ``comp``'s root leaves given one list of leaf infos per parameter."""
        key = (id(comp), tuple(tuple(f) for f in param_infos))
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = _leaves("f32", comp.root.shape)  # recursion guard
        env: dict[int, list] = {}
        for p in comp.parameters:
            env[id(p)] = param_infos[p.parameter_number] if p.parameter_number < len(param_infos) \
                else _leaves(None, p.shape)
        for inst in comp.instructions:
            if inst.opcode != "parameter":
                env[id(inst)] = self.instruction(inst, [env[id(o)] for o in inst.operands])
        out = env[id(comp.root)]
        self.memo[key] = out
        return out

    def instruction(self, inst: HloInstruction, ops: list[list]) -> list:
        op = inst.opcode
        if op in ("constant", "iota", "parameter"):
            return _leaves(None, inst.shape)
        if op == "tuple":
            return [f for o in ops for f in o]
        if op == "get-tuple-element":
            return self._gte(inst, ops[0])
        if op in ("fusion", "call"):
            return self.computation(inst.called_computations()[0], ops)
        if op == "while":
            infos = ops[0]
            body = inst.attr("body")
            for _ in range(8):
                nxt = [_merge(a, b) for a, b in zip(infos, self.computation(body, [infos]))]
                if nxt == infos:
                    break
                infos = nxt
            return infos
        if op == "conditional":
            branches = inst.called_computations()
            outs = [self.computation(b, [ops[i + 1]]) for i, b in enumerate(branches)]
            sel = _merge(*ops[0])
            return [_merge(sel, *(o[k] for o in outs)) for k in range(len(outs[0]))]
        flat = [f for o in ops for f in o]
        called = [i for c in inst.called_computations()
                  for i in self.computation(c, [_leaves(None, p.shape) for p in c.parameters])]
        exact_in = [f is None for f in flat]
        called_exact = all(i is None for i in called)
        if op == "map":  # elementwise over its computation: exact when the computation is
            exact = all(exact_in) and called_exact
        else:
            exact = result_exact(op, _ets(inst.shape), exact_in, called_exact, op == "scatter" and _is_overwrite(inst))
        if exact:
            return _leaves(None, inst.shape)
        types = _ets(inst.shape) + [t for o in inst.operands for t in _ets(o.shape)]
        return _leaves(loosest(types + [i for i in flat + called if i is not None]), inst.shape)

    def _gte(self, inst: HloInstruction, infos: list) -> list:
        shapes = inst.operands[0].shape.tuple_shapes
        start = sum(len(list(s.leaves())) if s.is_tuple else 1 for s in shapes[:inst.tuple_index])
        n = len(list(inst.shape.leaves())) if inst.shape.is_tuple else 1
        return infos[start:start + n]


def _is_overwrite(scatter: HloInstruction) -> bool:
    comp = scatter.to_apply
    root = comp.root
    n = len(comp.parameters) // 2
    return root.opcode == "parameter" and root.parameter_number >= n or (
        root.opcode == "tuple" and all(o.opcode == "parameter" and o.parameter_number >= n for o in root.operands))


def module_infos(module: HloModule) -> list:
    """One entry per leaf of ENTRY's result (depth-first): None when the leaf is bit-reproducible,
    else the loosest float type whose rounding reached it (the tolerance to compare it with)."""
    entry = module.entry
    return _Analysis().computation(entry, [_leaves(None, p.shape) for p in entry.parameters])


def module_exactness(module: HloModule) -> list[bool]:
    """One flag per leaf of ENTRY's result (depth-first): True when bit-reproducible."""
    return [i is None for i in module_infos(module)]
