"""Collectives on R x P participants (``participants.py``), with XLA's semantics.

Each handler contributes its operands to a rendezvous of every participant, then computes its
own result from its group's contributions (groups from ``hlo.collective_groups``, rank = index
in the group):

- all-reduce: ``to_apply`` folded over ranks 0..n-1 in order (variadic: each operand alone);
- all-gather: concatenation along ``dimensions`` in rank order;
- reduce-scatter: block ``rank`` (along ``dimensions``) of the all-reduced value;
- all-to-all: array form splits along ``dimensions`` into n blocks, block j to rank j, and
  concatenates what it receives in rank order; tuple form sends operand j to rank j;
- collective-permute: the value of my source, zeros where I am no target;
- collective-broadcast: the value of my group's rank 0;
- ragged-all-to-all: my ``output`` operand, over which each member i of my group writes its
  updates for me, in rank order: update u of i (metadata entry ``my_rank * k + u`` of i's
  ``input_offsets``/``send_sizes``/``output_offsets``) is the rows ``input_i[off : off + size]``
  at my row ``output_offsets`` (the receiver's coordinates, given by the sender). My
  ``recv_sizes[i * k + u]`` must equal that size. XLA leaves a mismatch and rows beyond either
  buffer undefined (its kernels copy without checks): refused at run time with the values;
- partition-id / replica-id: from the participant (u32[]).

The native async forms (``all-reduce-start``, ``all-gather-start``, ``collective-permute-start``)
run the collective at the start and hold the result in XLA's start shape; the ``-done`` reads it.
"""
from __future__ import annotations

import numpy as np

from ..hlo.collective_groups import (group_of, has_send_recv_pairs, participant_groups, permute_sources,
                                     ragged_updates_per_peer)
from ..hlo.errors import HloUnsupportedError
from .numerics import dtype_of
from .registry import TOKEN, op


def _where(inst) -> str:
    return f"{inst.opcode} '%{inst.name}'" + (f" (line {inst.location.line})" if inst.location else "")


def _participant(ev):
    return ev.participant


def _exchange(ev, inst, value):
    """Every participant's contribution, and my group (flattened ids, rank order)."""
    p = _participant(ev)
    everyone = p.exchange(value, _where(inst))
    return everyone, group_of(participant_groups(inst, p.world), p.me)


def _single(values):
    return values[0] if len(values) == 1 else tuple(values)


def _all_reduce(ev, inst, ops):
    everyone, group = _exchange(ev, inst, list(ops))
    comp = inst.attr("to_apply")
    out = []
    for i in range(len(ops)):
        acc = np.asarray(everyone[group[0]][i])
        for j in group[1:]:
            acc = np.asarray(ev.call(comp, acc, np.asarray(everyone[j][i])))
        out.append(acc.astype(np.asarray(ops[i]).dtype))
    return out


def _all_gather(ev, inst, ops):
    everyone, group = _exchange(ev, inst, list(ops))
    d = inst.dimensions[0]
    return [np.concatenate([np.asarray(everyone[j][i]) for j in group], axis=d) for i in range(len(ops))]


def _reduce_scatter(ev, inst, ops):
    reduced = _all_reduce(ev, inst, ops)
    p = _participant(ev)
    group = group_of(participant_groups(inst, p.world), p.me)
    rank, n, d = group.index(p.me), len(group), inst.dimensions[0]
    out = []
    for x in reduced:
        if x.shape[d] % n:
            raise HloUnsupportedError(f"{_where(inst)}: dimension {d} ({x.shape[d]}) is not divisible by the "
                                      f"group size {n}", inst.location)
        m = x.shape[d] // n
        out.append(np.take(x, np.arange(rank * m, (rank + 1) * m), axis=d))
    return out


