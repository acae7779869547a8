"""cuDNN's fused attention calls as the plain HLO they compute (see ``library_calls.py``;
the math is notes/xla-gpu-calls.md §3.5, the call's reading ``hlo/fmha_call.py``).

Every operand is first brought to the canonical order ``[batch, heads, seq, feature]``
(a ``transpose`` where its dimension numbers say it is in another order) and to f32; key and
value heads shared by a group of query heads are broadcast to every query head. Then, with
every intermediate in f32 and the scores ``[B, N, T, S]``:

- forward: ``S = dot(Q, K) * scale (+ bias)``, masked scores (``iota``/``compare``/``or`` on
  the query and key positions, the sequence lengths broadcast over the batch) replaced by
  -inf with ``select``; ``m = reduce-max(S)``, ``e = exp(S - m)`` (``m`` taken as 0 on an
  all -inf row), ``l = reduce-sum(e)``, ``O = dot(e, V) / l`` (``l`` taken as 1 where it is 0,
  so such rows give 0), ``stats = m + log(l)`` (0 on padded query rows, which cuDNN leaves
  as XLA zero-filled them);
- backward: ``P = exp(S - stats)`` (0 where S is -inf), ``dP = dot(dO, V)``,
  ``delta = reduce-sum(dO * O)``, ``dS = P * (dP - delta)``; ``dQ = dot(scale dS, K)``,
  ``dK = dot(scale dS^T, Q)``, ``dV = dot(P^T, dO)`` (``reduce`` over a head group for
  shared key/value heads), ``dBias = reduce-sum(dS)`` over the bias's size-1 dimensions.

Results are converted to their element types and copied to their declared layouts (JAX
gives O ``[B,N,T,H]{3,1,2,0}``). The fusion pass that runs next groups these lone ops into
kernels; the dots become dot kernels.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

from ..hlo import HloComputation, HloInstruction
from ..hlo.attributes import Attribute, decode
from ..hlo.fmha_call import FmhaCall, Roles, fmha_call
from ..hlo.library_targets import FMHA_TARGETS
from ..hlo.rewrite import (NameScope, add_computation, insert_instructions, module_of, new_instruction,
                           remove_dead, replace_instructions, replace_uses, take_name)
from ..hlo.shape import Shape

F32 = "f32"


def lower_fmha(comp: HloComputation, call: HloInstruction) -> None:
    """Replace the fused-attention custom call ``call`` of ``comp`` by plain HLO."""
    info = fmha_call(call)
    b = AttentionBuilder(comp, call)
    leaves = attention_backward(b, info) if info.backward else attention_forward(b, info)
    replace_call(b, leaves, info.result_shapes)


def replace_call(b: AttentionBuilder, leaves: list[HloInstruction], result_shapes: Sequence[Shape]) -> None:
    """Replace the call of ``b`` by the values ``leaves`` of its result leaves (all but the
    last, the workspace, which becomes zeros), copied to the declared layouts."""
    comp, call = b.comp, b.call
    leaves = [b.relayout(x, s) for x, s in zip(leaves, result_shapes)]
    ws_shape = result_shapes[-1]
    workspace = b.splat(b.constant(ws_shape.element_type, "0"), ws_shape)
    whole = b.add("tuple", "tuple", call.shape, leaves + [workspace])
    insert_instructions(comp, b.new, before=call)
    # readers of one leaf read the new value; the tuple stands for the call wherever the call
    # is read whole (and is dropped, with the workspace, where it is not)
    reads = [u for u in call.users if u.opcode == "get-tuple-element" and u.operands[0] is call]
    by_leaf = leaves + [workspace]
    replace_uses(comp, {g: by_leaf[g.tuple_index] for g in reads})
    take_name(whole, call, b.names)
    replace_instructions(comp, {call: whole})
    remove_dead(comp, reads + [whole, workspace] + b.new)


LOWERINGS: dict[str, Callable[[HloComputation, HloInstruction], None]] = {t: lower_fmha for t in FMHA_TARGETS}


# ---- the math -------------------------------------------------------------------------------

def _inputs(b: AttentionBuilder, info: FmhaCall) -> tuple[HloInstruction, HloInstruction, HloInstruction]:
    """Q, K, V as f32 ``[B, N, seq, H]`` (K and V broadcast over each head group)."""
    ops = b.operands
    q = b.canonical(ops[info.q], info.q_roles)
    k = b.all_heads(b.canonical(ops[info.k], info.k_roles), info.group)
    v = b.all_heads(b.canonical(ops[info.v], info.v_roles), info.group)
    return q, k, v


def _scores(b: AttentionBuilder, info: FmhaCall, q: HloInstruction, k: HloInstruction) -> tuple[HloInstruction, bool]:
    """``scale * Q.K^T + bias``, -inf where masked: f32 ``[B, N, T, S]``; and whether a row
    can hold -inf scores (a mask or a bias)."""
    dims = info.scores_dims
    s = b.dot(q, k, (3,), (3,))
    s = b.binary("multiply", s, b.splat(b.f32(info.scale), dims))
    if info.bias is not None:
        s = b.binary("add", s, b.bias(b.operands[info.bias], dims))
    masked = _mask(b, info)
    if masked is not None:
        s = b.select(masked, b.splat(b.f32(float("-inf")), dims), s)
    return s, masked is not None or info.bias is not None


def _mask(b: AttentionBuilder, info: FmhaCall) -> HloInstruction | None:
    """pred ``[B, N, T, S]``: the scores cuDNN sets to -inf, or None."""
    dims = info.scores_dims
    parts = []
    if info.causal or info.window > 0 or info.padding:
        row, col = b.iota(dims, 2), b.iota(dims, 3)
        if info.causal:                            # key after query (top-left aligned)
            parts.append(b.compare(col, row, "GT"))
        if info.window > 0:                        # key at or before i - window
            start = b.binary("subtract", row, b.splat(b.constant("s32", str(info.window)), dims))
            parts.append(b.compare(col, start, "LE"))
        if info.padding:                           # key beyond kv_seqlen[b]; query row beyond q_seqlen[b]
            kv_len = b.broadcast(b.operands[info.kv_seqlen], dims, (0,))
            q_len = b.broadcast(b.operands[info.q_seqlen], dims, (0,))
            parts.append(b.compare(col, kv_len, "GE"))
            parts.append(b.compare(row, q_len, "GE"))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = b.binary("or", out, p)
    return out


def attention_forward(b: AttentionBuilder, info: FmhaCall) -> list[HloInstruction]:
    """The forward's result values: O ``[B, N, T, H]`` in the input type, [stats f32 ``[B, N, T]``]."""
    q, k, v = _inputs(b, info)
    s, can_be_empty = _scores(b, info, q, k)
    dims = info.scores_dims
    m = b.reduce(s, "maximum", b.f32(float("-inf")), 3)
    m_safe = b.where_equal(m, float("-inf"), 0.0) if can_be_empty else m
    e = b.unary("exponential", b.binary("subtract", s, b.broadcast(m_safe, dims, (0, 1, 2))))
    l = b.reduce(e, "add", b.f32(0.0), 3)
    l_safe = b.where_equal(l, 0.0, 1.0) if can_be_empty else l
    o = b.dot(e, v, (3,), (2,))
    o = b.binary("divide", o, b.broadcast(l_safe, o.shape.dimensions, (0, 1, 2)))
    out = [b.convert(o, info.element_type)]
    if info.stats is not None:
        stats = b.binary("add", m, b.unary("log", l))
        if info.padding:
            rows = m.shape.dimensions
            padded = b.compare(b.iota(rows, 2), b.broadcast(b.operands[info.q_seqlen], rows, (0,)), "GE")
            stats = b.select(padded, b.splat(b.f32(0.0), rows), stats)
        out.append(stats)
    return out


