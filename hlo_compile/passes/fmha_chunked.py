"""Attention lowered as a ``while`` loop over chunks of keys, so that no f32 score tensor
``[B, N, T, S]`` is made whole (``fmha_lowering.py`` lowers small problems whole).

A problem whose scores would take more than ``SCORES_LIMIT`` bytes takes ``C`` keys a step
(``key_chunk``: the largest power of two whose ``[B, N, T, C]`` scores fit). K, V (and the bias)
are padded with zeros to ``n * C`` keys, ``n = ceil(S / C)``; step ``i`` reads keys
``[i * C, (i + 1) * C)`` with ``dynamic-slice``, and masks them with the call's masks at their
positions (``iota + i * C``) and, in a partial last chunk, past key ``S``.

- forward (online softmax, everything f32): the carry holds the running row maximum ``m``
  (-inf at first), sum ``l`` and output accumulator ``acc``; a step takes
  ``m' = max(m, rowmax(S_c))`` (taken as 0 where it is still -inf, as the whole lowering does),
  ``a = exp(m - m')``, ``l' = a l + rowsum(exp(S_c - m'))``, ``acc' = a acc + exp(S_c - m') V_c``.
  After the loop ``O = acc / l`` and ``stats = m + log l``, with the whole lowering's
  conventions (``attention_output``): rows with no key give O = 0 and stats = -inf, padded
  query rows stats = 0.
- backward: ``delta = rowsum(dO * O)`` once; a step recomputes ``P_c = exp(S_c - stats)``,
  ``dS_c = P_c (dO V_c^T - delta)``, adds ``scale dS_c K_c`` to dQ (f32) and writes the
  chunk's ``dK = scale dS_c^T Q``, ``dV = P_c^T dO`` (summed over each head group) and dBias
  into their results with ``dynamic-update-slice``: every key's gradient is complete within its
  chunk, so each is converted to its result type there and written once.

Plain HLO the passes and emitters already run: ``while`` with a tuple carry (loop-invariant
operands carried through), dynamic-slice, dynamic-update-slice, dot, reduce, pad, slice.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from ..hlo import HloComputation, HloInstruction
from ..hlo.calls.fmha import FmhaCall
from ..hlo.rewrite import NameScope, add_computation, remove_dead
from ..hlo.shape import Shape
from .attention_math import F32, AttentionBuilder, KeyRange, attention_output, attention_scores

# Bytes of one f32 score tensor [B, N, T, S] above which attention is lowered over chunks of keys:
# Llama 3.1 8B's (B=2, N=32, S=T=8192) is 16 GiB whole, 256 MiB in chunks of 128 keys.
SCORES_LIMIT = 256 * 2 ** 20

Step = Callable[[AttentionBuilder, HloInstruction, dict[str, HloInstruction]], dict[str, HloInstruction]]


def key_chunk(info: FmhaCall, limit: int = SCORES_LIMIT) -> int | None:
    """Keys per loop step for ``info`` (None: its scores fit ``limit`` whole): the largest power
    of two whose f32 ``[B, N, T, C]`` scores fit, at least 1."""
    per_key = 4 * info.batch * info.heads * info.q_len
    if per_key * info.kv_len <= limit:
        return None
    c = max(1, limit // max(per_key, 1))
    return 1 << (c.bit_length() - 1)


# ---- forward and backward ----------------------------------------------------------------------

def chunked_forward(b: AttentionBuilder, info: FmhaCall, chunk: int) -> list[HloInstruction]:
    """The forward's result values (as ``attention_forward``) from a loop over ``chunk`` keys."""
    ops = b.operands
    B, N, T, Hv = info.batch, info.heads, info.q_len, info.v_dim
    keys = _Keys(info, chunk)
    carried = keys.carried(b)
    carried["q"] = b.canonical(ops[info.q], info.q_roles)
    rows = (B, N, T)
    carried["m"] = b.splat(b.f32(float("-inf")), rows)
    carried["l"] = b.splat(b.f32(0.0), rows)
    carried["acc"] = b.splat(b.f32(0.0), (B, N, T, Hv))

    def step(bb: AttentionBuilder, i: HloInstruction, x: dict[str, HloInstruction]) -> dict[str, HloInstruction]:
        k_c, v_c, key_range = keys.read(bb, i, x)
        s, can_be_empty = attention_scores(bb, info, x["q"], k_c, key_range)
        dims = s.shape.dimensions
        m = bb.binary("maximum", x["m"], bb.reduce(s, bb.f32(float("-inf")), (3,), "maximum"))
        m_safe = bb.where_equal(m, float("-inf"), 0.0) if can_be_empty else m
        e = bb.unary("exponential", bb.binary("subtract", s, bb.broadcast(m_safe, dims, (0, 1, 2))))
        alpha = bb.unary("exponential", bb.binary("subtract", x["m"], m_safe))    # 0 while m was -inf
        total = bb.binary("add", bb.binary("multiply", x["l"], alpha), bb.reduce(e, bb.f32(0.0), (3,), "add"))
        acc = bb.binary("multiply", x["acc"], bb.broadcast(alpha, x["acc"].shape.dimensions, (0, 1, 2)))
        acc = bb.binary("add", acc, bb.batched_dot(e, v_c, (3,), (2,)))
        return {"m": m, "l": total, "acc": acc}

    out = while_loop(b, "key_loop", carried, keys.trips, step)
    return attention_output(b, info, out["acc"], out["m"], out["l"], can_be_empty=True)


