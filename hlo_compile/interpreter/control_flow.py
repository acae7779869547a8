"""Calls and control flow (call, fusion, while, conditional), tokens, custom-calls with a
defined meaning, and rng (async pairs: ``async_ops.py``; collectives: ``collectives.py``)."""
from __future__ import annotations

import numpy as np

from ..hlo.calls.annotation import is_identity_annotation
from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.library_targets import SCRATCH_TARGETS
from . import rng_bits
from .library_calls import LIBRARY_CALLS
from .numerics import dtype_of
from .registry import TOKEN, op
from .sort_ops import top_k


@op("call", "fusion")
def _call(ev, inst, ops):
    comp = inst.attr("to_apply", None) or inst.attr("calls")
    return ev.evaluate(comp, ops)


@op("while")
def _while(ev, inst, ops):
    cond, body = inst.attr("condition"), inst.attr("body")
    state = ops[0]
    while bool(np.asarray(ev.evaluate(cond, [state])).reshape(())):
        state = ev.evaluate(body, [state])
    return state


@op("conditional")
def _conditional(ev, inst, ops):
    sel = np.asarray(ops[0]).reshape(())
    if inst.has_attr("branch_computations"):
        branches = inst.attr("branch_computations")
        i = int(sel)
        if i < 0 or i >= len(branches):
            i = len(branches) - 1  # out-of-range index runs the last branch
        return ev.evaluate(branches[i], [ops[1 + i]])
    if bool(sel):
        return ev.evaluate(inst.attr("true_computation"), [ops[1]])
    return ev.evaluate(inst.attr("false_computation"), [ops[2]])


@op("after-all", "infeed-token")
def _after_all(ev, inst, ops):
    return TOKEN


@op("add-dependency")
def _add_dependency(ev, inst, ops):
    return ops[0]


# ---- custom-call ---------------------------------------------------------------------------------



@op("custom-call")
def _custom_call(ev, inst, ops):
    target = inst.attr("custom_call_target")
    if target in ("TopK", "__cpu$TopK", "xla.cpu.topk", "__gpu$TopK") or target.lower() == "topk":
        x = np.asarray(ops[0])
        k = inst.shape.tuple_shapes[0].dimensions[-1]
        v, i = top_k(x, inst.operands[0].shape.element_type, k, True)
        return v, i.astype(dtype_of(inst.shape.tuple_shapes[1].element_type))
    if is_identity_annotation(inst, ev.participant.world.size):
        return ops[0]
    if target in LIBRARY_CALLS:
        return LIBRARY_CALLS[target](ev, inst, ops)
    if target in SCRATCH_TARGETS and not ops and inst.shape.is_array:
        # a workspace XLA allocates for a library or custom kernel: contents undefined
        return np.zeros(inst.shape.dimensions, dtype=dtype_of(inst.shape.element_type))
    raise HloUnsupportedError(f"custom-call target '{target}' has no defined meaning in the interpreter",
                              inst.location)


# ---- rng -------------------------------------------------------------------------------------------

def _need_seed(ev, inst):
    if ev.rng is None:
        raise HloUnsupportedError(f"{inst.opcode} results are not reproducible; give a seed (--seed) to "
                                  "evaluate it with numpy's generator", inst.location)
    return ev.rng


@op("rng")
def _rng(ev, inst, ops):
    g = _need_seed(ev, inst)
    dims = tuple(inst.shape.dimensions)
    a, b = np.asarray(ops[0]).astype(np.float64), np.asarray(ops[1]).astype(np.float64)
    if inst.attr("distribution", "rng_uniform") == "rng_normal":
        out = g.normal(size=dims) * b + a
    elif np.dtype(dtype_of(inst.shape.element_type)).kind in "iu":
        out = g.integers(int(a), max(int(b), int(a) + 1), size=dims)
    else:
        out = g.uniform(a, b, size=dims)
    return out.astype(dtype_of(inst.shape.element_type))


@op("rng-bit-generator")
def _rng_bit_generator(ev, inst, ops):
    # deterministic in its state: Philox/Threefry exactly as XLA (rng_bits.py), no seed needed
    return rng_bits.evaluate(inst, ops[0])
