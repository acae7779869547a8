"""What the attention lowerings share (``fmha_lowering.py``, whole; ``fmha_chunked.py``, over
chunks of keys): the builder of one call's new instructions (``hlo/builder.py``'s, with the
attention pieces), the operands brought to canonical
f32 ``[B, N, seq, H]``, and the masked scores of all keys or of one chunk.
"""
from __future__ import annotations

import copy
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ..hlo import HloComputation, HloInstruction
from ..hlo.builder import HloBuilder, braces  # noqa: F401  (braces: for triangular_solve_lowering)
from ..hlo.calls.fmha import FmhaCall, Roles
from ..hlo.shape import Shape

F32 = "f32"


# ---- inputs and scores -------------------------------------------------------------------------------

def attention_inputs(b: AttentionBuilder, info: FmhaCall) -> tuple[HloInstruction, HloInstruction, HloInstruction]:
    """Q, K, V as f32 ``[B, N, seq, H]`` (K and V broadcast over each head group)."""
    ops = b.operands
    q = b.canonical(ops[info.q], info.q_roles)
    k = b.all_heads(b.canonical(ops[info.k], info.k_roles), info.group)
    v = b.all_heads(b.canonical(ops[info.v], info.v_roles), info.group)
    return q, k, v


def attention_scores(b: AttentionBuilder, info: FmhaCall, q: HloInstruction, k: HloInstruction,
                     keys: KeyRange | None = None) -> tuple[HloInstruction, bool]:
    """``scale * Q.K^T + bias``, -inf where masked: f32 ``[B, N, T, S]`` (``[B, N, T, C]`` for
    the chunk of keys ``keys``); and whether a row can hold -inf scores (a mask or a bias)."""
    dims = tuple(q.shape.dimensions[:3]) + (k.shape.dimensions[2],)
    s = b.batched_dot(q, k, (3,), (3,))
    s = b.binary("multiply", s, b.splat(b.f32(info.scale), dims))
    bias = keys.bias if keys is not None else (b.operands[info.bias] if info.bias is not None else None)
    if bias is not None:
        s = b.binary("add", s, b.bias(bias, dims))
    masked = attention_mask(b, info, dims, keys)
    if masked is not None:
        s = b.select(masked, b.splat(b.f32(float("-inf")), dims), s)
    return s, masked is not None or bias is not None


@dataclass(frozen=True)
class KeyRange:
    """The keys a chunked lowering's loop step reads: from ``start`` (s32 scalar), keys at or
    past ``valid`` are the padding of a last partial chunk; ``bias`` the bias's chunk."""

    start: HloInstruction
    valid: int | None
    bias: HloInstruction | None


def attention_mask(b: AttentionBuilder, info: FmhaCall, dims, keys: KeyRange | None = None) -> HloInstruction | None:
    """pred ``dims`` (``[B, N, T, S]`` or a chunk of keys): the scores cuDNN sets to -inf (and
    a last chunk's padding keys), or None."""
    parts = []
    pads = keys is not None and keys.valid is not None
    if info.causal or info.window > 0 or info.padding or pads:
        row, col = b.iota(dims, 2), b.iota(dims, 3)
        if keys is not None:                       # key positions of the chunk
            col = b.binary("add", col, b.splat(keys.start, dims))
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
        if pads:                                   # past the last key
            parts.append(b.compare(col, b.splat(b.constant("s32", str(keys.valid)), dims), "GE"))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = b.binary("or", out, p)
    return out


def attention_output(b: AttentionBuilder, info: FmhaCall, acc: HloInstruction, m: HloInstruction,
                     total: HloInstruction, can_be_empty: bool) -> list[HloInstruction]:
    """The forward's results from the unnormalised output ``acc = exp(S - m) V``, the row
    maximum ``m`` and sum ``total = rowsum(exp(S - m))``: O = acc / total in the input type (0
    on a row with no key: ``total`` taken as 1 where it is 0), [stats = m + log(total), 0 on
    padded query rows, which cuDNN leaves as XLA zero-filled them]."""
    l_safe = b.where_equal(total, 0.0, 1.0) if can_be_empty else total
    o = b.binary("divide", acc, b.broadcast(l_safe, acc.shape.dimensions, (0, 1, 2)))
    out = [b.convert(o, info.element_type)]
    if info.stats is not None:
        stats = b.binary("add", m, b.unary("log", total))
        if info.padding:
            rows = m.shape.dimensions
            padded = b.compare(b.iota(rows, 2), b.broadcast(b.operands[info.q_seqlen], rows, (0,)), "GE")
            stats = b.select(padded, b.splat(b.f32(0.0), rows), stats)
        out.append(stats)
    return out


