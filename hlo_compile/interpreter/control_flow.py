"""Calls and control flow (call, fusion, while, conditional, async wrappers), tokens,
custom-calls with a defined meaning, the single-device meaning of collectives, and rng."""
from __future__ import annotations

import numpy as np

from ..hlo.errors import HloUnsupportedError
from ..hlo.library_targets import SCRATCH_TARGETS
from . import rng_bits
from .library_calls import LIBRARY_CALLS
from .numerics import dtype_of
from .participants import require_one_participant
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


# ---- async wrappers: start returns ((operands), result, context), done returns result ----------

@op("async-start")
def _async_start(ev, inst, ops):
    out = ev.evaluate(inst.attr("calls"), ops)
    return (tuple(ops), out, np.zeros((), np.int32))


@op("async-update")
def _async_update(ev, inst, ops):
    return ops[0]


@op("async-done")
def _async_done(ev, inst, ops):
    return ops[0][1]


@op("copy-start")
def _copy_start(ev, inst, ops):
    return (ops[0], ops[0], np.zeros((), np.uint32))


@op("copy-done")
def _copy_done(ev, inst, ops):
    return ops[0][0]


# ---- collectives on one device ---------------------------------------------------------------

def _single(ops):
    return ops[0] if len(ops) == 1 else tuple(ops)


@op("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-broadcast")
def _collective(ev, inst, ops):
    require_one_participant(ev.module, inst)
    return _single(ops)


@op("all-reduce-start")
def _all_reduce_start(ev, inst, ops):
    require_one_participant(ev.module, inst)
    return _single(ops)


@op("all-reduce-done")
def _all_reduce_done(ev, inst, ops):
    return ops[0]


@op("all-gather-start")
def _all_gather_start(ev, inst, ops):
    require_one_participant(ev.module, inst)
    return (_single(ops), _single(ops)) if inst.shape.is_tuple else _single(ops)


@op("all-gather-done")
def _all_gather_done(ev, inst, ops):
    return ops[0][1] if isinstance(ops[0], tuple) and inst.operands[0].shape.is_tuple else ops[0]


def _permute(inst, x):
    pairs = inst.attr("source_target_pairs", "{}")
    if isinstance(pairs, str) and "{0,0}" in pairs.replace(" ", ""):
        return x
    return np.zeros_like(x)


@op("collective-permute")
def _collective_permute(ev, inst, ops):
    require_one_participant(ev.module, inst)
    return _permute(inst, np.asarray(ops[0]))


@op("collective-permute-start")
def _collective_permute_start(ev, inst, ops):
    require_one_participant(ev.module, inst)
    out = _permute(inst, np.asarray(ops[0]))
    return (ops[0], out) + tuple(np.zeros((), np.uint32) for _ in inst.shape.tuple_shapes[2:])


@op("collective-permute-done")
def _collective_permute_done(ev, inst, ops):
    return ops[0][1]


@op("partition-id", "replica-id")
def _ids(ev, inst, ops):
    require_one_participant(ev.module, inst)
    return np.zeros((), dtype=dtype_of(inst.shape.element_type))


# ---- custom-call ---------------------------------------------------------------------------------

_IDENTITY_TARGETS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost",
                     "MoveToDevice", "annotate_device_placement", "LayoutConstraint", "X64Combine"}


@op("custom-call")
def _custom_call(ev, inst, ops):
    target = inst.attr("custom_call_target")
    if target in ("TopK", "__cpu$TopK", "xla.cpu.topk") or target.lower() == "topk":
        x = np.asarray(ops[0])
        k = inst.shape.tuple_shapes[0].dimensions[-1]
        v, i = top_k(x, inst.operands[0].shape.element_type, k, True)
        return v, i.astype(dtype_of(inst.shape.tuple_shapes[1].element_type))
    if target in _IDENTITY_TARGETS and len(ops) == 1:
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


@op("rng-get-and-update-state")
def _rng_state(ev, inst, ops):
    g = _need_seed(ev, inst)
    return g.integers(0, 2**63, size=tuple(inst.shape.dimensions), dtype=np.int64).astype(
        dtype_of(inst.shape.element_type))
