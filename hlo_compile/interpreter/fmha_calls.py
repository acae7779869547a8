"""The numpy meaning of cuDNN's fused attention calls (see ``library_calls.py``;
notes/xla-gpu-calls.md §3.5, cudnn-frontend's reference ``test/python/sdpa/fp16_ref.py``).

Per batch ``b``, query head ``h`` (key/value head ``h // G``), query ``i``, key ``j``, with every
intermediate in f32:

    S[i,j] = scale * Q[i,:].K[j,:] + bias[i,j]          (bias broadcast over size-1 dims)
    S[i,j] = -inf where masked: causal j > i; window w > 0: j <= i - w;
             padding: j >= kv_seqlen[b] or i >= q_seqlen[b] (the whole query row)
    m_i = max_j S,  l_i = sum_j exp(S - m_i),  O[i,:] = sum_j exp(S - m_i) V[j,:] / l_i
    stats_i = m_i + log(l_i)                            (log-sum-exp)

A row with every score -inf (a padded query row, or an empty key range) has ``l = 0``: its
output is 0 and its stats -inf, except on padded query rows (``i >= q_seqlen[b]``), which
cuDNN does not write and XLA zero-fills before the call (``should_memzero``): stats 0 there.
The backward recomputes P = exp(S - stats) from the stats it
is given (0 where S is -inf) and returns

    dP = dO.V^T,  delta_i = sum_d dO[i,d] O[i,d],  dS = P * (dP - delta)
    dQ = scale * dS.K,  dK = scale * dS^T.Q,  dV = P^T.dO   (summed over a head group)
    dBias = dS summed over the dims where the bias has size 1

Written independently of the lowering in ``passes/fmha_lowering.py`` so that each checks
the other.
"""
from __future__ import annotations

import numpy as np

from ..hlo.calls.fmha import FmhaCall, Roles, fmha_call
from ..hlo.calls.library_targets import FMHA_TARGETS
from .library_calls import library_call
from .numerics import dtype_of

F32 = np.float32


def _canonical(x, roles: Roles) -> np.ndarray:
    """``x`` as f32 ``[batch, heads, seq, feature]``."""
    return np.transpose(np.asarray(x), roles.to_canonical).astype(F32)


def _all_heads(x: np.ndarray, group: int) -> np.ndarray:
    """Key/value heads repeated for the query heads that share them."""
    return x if group == 1 else np.repeat(x, group, axis=1)


def _masked(call: FmhaCall, ops) -> np.ndarray | None:
    """Where scores are -inf (broadcastable to [B, N, T, S]), or None when nothing is."""
    i = np.arange(call.q_len)[:, None]
    j = np.arange(call.kv_len)[None, :]
    out = np.zeros((1, 1, call.q_len, call.kv_len), dtype=bool)
    any_mask = False
    if call.causal:
        out = out | (j > i)
        any_mask = True
    if call.window > 0:
        out = out | (j <= i - call.window)
        any_mask = True
    if call.padding:
        q_len = np.asarray(ops[call.q_seqlen]).astype(np.int64).reshape(-1, 1, 1, 1)
        kv_len = np.asarray(ops[call.kv_seqlen]).astype(np.int64).reshape(-1, 1, 1, 1)
        out = out | (j >= kv_len) | (i >= q_len)
        any_mask = True
    return out if any_mask else None


def _scores(call: FmhaCall, ops, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """S = scale * Q.K^T + bias, -inf where masked: f32 [B, N, T, S]."""
    s = np.einsum("bntd,bnsd->bnts", q, k, dtype=F32) * F32(call.scale)
    if call.bias is not None:
        s = s + np.asarray(ops[call.bias]).astype(F32)
    masked = _masked(call, ops)
    if masked is not None:
        s = np.where(masked, F32(-np.inf), s)
    return s.astype(F32)


def fmha_forward(call: FmhaCall, ops) -> tuple:
    """The forward's results (O, [stats], workspace) for operands ``ops``."""
    q = _canonical(ops[call.q], call.q_roles)
    k = _all_heads(_canonical(ops[call.k], call.k_roles), call.group)
    v = _all_heads(_canonical(ops[call.v], call.v_roles), call.group)
    s = _scores(call, ops, q, k)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isneginf(m), F32(0), m))
        l = e.sum(axis=-1, keepdims=True, dtype=F32)
        o = np.einsum("bnts,bnsd->bntd", e, v, dtype=F32) / np.where(l == 0, F32(1), l)
        stats = (m + np.log(l))[..., 0]
    if call.padding:
        q_len = np.asarray(ops[call.q_seqlen]).astype(np.int64).reshape(-1, 1, 1)
        stats = np.where(np.arange(call.q_len)[None, None, :] >= q_len, F32(0), stats)
    out = [o.astype(dtype_of(call.element_type))]
    if call.stats is not None:
        out.append(stats.astype(F32))
    out.append(_workspace(call))
    return tuple(out)


def fmha_backward(call: FmhaCall, ops) -> tuple:
    """The backward's results (dQ, dK, dV, [dBias], workspace) for operands ``ops``."""
    G = call.group
    q = _canonical(ops[call.q], call.q_roles)
    k = _all_heads(_canonical(ops[call.k], call.k_roles), G)
    v = _all_heads(_canonical(ops[call.v], call.v_roles), G)
    d_o = _canonical(ops[call.d_o], call.do_roles)
    o = _canonical(ops[call.o_in], call.do_roles)
    stats = np.asarray(ops[call.stats_in]).astype(F32)[..., None]
    s = _scores(call, ops, q, k)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.where(np.isneginf(s), F32(0), np.exp(s - stats)).astype(F32)
    dp = np.einsum("bntd,bnsd->bnts", d_o, v, dtype=F32)
    delta = (d_o * o).sum(axis=-1, keepdims=True, dtype=F32)
    ds = (p * (dp - delta)).astype(F32)
    scale = F32(call.scale)
    dq = scale * np.einsum("bnts,bnsd->bntd", ds, k, dtype=F32)
    dk = scale * np.einsum("bnts,bntd->bnsd", ds, q, dtype=F32)
    dv = np.einsum("bnts,bntd->bnsd", p, d_o, dtype=F32)
    B, Nk, S = call.batch, call.kv_heads, call.kv_len
    dk = dk.reshape(B, Nk, G, S, call.qk_dim).sum(axis=2, dtype=F32)
    dv = dv.reshape(B, Nk, G, S, call.v_dim).sum(axis=2, dtype=F32)
    et = dtype_of(call.element_type)
    out = [dq.astype(et), dk.astype(et), dv.astype(et)]
    if call.dbias is not None:
        shape = call.result_shapes[call.dbias]
        summed = tuple(d for d in range(4) if call.bias_dims[d] == 1 and call.scores_dims[d] != 1)
        db = ds.sum(axis=summed, keepdims=True, dtype=F32) if summed else ds
        out.append(db.reshape(shape.dimensions).astype(dtype_of(shape.element_type)))
    out.append(_workspace(call))
    return tuple(out)


def _workspace(call: FmhaCall) -> np.ndarray:
    shape = call.result_shapes[call.workspace]
    return np.zeros(tuple(shape.dimensions), dtype=dtype_of(shape.element_type))


@library_call(*sorted(FMHA_TARGETS))
def _fmha(ev, inst, ops):
    call = fmha_call(inst)
    return fmha_backward(call, ops) if call.backward else fmha_forward(call, ops)