# ---- building instructions --------------------------------------------------------------------

def f32_text(x: float) -> str:
    """``x`` rounded to f32, as a literal that reads back to the same f32."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(struct.unpack("<f", struct.pack("<f", x))[0])


class AttentionBuilder(HloBuilder):
    """The ``HloBuilder`` of one call (instructions named ``<call>.<what>``, default layouts),
    with what the attention math reads (``operands``, extendable), scalar constants made once
    per computation, and the attention pieces."""

    def __init__(self, comp: HloComputation, call: HloInstruction):
        super().__init__(comp, call)
        self.call = call
        self.operands: list[HloInstruction] = list(call.operands)   # what the math reads (extendable)
        self._constants: dict[tuple[str, str], HloInstruction] = {}

    def fork(self) -> AttentionBuilder:
        """A builder of the same call for another computation (a loop's body or condition):
        its own instruction list and constants; names and reduction computations shared."""
        other = copy.copy(self)
        other.operands = list(self.operands)
        other.new, other._constants = [], {}
        return other

    def add(self, what: str, opcode: str, shape: Shape, operands, literal: str | None = None,
            **raw_attrs: str) -> HloInstruction:
        """An instruction of a declared ``shape`` (for ``triangular_solve_lowering``, not yet on
        the builder's methods)."""
        return self.instruction(opcode, operands, raw_attrs, shape=shape, literal=literal, name=what)

    def constant(self, et: str, text: str, *, name: str | None = None) -> HloInstruction:
        key = (et, text)
        if key not in self._constants:
            self._constants[key] = super().constant(et, text, name=name)
        return self._constants[key]

    def f32(self, x: float) -> HloInstruction:
        return self.constant(F32, f32_text(x))

    def splat(self, scalar: HloInstruction, shape_or_dims: Shape | Sequence[int]) -> HloInstruction:
        """A scalar broadcast to a shape or dimensions."""
        return self.broadcast(scalar, shape_or_dims)

    def where_equal(self, x: HloInstruction, value: float, replacement: float) -> HloInstruction:
        """``x`` with the elements equal to ``value`` replaced by ``replacement``."""
        dims = x.shape.dimensions
        hit = self.compare(x, self.splat(self.f32(value), dims), "EQ")
        return self.select(hit, self.splat(self.f32(replacement), dims), x)

    def batched_dot(self, lhs: HloInstruction, rhs: HloInstruction, lhs_contracting: Sequence[int],
             rhs_contracting: Sequence[int]) -> HloInstruction:
        """A dot of two canonical rank-4 f32 values batched over (batch, heads)."""
        return self.dot(lhs, rhs, lhs_contracting, rhs_contracting, (0, 1), (0, 1))

    # attention pieces
    def canonical(self, x: HloInstruction, roles: Roles) -> HloInstruction:
        """A rank-4 operand as f32 ``[batch, heads, seq, feature]``."""
        perm = tuple(roles.to_canonical)
        if perm != tuple(range(len(perm))):
            x = self.transpose(x, perm)
        return self.convert(x, F32)

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
        return self.reduce(split, self.f32(0.0), (2,), "add")

    def bias(self, bias: HloInstruction, dims) -> HloInstruction:
        """The bias as f32 ``dims``, broadcast over its size-1 batch or head dimension."""
        kept = [d for d in range(4) if bias.shape.dimensions[d] == dims[d]]
        x = self.convert(bias, F32)
        x = self.reshape(x, [dims[d] for d in kept])
        if len(kept) == 4:
            return x
        return self.broadcast(x, dims, kept)