def _all_to_all(ev, inst, ops):
    everyone, group = _exchange(ev, inst, list(ops))
    p = _participant(ev)
    rank, n = group.index(p.me), len(group)
    if inst.dimensions:
        d = inst.dimensions[0]
        if len(ops) != 1:
            raise HloUnsupportedError(f"{_where(inst)}: the array form takes one operand", inst.location)
        blocks = [np.array_split(np.asarray(everyone[j][0]), n, axis=d)[rank] for j in group]
        if np.asarray(ops[0]).shape[d] % n:
            raise HloUnsupportedError(f"{_where(inst)}: dimension {d} is not divisible by {n}", inst.location)
        return [np.concatenate(blocks, axis=d)]
    if len(ops) != n:
        raise HloUnsupportedError(f"{_where(inst)}: the tuple form needs one operand per participant of the group "
                                  f"({n}), got {len(ops)}", inst.location)
    return [np.asarray(everyone[j][rank]) for j in group]


def _collective_permute(ev, inst, ops):
    if len(inst.operands) == 4 and inst.has_attr("slice_sizes"):
        raise HloUnsupportedError(f"{_where(inst)}: the in-place form (offsets, slice_sizes) is not supported",
                                  inst.location)
    p = _participant(ev)
    everyone = p.exchange(list(ops), _where(inst))
    source = permute_sources(inst, p.world).get(p.me)
    if source is None:
        return [np.zeros_like(np.asarray(x)) for x in ops]
    return [np.asarray(x) for x in everyone[source]]


def _collective_broadcast(ev, inst, ops):
    if inst.attr("has_dynamic_root", False):
        raise HloUnsupportedError(f"{_where(inst)}: dynamic roots are not supported", inst.location)
    everyone, group = _exchange(ev, inst, list(ops))
    return [np.asarray(x) for x in everyone[group[0]]]


def _ragged_all_to_all(ev, inst, ops):
    everyone, group = _exchange(ev, inst, [np.asarray(x) for x in ops])
    p = _participant(ev)
    rank, n = group.index(p.me), len(group)
    k = ragged_updates_per_peer(inst, n)
    out = np.array(ops[1], copy=True)
    recv_sizes = np.asarray(ops[5]).astype(np.int64)
    for i, sender in enumerate(group):
        data, _, in_offsets, send_sizes, out_offsets, _ = everyone[sender]
        for u in range(k):
            e = rank * k + u
            start, size, at = int(in_offsets[e]), int(send_sizes[e]), int(out_offsets[e])
            expect = int(recv_sizes[i * k + u])
            what = f"update {u} from group rank {i} to rank {rank}"
            if size != expect:
                raise HloUnsupportedError(f"{_where(inst)}: {what}: send_sizes gives {size} rows but recv_sizes "
                                          f"{expect}", inst.location)
            if size < 0 or (size and not (0 <= start and start + size <= data.shape[0]
                                          and 0 <= at and at + size <= out.shape[0])):
                raise HloUnsupportedError(
                    f"{_where(inst)}: {what}: rows [{start}, {start + size}) of an input of {data.shape[0]} to rows "
                    f"[{at}, {at + size}) of an output of {out.shape[0]} are out of range", inst.location)
            out[at:at + size] = data[start:start + size]
    return [out]


COLLECTIVES = {"all-reduce": _all_reduce, "all-gather": _all_gather, "reduce-scatter": _reduce_scatter,
               "all-to-all": _all_to_all, "collective-permute": _collective_permute,
               "collective-broadcast": _collective_broadcast, "ragged-all-to-all": _ragged_all_to_all}


def collective_result(ev, inst, ops, opcode: str):
    """The value of collective ``opcode`` for ``inst`` (also used for its async forms): one
    array, or a tuple for several operands."""
    out = COLLECTIVES[opcode](ev, inst, ops)
    shape = inst.shape
    if inst.opcode in ("all-gather-start", "collective-permute-start") and shape.is_tuple:
        # (operands, result, ...); all-reduce-start's shape is its result's (a tuple when variadic)
        shape = shape.tuple_shapes[1]
    declared = list(shape.tuple_shapes) if shape.is_tuple else [shape]
    for x, s in zip(out, declared):
        if tuple(np.shape(x)) != tuple(s.dimensions):
            raise HloUnsupportedError(f"{_where(inst)}: its groups give a result of shape {list(np.shape(x))}, but "
                                      f"it declares {s.to_text(False)} (a group of another size?)", inst.location)
    return _single(out)


