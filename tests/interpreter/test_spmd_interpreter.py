"""The interpreter on R x P participants: XLA's group modes, replica-group spellings, every
collective, send/recv, ids, and the errors when participants disagree.

Expected values are XLA's, as recorded in notes/xla-async-spmd.md (checked there against
XLA:CPU through JAX) or worked by hand from XLA's definitions; tests/corpus/test_spmd_xla.py compares
against XLA itself on modules JAX compiled."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.collective_groups import World, parse_replica_groups, participant_groups
from hlo_compile.hlo.errors import HloError, HloUnsupportedError
from hlo_compile.interpreter.evaluator import evaluate_spmd

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _run(header: str, body: str, args, shape: str = "f32[2]"):
    text = f"HloModule m{header}\n\n{ADD}\nENTRY main {{\n  x = {shape} parameter(0)\n{body}\n}}\n"
    module = parse_module(text)
    return [np.asarray(o) if not isinstance(o, tuple) else o
            for o in evaluate_spmd(module, args if callable(args) else (lambda k: [args[k]]))]


def _powers(k):
    return [np.array([10.0 ** k, 2 * 10.0 ** k], np.float32)]


@pytest.mark.parametrize("attrs, expected", [
    ("replica_groups={{0,1}}", [101, 1010, 101, 1010]),                                  # cross-replica
    ("channel_id=1, replica_groups={{0},{1}}", [11, 11, 1100, 1100]),                   # cross-replica-and-partition
    ("channel_id=1, replica_groups={{0,1}}", [1111] * 4),
    ("channel_id=1, use_global_device_ids=true, replica_groups={{0,1},{2,3}}", [11, 11, 1100, 1100]),  # flattened
    ("channel_id=1, use_global_device_ids=true, replica_groups={{0,2},{1,3}}", [101, 1010, 101, 1010]),
    ("channel_id=1, use_global_device_ids=true, replica_groups=[2,2]<=[2,2]T(1,0)", [101, 1010, 101, 1010]),
    ("channel_id=1, use_global_device_ids=true, replica_groups=mesh['r'=2,'p'=2] {'p'}", [11, 11, 1100, 1100]),
])
def test_all_reduce_group_modes_match_xla(attrs, expected):
    # R=2, P=2, participant d = 2r + p holds 10^d (the values XLA:CPU gave, notes §2.2)
    out = _run(", replica_count=2, num_partitions=2", f"  ROOT r = f32[2] all-reduce(x), {attrs}, to_apply=add",
               _powers)
    assert [float(o[0]) for o in out] == expected
    assert [float(o[1]) for o in out] == [2 * e for e in expected]


def test_replica_group_spellings_expand_as_xla():
    assert parse_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("mesh['x'=2,'y'=2] {'x'}") == [[0, 2], [1, 3]]
    assert parse_replica_groups("mesh['x'=2,'y'=2] {'y'}") == [[0, 1], [2, 3]]
    assert parse_replica_groups("mesh['x'=2,'y'=2] {'x','y'}") == [[0, 1, 2, 3]]
    assert parse_replica_groups("mesh['x'=2,'y'=2, device_ids=(3,1,0,2)] {'y'}") == [[3, 1], [0, 2]]
    assert parse_replica_groups("{{0,2},{1,3}}") == [[0, 2], [1, 3]]
    assert parse_replica_groups("{}") == []


def test_cross_partition_groups_stay_within_a_replica():
    m = parse_module("HloModule m, replica_count=2, num_partitions=2\nENTRY e {\n  x = f32[2] parameter(0)\n"
                     "  ROOT r = f32[2] all-to-all(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}\n}\n")
    assert participant_groups(m.entry.root, World(2, 2)) == [[0, 1], [2, 3]]


def test_all_gather_follows_rank_order_not_id_order():
    # R=4 groups {{3,1},{0,2}}, replica d holds [d+1, 10(d+1)]: replicas 1 and 3 get [[4,40],[2,20]]
    out = _run(", replica_count=4", "  ROOT r = f32[2,2] all-gather(x), replica_groups={{3,1},{0,2}}, dimensions={0}",
               lambda k: [np.array([[k + 1, 10 * (k + 1)]], np.float32)], shape="f32[1,2]")
    np.testing.assert_array_equal(out[1], [[4, 40], [2, 20]])
    np.testing.assert_array_equal(out[3], [[4, 40], [2, 20]])
    np.testing.assert_array_equal(out[0], [[1, 10], [3, 30]])


def test_reduce_scatter_gives_each_rank_its_block():
    out = _run(", replica_count=4", "  ROOT r = f32[2] reduce-scatter(x), replica_groups={{3,1},{0,2}}, "
               "dimensions={0}, to_apply=add", lambda k: [(k + 1) * np.array([1, 10, 100, 1000], np.float32)],
               shape="f32[4]")
    np.testing.assert_array_equal(out[3], [6, 60])
    np.testing.assert_array_equal(out[1], [600, 6000])


def test_all_to_all_array_and_tuple_forms():
    out = _run(", replica_count=4", "  ROOT r = f32[4] all-to-all(x), replica_groups={{1,2,3,0}}, dimensions={0}",
               lambda k: [np.array([100 * k + j for j in range(4)], np.float32)], shape="f32[4]")
    np.testing.assert_array_equal(out[0], [103, 203, 303, 3])
    tup = _run(", replica_count=2", "  y = f32[2] negate(x)\n  ROOT r = (f32[2], f32[2]) all-to-all(x, y), "
               "replica_groups={{0,1}}", _powers)
    np.testing.assert_array_equal(tup[0][0], [1, 2])       # my operand 0
    np.testing.assert_array_equal(tup[0][1], [10, 20])     # participant 1's operand 0
    np.testing.assert_array_equal(tup[1][0], [-1, -2])     # participant 0's operand 1
    np.testing.assert_array_equal(tup[1][1], [-10, -20])


def test_collective_permute_zeros_where_no_source():
    out = _run(", replica_count=4", "  ROOT r = f32[2] collective-permute(x), source_target_pairs={{0,1},{1,2},{2,3}}",
               _powers)
    np.testing.assert_array_equal(out[0], [0, 0])
    for t in (1, 2, 3):
        np.testing.assert_array_equal(out[t], _powers(t - 1)[0])
    # with a channel: partition pairs within each replica
    out = _run(", replica_count=2, num_partitions=2", "  ROOT r = f32[2] collective-permute(x), channel_id=1, "
               "source_target_pairs={{0,1}}", _powers)
    assert [float(o[0]) for o in out] == [0, 1, 0, 100]


def test_collective_broadcast_from_rank_zero():
    out = _run(", replica_count=4", "  ROOT r = f32[2] collective-broadcast(x), replica_groups={{2,0},{1,3}}", _powers)
    assert [float(o[0]) for o in out] == [100, 10, 100, 10]


def test_ids_and_send_recv():
    pairs = 'frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2}}"}'
    body = f"""  pid = u32[] partition-id()
  rid = u32[] replica-id()
  t = token[] after-all()
  r = (f32[2], u32[], token[]) recv(t), channel_id=5, {pairs}
  s = (f32[2], u32[], token[]) send(x, t), channel_id=5, {pairs}
  rd = (f32[2], token[]) recv-done(r), channel_id=5
  sd = token[] send-done(s), channel_id=5
  got = f32[2] get-tuple-element(rd), index=0
  ROOT o = (u32[], u32[], f32[2]) tuple(pid, rid, got)"""
    out = _run(", num_partitions=3", body, _powers)
    assert [(int(o[0]), int(o[1])) for o in out] == [(0, 0), (1, 0), (2, 0)]
    np.testing.assert_array_equal(out[0][2], [0, 0])
    np.testing.assert_array_equal(out[1][2], [1, 2])
    np.testing.assert_array_equal(out[2][2], [10, 20])


def test_async_collective_forms():
    body = """  a = f32[2] all-reduce-start(x), replica_groups={{0,1}}, to_apply=add
  ad = f32[2] all-reduce-done(a)
  g = (f32[2], f32[4]) all-gather-start(x), replica_groups={{0,1}}, dimensions={0}
  gd = f32[4] all-gather-done(g)
  p = (f32[2], f32[2], u32[], u32[]) collective-permute-start(x), source_target_pairs={{0,1},{1,0}}
  pd = f32[2] collective-permute-done(p)
  s = ((f32[2]), f32[2]) all-to-all-start(x), replica_groups={{0,1}}, dimensions={0}
  sd = f32[2] all-to-all-done(s)
  r = ((f32[2]), f32[1], s32[]) reduce-scatter-start(x), replica_groups={{0,1}}, dimensions={0}, to_apply=add
  rd = f32[1] reduce-scatter-done(r)
  ROOT o = (f32[2], f32[4], f32[2], f32[2], f32[1]) tuple(ad, gd, pd, sd, rd)"""
    out = _run(", replica_count=2", body, _powers)
    np.testing.assert_array_equal(out[0][0], [11, 22])
    np.testing.assert_array_equal(out[1][1], [1, 2, 10, 20])
    np.testing.assert_array_equal(out[0][2], [10, 20])
    np.testing.assert_array_equal(out[0][3], [1, 10])
    np.testing.assert_array_equal(out[1][3], [2, 20])
    np.testing.assert_array_equal(out[0][4], [11])
    np.testing.assert_array_equal(out[1][4], [22])


def test_participants_disagreeing_on_collectives_is_an_error_not_a_hang():
    body = """  pid = u32[] partition-id()
  zero = u32[] constant(0)
  p = pred[] compare(pid, zero), direction=EQ
  ROOT c = f32[2] conditional(p, x, x), true_computation=reduce_it, false_computation=keep"""
    text = (f"HloModule m, num_partitions=2\n\n{ADD}\nreduce_it {{\n  y = f32[2] parameter(0)\n  ROOT r = f32[2] "
            "all-reduce(y), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add\n}\n\n"
            "keep {\n  ROOT y = f32[2] parameter(0)\n}\n\n"
            f"ENTRY main {{\n  x = f32[2] parameter(0)\n{body}\n}}\n")
    with pytest.raises(HloError, match="do not execute the same collectives"):
        evaluate_spmd(parse_module(text), lambda k: _powers(k))


def test_a_group_naming_a_missing_participant_is_refused():
    with pytest.raises(HloUnsupportedError, match="name id 2"):
        _run(", replica_count=2", "  ROOT r = f32[2] all-reduce(x), replica_groups={{0,2}}, to_apply=add", _powers)


def test_shared_and_per_participant_arguments():
    out = evaluate_spmd(parse_module(f"HloModule m, num_partitions=2\n\n{ADD}\nENTRY e {{\n  x = f32[2] parameter(0)\n"
                                     "  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1}}, "
                                     "use_global_device_ids=true, to_apply=add\n}\n"), [np.ones(2, np.float32)])
    assert [o.tolist() for o in out] == [[2, 2], [2, 2]]