def attention_backward(b: AttentionBuilder, info: FmhaCall) -> list[HloInstruction]:
    """The backward's result values: dQ, dK, dV (canonical order, the input type), [dBias]."""
    ops = b.operands
    q, k, v = _inputs(b, info)
    d_o = b.canonical(ops[info.d_o], info.do_roles)
    o = b.canonical(ops[info.o_in], info.do_roles)
    s, can_be_empty = _scores(b, info, q, k)
    dims = info.scores_dims
    stats = b.broadcast(b.convert(ops[info.stats_in], F32), dims, (0, 1, 2))
    p = b.unary("exponential", b.binary("subtract", s, stats))
    if can_be_empty:
        p = b.select(b.compare(s, b.splat(b.f32(float("-inf")), dims), "EQ"), b.splat(b.f32(0.0), dims), p)
    dp = b.dot(d_o, v, (3,), (3,))
    delta = b.reduce(b.binary("multiply", d_o, o), "add", b.f32(0.0), 3)
    ds = b.binary("multiply", p, b.binary("subtract", dp, b.broadcast(delta, dims, (0, 1, 2))))
    ds_scaled = b.binary("multiply", ds, b.splat(b.f32(info.scale), dims))
    dq = b.dot(ds_scaled, k, (3,), (2,))
    dk = b.group_sum(b.dot(ds_scaled, q, (2,), (2,)), info.group)
    dv = b.group_sum(b.dot(p, d_o, (2,), (2,)), info.group)
    et = info.element_type
    out = [b.convert(dq, et), b.convert(dk, et), b.convert(dv, et)]
    if info.dbias is not None:
        shape = info.result_shapes[info.dbias]
        summed = [d for d in range(4) if info.bias_dims[d] == 1 and dims[d] != 1]
        db = b.reduce(ds, "add", b.f32(0.0), *summed) if summed else ds
        db = b.reshape(db, shape.dimensions)
        out.append(b.convert(db, shape.element_type))
    return out