def chunked_backward(b: AttentionBuilder, info: FmhaCall, chunk: int) -> list[HloInstruction]:
    """The backward's result values (as ``attention_backward``) from a loop over ``chunk`` keys."""
    ops = b.operands
    B, N, T, H, Nk = info.batch, info.heads, info.q_len, info.qk_dim, info.kv_heads
    et = info.element_type
    keys = _Keys(info, chunk)
    carried = keys.carried(b)
    carried["q"] = b.canonical(ops[info.q], info.q_roles)
    d_o = b.canonical(ops[info.d_o], info.do_roles)
    o = b.canonical(ops[info.o_in], info.do_roles)
    carried["d_o"] = d_o
    carried["delta"] = b.reduce(b.binary("multiply", d_o, o), b.f32(0.0), (3,), "add")
    carried["stats"] = b.convert(ops[info.stats_in], F32)
    carried["dq"] = b.splat(b.f32(0.0), (B, N, T, H))
    zero = b.constant(et, "0")
    carried["dk"] = b.splat(zero, (B, Nk, keys.padded, H))
    carried["dv"] = b.splat(zero, (B, Nk, keys.padded, info.v_dim))
    if info.dbias is not None:
        db_shape = info.result_shapes[info.dbias]
        db_dims = tuple(db_shape.dimensions[:3]) + (keys.padded,)
        carried["dbias"] = b.splat(b.constant(db_shape.element_type, "0"), db_dims)

    def step(bb: AttentionBuilder, i: HloInstruction, x: dict[str, HloInstruction]) -> dict[str, HloInstruction]:
        k_c, v_c, key_range = keys.read(bb, i, x)
        s, can_be_empty = attention_scores(bb, info, x["q"], k_c, key_range)
        dims = s.shape.dimensions
        p = bb.unary("exponential", bb.binary("subtract", s, bb.broadcast(x["stats"], dims, (0, 1, 2))))
        if can_be_empty:
            p = bb.select(bb.compare(s, bb.splat(bb.f32(float("-inf")), dims), "EQ"), bb.splat(bb.f32(0.0), dims), p)
        dp = bb.batched_dot(x["d_o"], v_c, (3,), (3,))
        ds = bb.binary("multiply", p, bb.binary("subtract", dp, bb.broadcast(x["delta"], dims, (0, 1, 2))))
        ds_scaled = bb.binary("multiply", ds, bb.splat(bb.f32(info.scale), dims))
        dq = bb.binary("add", x["dq"], bb.batched_dot(ds_scaled, k_c, (3,), (2,)))
        dk_c = bb.convert(bb.group_sum(bb.batched_dot(ds_scaled, x["q"], (2,), (2,)), info.group), et)
        dv_c = bb.convert(bb.group_sum(bb.batched_dot(p, x["d_o"], (2,), (2,)), info.group), et)
        out = {"dq": dq, "dk": _update(bb, x["dk"], dk_c, key_range.start, 2),
               "dv": _update(bb, x["dv"], dv_c, key_range.start, 2)}
        if info.dbias is not None:
            summed = [d for d in range(4) if info.bias_dims[d] == 1 and dims[d] != 1]
            db = bb.reduce(ds, bb.f32(0.0), summed, "add") if summed else ds
            db = bb.convert(bb.reshape(db, tuple(x["dbias"].shape.dimensions[:3]) + (chunk,)),
                            x["dbias"].shape.element_type)
            out["dbias"] = _update(bb, x["dbias"], db, key_range.start, 3)
        return out

    out = while_loop(b, "key_loop", carried, keys.trips, step)
    grads = [b.convert(out["dq"], et), keys.unpad(b, out["dk"], 2), keys.unpad(b, out["dv"], 2)]
    if info.dbias is not None:
        grads.append(keys.unpad(b, out["dbias"], 3))
    return grads