@op("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast",
    "ragged-all-to-all")
def _collective(ev, inst, ops):
    return collective_result(ev, inst, ops, inst.opcode)


@op("all-reduce-start")
def _all_reduce_start(ev, inst, ops):  # the start's shape is the result's
    return collective_result(ev, inst, ops, "all-reduce")


@op("all-reduce-done")
def _all_reduce_done(ev, inst, ops):
    return ops[0]


@op("all-gather-start")
def _all_gather_start(ev, inst, ops):
    # (input, output), or ((inputs...), (outputs...)) for several operands
    out = collective_result(ev, inst, ops, "all-gather")
    if inst.shape.is_tuple and len(inst.shape.tuple_shapes) == 2 and (len(ops) > 1 or not isinstance(out, tuple)):
        if len(ops) == 1 and not inst.shape.tuple_shapes[1].is_tuple:
            return (ops[0], out)
        if len(ops) > 1:
            return (tuple(ops), out)
    return out


@op("all-gather-done")
def _all_gather_done(ev, inst, ops):
    start = inst.operands[0].shape
    if start.is_tuple and len(start.tuple_shapes) == 2 and start.tuple_shapes[1].compatible(inst.shape):
        return ops[0][1]
    return ops[0]


@op("collective-permute-start")
def _collective_permute_start(ev, inst, ops):
    out = collective_result(ev, inst, ops, "collective-permute")
    ctx = tuple(np.zeros(tuple(s.dimensions), dtype_of(s.element_type)) for s in inst.shape.tuple_shapes[2:])
    return (_single(list(ops)), out) + ctx


@op("collective-permute-done")
def _collective_permute_done(ev, inst, ops):
    return ops[0][1]


@op("partition-id")
def _partition_id(ev, inst, ops):
    return np.asarray(_participant(ev).partition, dtype=dtype_of(inst.shape.element_type))


@op("replica-id")
def _replica_id(ev, inst, ops):
    return np.asarray(_participant(ev).replica, dtype=dtype_of(inst.shape.element_type))


# ---- send / recv: (data, u32 context, token) ------------------------------------------------------

def _peer_key(inst, source: int, target: int):
    return ("p2p", inst.attr("channel_id", 0), source, target)


@op("send")
def _send(ev, inst, ops):
    p = _participant(ev)
    if not has_send_recv_pairs(inst) and p.world.size > 1:
        raise HloUnsupportedError(f"{_where(inst)}: a send without _xla_send_recv_source_target_pairs has no peer "
                                  "we can name", inst.location)
    targets = [t for t, s in permute_sources(inst, p.world, frontend=True).items() if s == p.me] \
        if has_send_recv_pairs(inst) else []
    for t in targets:
        p.rendezvous.post(_peer_key(inst, p.me, t), np.asarray(ops[0]))
    return (ops[0], np.zeros((), np.uint32), TOKEN)


@op("recv")
def _recv(ev, inst, ops):
    # the data arrives at recv-done (its sender may come later in program order)
    return ("pending-recv", inst)


@op("recv-done")
def _recv_done(ev, inst, ops):
    pending = ops[0]
    recv = pending[1] if isinstance(pending, tuple) and len(pending) == 2 and pending[0] == "pending-recv" else None
    if recv is None:
        raise HloUnsupportedError(f"{_where(inst)}: its operand is not a recv", inst.location)
    p = _participant(ev)
    data_shape = recv.shape.tuple_shapes[0]
    source = permute_sources(recv, p.world, frontend=True).get(p.me) if has_send_recv_pairs(recv) else None
    if source is None:
        value = np.zeros(tuple(data_shape.dimensions), dtype_of(data_shape.element_type))
    else:
        value = p.rendezvous.take(p.me, _peer_key(recv, source, p.me), _where(inst))
    return (value, TOKEN)


@op("send-done")
def _send_done(ev, inst, ops):
    return TOKEN