# ---- building instructions --------------------------------------------------------------------

def _f32_text(x: float) -> str:
    """``x`` rounded to f32, as a literal that reads back to the same f32."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(struct.unpack("<f", struct.pack("<f", x))[0])


def _braces(values: Sequence[int]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


class AttentionBuilder:
    """New instructions for one call, in order, named ``<call>.<what>``; the reductions'
    computations are added to the module before ``comp``."""

    def __init__(self, comp: HloComputation, call: HloInstruction):
        self.comp, self.call = comp, call
        self.operands: list[HloInstruction] = list(call.operands)   # what the math reads (extendable)
        self.module = module_of(comp)
        self.names = NameScope.of_instructions(self.module.computations)
        self.new: list[HloInstruction] = []
        self._reducers: dict[str, HloComputation] = {}
        self._constants: dict[tuple[str, str], HloInstruction] = {}

    def add(self, what: str, opcode: str, shape: Shape, operands, literal: str | None = None,
            **raw_attrs: str) -> HloInstruction:
        attrs = {k: Attribute(k, raw, decode(k, raw)) for k, raw in raw_attrs.items()}
        inst = new_instruction(self.names.fresh(f"{self.call.name}.{what}"), opcode, shape, operands, attrs,
                               like=self.call, literal_text=literal)
        self.new.append(inst)
        return inst

    # constants and shapes
    def constant(self, et: str, text: str) -> HloInstruction:
        key = (et, text)
        if key not in self._constants:
            self._constants[key] = self.add("constant", "constant", Shape.array(et, ()), [], literal=text)
        return self._constants[key]

    def f32(self, x: float) -> HloInstruction:
        return self.constant(F32, _f32_text(x))

    def splat(self, scalar: HloInstruction, shape_or_dims) -> HloInstruction:
        shape = shape_or_dims if isinstance(shape_or_dims, Shape) else \
            Shape.array(scalar.shape.element_type, shape_or_dims)
        return self.add("broadcast", "broadcast", shape, [scalar], dimensions="{}")

    def broadcast(self, x: HloInstruction, dims, kept: Sequence[int]) -> HloInstruction:
        """``x`` broadcast to ``dims``, its dimension ``i`` becoming dimension ``kept[i]``."""
        return self.add("broadcast", "broadcast", Shape.array(x.shape.element_type, dims), [x],
                        dimensions=_braces(kept))

    def reshape(self, x: HloInstruction, dims) -> HloInstruction:
        if tuple(x.shape.dimensions) == tuple(dims):
            return x
        return self.add("reshape", "reshape", Shape.array(x.shape.element_type, dims), [x])

    def transpose(self, x: HloInstruction, perm: Sequence[int]) -> HloInstruction:
        if tuple(perm) == tuple(range(len(perm))):
            return x
        dims = [x.shape.dimensions[p] for p in perm]
        return self.add("transpose", "transpose", Shape.array(x.shape.element_type, dims), [x],
                        dimensions=_braces(perm))

    def iota(self, dims, axis: int) -> HloInstruction:
        return self.add("iota", "iota", Shape.array("s32", dims), [], iota_dimension=str(axis))

    def relayout(self, x: HloInstruction, shape: Shape) -> HloInstruction:
        """``x`` (of ``shape``'s dimensions and type) in ``shape``'s layout."""
        if x.shape == shape:
            return x
        return self.add("copy", "copy", shape, [x])

    # arithmetic
    def convert(self, x: HloInstruction, et: str) -> HloInstruction:
        if x.shape.element_type == et:
            return x
        return self.add("convert", "convert", Shape.array(et, x.shape.dimensions), [x])

    def unary(self, opcode: str, x: HloInstruction) -> HloInstruction:
        return self.add(opcode, opcode, Shape.array(x.shape.element_type, x.shape.dimensions), [x])

    def binary(self, opcode: str, x: HloInstruction, y: HloInstruction) -> HloInstruction:
        return self.add(opcode, opcode, Shape.array(x.shape.element_type, x.shape.dimensions), [x, y])

    def compare(self, x: HloInstruction, y: HloInstruction, direction: str) -> HloInstruction:
        return self.add("compare", "compare", Shape.array("pred", x.shape.dimensions), [x, y], direction=direction)

    def select(self, p: HloInstruction, x: HloInstruction, y: HloInstruction) -> HloInstruction:
        return self.add("select", "select", Shape.array(x.shape.element_type, x.shape.dimensions), [p, x, y])

    def where_equal(self, x: HloInstruction, value: float, replacement: float) -> HloInstruction:
        """``x`` with the elements equal to ``value`` replaced by ``replacement``."""
        dims = x.shape.dimensions
        hit = self.compare(x, self.splat(self.f32(value), dims), "EQ")
        return self.select(hit, self.splat(self.f32(replacement), dims), x)

    def dot(self, lhs: HloInstruction, rhs: HloInstruction, lhs_contracting: Sequence[int],
            rhs_contracting: Sequence[int]) -> HloInstruction:
        """A dot of two canonical rank-4 f32 values batched over (batch, heads)."""
        def free(x: HloInstruction, contracting: Sequence[int]) -> list[int]:
            return [d for i, d in enumerate(x.shape.dimensions) if i not in (0, 1, *contracting)]
        dims = list(lhs.shape.dimensions[:2]) + free(lhs, lhs_contracting) + free(rhs, rhs_contracting)
        return self.add("dot", "dot", Shape.array(F32, dims), [lhs, rhs], lhs_batch_dims="{0,1}",
                        rhs_batch_dims="{0,1}", lhs_contracting_dims=_braces(lhs_contracting),
                        rhs_contracting_dims=_braces(rhs_contracting))

    def reduce(self, x: HloInstruction, kind: str, init: HloInstruction, *axes: int) -> HloInstruction:
        dims = [d for i, d in enumerate(x.shape.dimensions) if i not in axes]
        comp = self.reducer(kind)
        inst = self.add("reduce", "reduce", Shape.array(F32, dims), [x, init], dimensions=_braces(axes))
        inst.attributes["to_apply"] = Attribute("to_apply", f"%{comp.name}", comp)
        return inst

    def reducer(self, kind: str) -> HloComputation:
        """The f32 ``add`` or ``maximum`` reduction computation (made once per call)."""
        if kind not in self._reducers:
            scalar = Shape.array(F32, ())
            x = new_instruction(self.names.fresh(f"{self.call.name}.{kind}.lhs"), "parameter", scalar,
                                parameter_number=0)
            y = new_instruction(self.names.fresh(f"{self.call.name}.{kind}.rhs"), "parameter", scalar,
                                parameter_number=1)
            r = new_instruction(self.names.fresh(f"{self.call.name}.{kind}"), kind, scalar, [x, y])
            comp_names = NameScope.of_computations(self.module)
            comp = HloComputation(comp_names.fresh(f"{self.call.name}.{kind}_computation"), [x, y, r], r)
            add_computation(self.module, comp, before=self.comp)
            self._reducers[kind] = comp
        return self._reducers[kind]

    # attention pieces
    def canonical(self, x: HloInstruction, roles: Roles) -> HloInstruction:
        """A rank-4 operand as f32 ``[batch, heads, seq, feature]``."""
        return self.convert(self.transpose(x, roles.to_canonical), F32)

    def all_heads(self, x: HloInstruction, group: int) -> HloInstruction:
        """``[B, Nk, S, H]`` -> ``[B, Nk * group, S, H]``: query head ``h`` reads head ``h // group``."""
        if group == 1:
            return x
        B, Nk, S, H = x.shape.dimensions
        wide = self.broadcast(x, (B, Nk, group, S, H), (0, 1, 3, 4))
        return self.reshape(wide, (B, Nk * group, S, H))

    def group_sum(self, x: HloInstruction, group: int) -> HloInstruction:
        """``[B, N, S, H]`` -> ``[B, N / group, S, H]``: the sum over each head group."""
        if group == 1:
            return x
        B, N, S, H = x.shape.dimensions
        split = self.reshape(x, (B, N // group, group, S, H))
        return self.reduce(split, "add", self.f32(0.0), 2)

    def bias(self, bias: HloInstruction, dims) -> HloInstruction:
        """The bias as f32 ``dims``, broadcast over its size-1 batch or head dimension."""
        kept = [d for d in range(4) if bias.shape.dimensions[d] == dims[d]]
        x = self.convert(bias, F32)
        x = self.reshape(x, [dims[d] for d in kept])
        if len(kept) == 4:
            return x
        return self.broadcast(x, dims, kept)