class _Keys:
    """The keys of ``info`` in ``chunk``-key steps: K, V (and bias) padded to a whole number of
    chunks before the loop, one chunk read per step."""

    def __init__(self, info: FmhaCall, chunk: int):
        self.info, self.chunk = info, chunk
        self.trips = math.ceil(info.kv_len / chunk)
        self.padded = self.trips * chunk

    def carried(self, b: AttentionBuilder) -> dict[str, HloInstruction]:
        """The loop-invariant key-side operands: K and V canonical f32 ``[B, Nk, n C, H]``, the
        bias ``[B|1, N|1, T, n C]`` in its own type, the sequence lengths."""
        info, ops = self.info, b.operands
        out = {"k": self.pad(b, b.canonical(ops[info.k], info.k_roles), 2),
               "v": self.pad(b, b.canonical(ops[info.v], info.v_roles), 2)}
        if info.bias is not None:
            out["bias"] = self.pad(b, ops[info.bias], 3)
        if info.padding:
            out["q_len"], out["kv_len"] = ops[info.q_seqlen], ops[info.kv_seqlen]
        return out

    def read(self, bb: AttentionBuilder, i: HloInstruction,
             x: dict[str, HloInstruction]) -> tuple[HloInstruction, HloInstruction, KeyRange]:
        """Step ``i``'s K and V chunks (over every query head) and its key range; points the
        builder's sequence-length operands at the carried ones."""
        info = self.info
        start = bb.binary("multiply", i, bb.constant("s32", str(self.chunk)))
        k_c = bb.all_heads(_chunk(bb, x["k"], start, self.chunk, 2), info.group)
        v_c = bb.all_heads(_chunk(bb, x["v"], start, self.chunk, 2), info.group)
        bias = _chunk(bb, x["bias"], start, self.chunk, 3) if info.bias is not None else None
        if info.padding:
            bb.operands[info.q_seqlen], bb.operands[info.kv_seqlen] = x["q_len"], x["kv_len"]
        valid = info.kv_len if self.padded != info.kv_len else None
        return k_c, v_c, KeyRange(start, valid, bias)

    def pad(self, b: AttentionBuilder, x: HloInstruction, axis: int) -> HloInstruction:
        """``x`` with zeros appended along ``axis`` up to a whole number of chunks."""
        dims = list(x.shape.dimensions)
        if dims[axis] == self.padded:
            return x
        extra = self.padded - dims[axis]
        config = [(0, extra) if d == axis else (0, 0) for d in range(len(dims))]
        return b.pad(x, b.constant(x.shape.element_type, "0"), config)

    def unpad(self, b: AttentionBuilder, x: HloInstruction, axis: int) -> HloInstruction:
        """``x`` without the padding keys along ``axis``."""
        dims = list(x.shape.dimensions)
        if dims[axis] == self.info.kv_len:
            return x
        dims[axis] = self.info.kv_len
        return b.slice(x, [0] * len(dims), dims)


