"""Transformer Engine's fused attention calls as the plain HLO they compute
(``hlo/calls/te_attention.py``): the cuDNN attention lowering of ``fmha_lowering.py`` on
``[B, S, H, D]`` tensors.

The sequence lengths of a padding mask are ``slice(cu, [1:B+1]) - slice(cu, [0:B])``; the
forward's softmax_aux is the log-sum-exp statistics reshaped to ``[B, H, S, 1]`` (0 on padded
rows, which only backward calls may read: ``check_private_flows``; a backward reshapes it back
to ``[B, H, S]``) and its rng_state zeros; the backward's dBias is empty. Results are
transposed from the canonical ``[B, H, S, D]`` to TE's ``[B, S, H, D]``.

There is no library step for these calls: they are lowered whatever ``CompileOptions`` says
(``library_calls.lower_library_calls``), after the whole module's calls were checked
(``check_module``): lowering a forward call rewires its backward's operands, so the flow
check must see them all first.
"""
from __future__ import annotations

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.calls.library_targets import TE_ATTENTION_TARGETS
from ..hlo.calls.te_attention import TeAttentionCall, check_private_flows, te_attention_call
from .attention_math import AttentionBuilder
from .fmha_chunked import SCORES_LIMIT
from .fmha_lowering import attention_backward, attention_forward, replace_call


def check_module(module: HloModule) -> None:
    """Read every TE attention call of ``module`` and check where their private leaves go
    (refusing by name), before any is lowered."""
    found = False
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "custom-call" and inst.attr("custom_call_target", None) in TE_ATTENTION_TARGETS:
                te_attention_call(inst)
                found = True
    if found:
        check_private_flows(module)


def lower_te_attention(comp: HloComputation, call: HloInstruction, *, limit: int = SCORES_LIMIT,
                       chunk: int | None = None) -> None:
    """Replace the TE attention call ``call`` of ``comp`` by plain HLO (its private-leaf
    checks were made by ``check_module``): whole, or over chunks of keys where the scores
    exceed ``limit`` bytes (``chunk``: forced, for tests)."""
    info = te_attention_call(call)
    b = AttentionBuilder(comp, call)
    b.operands += _fmha_operands(b, info)
    shapes = info.result_shapes
    if info.backward:
        dq, dk, dv = attention_backward(b, info.fmha, limit=limit, chunk=chunk)
        empty = b.splat(b.constant(shapes[3].element_type, "0"), shapes[3])
        if info.packed_kv:
            leaves = [_bshd(b, dq), _packed(b, _bshd(b, dk), _bshd(b, dv)), empty, empty]
        else:
            leaves = [_bshd(b, dq), _bshd(b, dk), _bshd(b, dv), empty]
    else:
        o, stats = attention_forward(b, info.fmha, limit=limit, chunk=chunk)
        aux = b.reshape(stats, shapes[1].dimensions)
        rng = b.splat(b.constant(shapes[2].element_type, "0"), shapes[2])
        leaves = [_bshd(b, o), aux, rng]
    replace_call(b, leaves, shapes)


def _fmha_operands(b: AttentionBuilder, info: TeAttentionCall) -> list[HloInstruction]:
    """What ``info.fmha`` reads after the call's own operands: the q and kv sequence lengths, k
    and v split from a packed kv (qkv_layout 7), the backward's ``[B, H, S]`` statistics."""
    ops = b.call.operands
    out = [_seqlens(b, ops[info.q_cu_seqlens]), _seqlens(b, ops[info.kv_cu_seqlens])]
    if info.packed_kv:
        out += [_kv_half(b, ops[1], i) for i in (0, 1)]
    if info.backward:
        aux = ops[4]
        out.append(b.reshape(aux, aux.shape.dimensions[:3]))
    return out


def _kv_half(b: AttentionBuilder, kv: HloInstruction, i: int) -> HloInstruction:
    """``kv[:, :, i]``: k (0) or v (1), ``[B, S, H, D]``, of a packed ``kv[B, S, 2, H, D]``."""
    B, S, _, N, D = kv.shape.dimensions
    part = b.slice(kv, (0, 0, i, 0, 0), (B, S, i + 1, N, D))
    return b.reshape(part, (B, S, N, D))


def _packed(b: AttentionBuilder, dk: HloInstruction, dv: HloInstruction) -> HloInstruction:
    """dKV ``[B, S, 2, H, D]`` from the BSHD dK and dV."""
    B, S, N, D = dk.shape.dimensions
    parts = [b.reshape(x, (B, S, 1, N, D)) for x in (dk, dv)]
    return b.concatenate(parts, 2)


def _seqlens(b: AttentionBuilder, cu: HloInstruction) -> HloInstruction:
    """``cu[1:] - cu[:-1]``: s32[B] from the cumulative s32[B+1]."""
    n = cu.shape.dimensions[0] - 1
    hi = b.slice(cu, (1,), (n + 1,))
    lo = b.slice(cu, (0,), (n,))
    return b.binary("subtract", hi, lo)


def _bshd(b: AttentionBuilder, x: HloInstruction) -> HloInstruction:
    return b.transpose(x, (0, 2, 1, 3))


LOWERINGS = {t: lower_te_attention for t in TE_ATTENTION_TARGETS}
