"""The numpy meaning of Transformer Engine's fused attention calls (``hlo/calls/te_attention.py``):
the cuDNN attention of ``fmha_calls.py`` on ``[B, S, H, D]`` tensors.

With a padding mask the sequence lengths are ``cu_seqlens[b+1] - cu_seqlens[b]``. The forward's
softmax_aux holds the log-sum-exp statistics ``[B, H, S, 1]`` (cuDNN's; 0 on padded rows) and
rng_state zeros: where TE's bits are private only backward calls may read them
(``check_private_flows``, run before evaluation).
"""
from __future__ import annotations

import numpy as np

from ..hlo.calls.library_targets import TE_ATTENTION_TARGETS
from ..hlo.calls.te_attention import TeAttentionCall, te_attention_call
from . import fmha_calls
from .library_calls import library_call
from .numerics import dtype_of


def _seqlens(cu) -> np.ndarray:
    cu = np.asarray(cu).astype(np.int64)
    return (cu[1:] - cu[:-1]).astype(np.int32)


def _fmha_operands(call: TeAttentionCall, ops) -> list:
    """The operands followed by what ``call.fmha`` reads after them: the q and kv sequence
    lengths, k and v split from a packed kv (qkv_layout 7), the backward's [B, H, S] statistics."""
    extra = [_seqlens(ops[call.q_cu_seqlens]), _seqlens(ops[call.kv_cu_seqlens])]
    if call.packed_kv:
        kv = np.asarray(ops[1])
        extra += [np.ascontiguousarray(kv[:, :, 0]), np.ascontiguousarray(kv[:, :, 1])]
    if call.backward:
        extra.append(np.asarray(ops[4])[..., 0])
    return list(ops) + extra


def _zeros(shape) -> np.ndarray:
    return np.zeros(tuple(shape.dimensions), dtype=dtype_of(shape.element_type))


def _bshd(x) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(np.asarray(x), (0, 2, 1, 3)))


@library_call(*sorted(TE_ATTENTION_TARGETS))
def _te_attention(ev, inst, ops):
    call = te_attention_call(inst)
    shapes = call.result_shapes
    args = _fmha_operands(call, ops)
    if call.backward:
        dq, dk, dv, _ = fmha_calls.fmha_backward(call.fmha, args)
        if call.packed_kv:       # dKV [B, S, 2, H, D] and an empty dV
            return _bshd(dq), np.stack([_bshd(dk), _bshd(dv)], axis=2), _zeros(shapes[2]), _zeros(shapes[3]), \
                _zeros(shapes[4])
        return _bshd(dq), _bshd(dk), _bshd(dv), _zeros(shapes[3]), _zeros(shapes[4])
    o, stats, _ = fmha_calls.fmha_forward(call.fmha, args)
    return _bshd(o), np.asarray(stats)[..., None], _zeros(shapes[2]), _zeros(shapes[3])