def _starts(b: AttentionBuilder, rank: int, start: HloInstruction, axis: int) -> list[HloInstruction]:
    zero = b.constant("s32", "0")
    return [start if d == axis else zero for d in range(rank)]


def _chunk(b: AttentionBuilder, x: HloInstruction, start: HloInstruction, size: int, axis: int) -> HloInstruction:
    """``size`` elements of ``x`` along ``axis`` from ``start``."""
    dims = list(x.shape.dimensions)
    dims[axis] = size
    return b.dynamic_slice(x, _starts(b, len(dims), start, axis), dims)


def _update(b: AttentionBuilder, x: HloInstruction, part: HloInstruction, start: HloInstruction,
            axis: int) -> HloInstruction:
    """``x`` with ``part`` written along ``axis`` from ``start``."""
    return b.dynamic_update_slice(x, part, _starts(b, x.shape.rank, start, axis))


# ---- the loop ----------------------------------------------------------------------------------

def while_loop(b: AttentionBuilder, what: str, carried: dict[str, HloInstruction], trips: int,
               step: Step) -> dict[str, HloInstruction]:
    """A ``while`` over ``i`` in ``[0, trips)`` carrying ``(i, *carried)``; ``step(builder, i,
    values)`` builds the body (in a forked builder) and returns the values it changes (the
    others are carried through). Returns every carried value after the loop."""
    names = list(carried)
    init = [b.constant("s32", "0")] + [carried[n] for n in names]
    shape = Shape.tuple_of([x.shape for x in init])
    loop_init = b.tuple_of(init, name=f"{what}.init")

    body_b = b.fork()
    param, values = _unpacked(body_b, f"{what}.body", shape)
    i, x = values[0], dict(zip(names, values[1:]))
    changed = step(body_b, i, x)
    if set(changed) - set(names):
        raise ValueError(f"loop step returned values it does not carry: {sorted(set(changed) - set(names))}")
    nxt = [body_b.binary("add", i, body_b.constant("s32", "1"))]
    nxt += [changed.get(n, x[n]) for n in names]
    for n, v in zip(names, nxt[1:]):
        assert v.shape == x[n].shape, f"loop value {n}: {v.shape} != {x[n].shape}"
    root = body_b.tuple_of(nxt, name=f"{what}.next")
    body = _computation(b, f"{what}_body", param, body_b, root)

    cond_b = b.fork()
    cparam, cvalues = _unpacked(cond_b, f"{what}.cond", shape, only=1)
    more = cond_b.compare(cvalues[0], cond_b.constant("s32", str(trips)), "LT")
    cond = _computation(b, f"{what}_cond", cparam, cond_b, more)

    loop = b.while_loop(loop_init, cond, body, name=what)
    return {n: b.get_tuple_element(loop, k + 1, name=f"{what}.{n}") for k, n in enumerate(names)}


def _unpacked(b: AttentionBuilder, what: str, shape: Shape,
              only: int | None = None) -> tuple[HloInstruction, list[HloInstruction]]:
    """A loop computation's tuple parameter and its first ``only`` (default: all) elements."""
    param = b.parameter(0, shape, name=f"{what}.param")
    count = only if only else len(shape.tuple_shapes)
    return param, [b.get_tuple_element(param, k, name=f"{what}.gte") for k in range(count)]


def _computation(b: AttentionBuilder, what: str, param: HloInstruction, built: AttentionBuilder,
                 root: HloInstruction) -> HloComputation:
    """The computation of ``param`` and ``built``'s instructions (unread ones dropped), added to
    the module before ``b``'s computation."""
    assert built.new[0] is param
    comp = HloComputation(NameScope.of_computations(b.module).fresh(f"{b.call.name}.{what}"), list(built.new), root)
    remove_dead(comp, built.new[1:])
    add_computation(b.module, comp, before=b.comp)
    return comp
