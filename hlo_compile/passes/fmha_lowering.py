"""cuDNN's fused attention calls as the plain HLO they compute (see ``library_calls.py``;
the math is notes/xla-gpu-calls.md §3.5, the call's reading ``hlo/calls/fmha.py``).

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

Where the f32 scores would take more than ``fmha_chunked.SCORES_LIMIT`` bytes (Llama 3.1 8B's:
16 GiB each), the same math runs as a ``while`` loop over chunks of keys (``fmha_chunked.py``);
the lowering functions take the limit (and a forced chunk) as parameters.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ..hlo import HloComputation, HloInstruction
from ..hlo.calls.fmha import FmhaCall, fmha_call
from ..hlo.calls.library_targets import FMHA_TARGETS
from ..hlo.rewrite import remove_dead, replace_instructions, replace_uses, take_name
from ..hlo.shape import Shape
from .attention_math import F32, AttentionBuilder, attention_inputs, attention_output, attention_scores
from .fmha_chunked import SCORES_LIMIT, chunked_backward, chunked_forward, key_chunk


def lower_fmha(comp: HloComputation, call: HloInstruction, *, limit: int = SCORES_LIMIT,
               chunk: int | None = None) -> None:
    """Replace the fused-attention custom call ``call`` of ``comp`` by plain HLO: whole, or over
    chunks of keys where the scores exceed ``limit`` bytes (``chunk``: that many keys a step
    whatever the size, for tests)."""
    info = fmha_call(call)
    b = AttentionBuilder(comp, call)
    lower = attention_backward if info.backward else attention_forward
    replace_call(b, lower(b, info, limit=limit, chunk=chunk), info.result_shapes)


def keys_per_step(info: FmhaCall, limit: int = SCORES_LIMIT, chunk: int | None = None) -> int | None:
    """The chunk of keys a loop step takes for ``info``; None: lowered whole (also when a
    forced ``chunk`` covers every key)."""
    if chunk is not None and chunk < 1:
        raise ValueError(f"attention lowering: a chunk of {chunk} keys")
    c = chunk if chunk is not None else key_chunk(info, limit)
    return c if c is not None and c < info.kv_len else None


def replace_call(b: AttentionBuilder, leaves: list[HloInstruction], result_shapes: Sequence[Shape]) -> None:
    """Replace the call of ``b`` by the values ``leaves`` of its result leaves (all but the
    last, the workspace, which becomes zeros), copied to the declared layouts."""
    comp, call = b.comp, b.call
    leaves = [b.relayout(x, s) for x, s in zip(leaves, result_shapes)]
    ws_shape = result_shapes[-1]
    workspace = b.splat(b.constant(ws_shape.element_type, "0"), ws_shape)
    whole = b.tuple_of(leaves + [workspace])
    made = b.insert()
    # readers of one leaf read the new value; the tuple stands for the call wherever the call
    # is read whole (and is dropped, with the workspace, where it is not)
    reads = [u for u in call.users if u.opcode == "get-tuple-element" and u.operands[0] is call]
    by_leaf = leaves + [workspace]
    replace_uses(comp, {g: by_leaf[g.tuple_index] for g in reads})
    take_name(whole, call, b.names)
    replace_instructions(comp, {call: whole})
    remove_dead(comp, reads + [whole, workspace] + made)


LOWERINGS: dict[str, Callable[[HloComputation, HloInstruction], None]] = {t: lower_fmha for t in FMHA_TARGETS}


# ---- the math -------------------------------------------------------------------------------

def attention_forward(b: AttentionBuilder, info: FmhaCall, *, limit: int = SCORES_LIMIT,
                      chunk: int | None = None) -> list[HloInstruction]:
    """The forward's result values: O ``[B, N, T, H]`` in the input type, [stats f32 ``[B, N, T]``]."""
    c = keys_per_step(info, limit, chunk)
    if c is not None:
        return chunked_forward(b, info, c)
    q, k, v = attention_inputs(b, info)
    s, can_be_empty = attention_scores(b, info, q, k)
    dims = info.scores_dims
    m = b.reduce(s, b.f32(float("-inf")), (3,), "maximum")
    m_safe = b.where_equal(m, float("-inf"), 0.0) if can_be_empty else m
    e = b.unary("exponential", b.binary("subtract", s, b.broadcast(m_safe, dims, (0, 1, 2))))
    total = b.reduce(e, b.f32(0.0), (3,), "add")
    return attention_output(b, info, b.batched_dot(e, v, (3,), (2,)), m, total, can_be_empty)


def attention_backward(b: AttentionBuilder, info: FmhaCall, *, limit: int = SCORES_LIMIT,
                       chunk: int | None = None) -> list[HloInstruction]:
    """The backward's result values: dQ, dK, dV (canonical order, the input type), [dBias]."""
    c = keys_per_step(info, limit, chunk)
    if c is not None:
        return chunked_backward(b, info, c)
    ops = b.operands
    q, k, v = attention_inputs(b, info)
    d_o = b.canonical(ops[info.d_o], info.do_roles)
    o = b.canonical(ops[info.o_in], info.do_roles)
    s, can_be_empty = attention_scores(b, info, q, k)
    dims = info.scores_dims
    stats = b.broadcast(b.convert(ops[info.stats_in], F32), dims, (0, 1, 2))
    p = b.unary("exponential", b.binary("subtract", s, stats))
    if can_be_empty:
        p = b.select(b.compare(s, b.splat(b.f32(float("-inf")), dims), "EQ"), b.splat(b.f32(0.0), dims), p)
    dp = b.batched_dot(d_o, v, (3,), (3,))
    delta = b.reduce(b.binary("multiply", d_o, o), b.f32(0.0), (3,), "add")
    ds = b.binary("multiply", p, b.binary("subtract", dp, b.broadcast(delta, dims, (0, 1, 2))))
    ds_scaled = b.binary("multiply", ds, b.splat(b.f32(info.scale), dims))
    dq = b.batched_dot(ds_scaled, k, (3,), (2,))
    dk = b.group_sum(b.batched_dot(ds_scaled, q, (2,), (2,)), info.group)
    dv = b.group_sum(b.batched_dot(p, d_o, (2,), (2,)), info.group)
    et = info.element_type
    out = [b.convert(dq, et), b.convert(dk, et), b.convert(dv, et)]
    if info.dbias is not None:
        shape = info.result_shapes[info.dbias]
        summed = [d for d in range(4) if info.bias_dims[d] == 1 and dims[d] != 1]
        db = b.reduce(ds, b.f32(0.0), summed, "add") if summed else ds
        db = b.reshape(db, shape.dimensions)
        out.append(b.convert(db, shape.element_type))
    return out
