"""ragged-all-to-all on the interpreter and the host (the NCCL path: tests/runtime/test_nccl_participants.py).

XLA:CPU does not implement the op, so there is no xla_ref reference: the expected values are
JAX's worked examples (``tests/ragged_collective_test.py`` of JAX, exact numbers) and an
independent numpy model written here from XLA's definition (metadata ``[n * k]``, entry
``j * k + u`` = update u to group rank j; output offsets in the receiver's coordinates; rows
nobody writes keep the output operand's values)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.collective_groups import world_of
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.interpreter.evaluator import evaluate_spmd
from hlo_compile.runtime import literals
from hlo_compile.runtime.spmd_run import compile_spmd

PLATFORMS = ["interpreter", "host"]


def run(module, args: list, platform: str) -> list[np.ndarray]:
    world = world_of(module)
    if platform == "interpreter":
        out = evaluate_spmd(module, lambda k: args[k], world)
    else:
        out = compile_spmd(module, "host", world)(args)
    return [literals.flatten(o)[0] if isinstance(o, (tuple, list)) else np.asarray(o) for o in out]


def ragged_module(name: str, header: str, data: str, out: str, meta: str, groups: str = "replica_groups={{0,1}}",
                  channel: str = "channel_id=1, ") -> str:
    return f"""HloModule {name}{header}

ENTRY main {{
  input = {data} parameter(0)
  output = {out} parameter(1)
  input_offsets = {meta} parameter(2)
  send_sizes = {meta} parameter(3)
  output_offsets = {meta} parameter(4)
  recv_sizes = {meta} parameter(5)
  ROOT ra2a = {out} ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets, recv_sizes),
    {channel}{groups}
}}
"""


def _i32(*rows):
    return [np.array(r, np.int32) for r in rows]


# ---- JAX's worked examples, exact numbers --------------------------------------------------------------

JAX_TWO = ragged_module("jax_two", ", num_partitions=2", "s32[3]{0}", "s32[4]{0}", "s32[2]{0}")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_jax_worked_example(platform):
    # operand [[1,2,2],[3,4,0]], output zeros, input_offsets [[0,1],[0,1]], send_sizes [[1,2],[1,1]],
    # output_offsets [[0,0],[1,2]], recv_sizes [[1,1],[2,1]] → [[1,3,0,0],[2,2,4,0]]
    args = [[*_i32([1, 2, 2], [0, 0, 0, 0], [0, 1], [1, 2], [0, 0], [1, 1])],
            [*_i32([3, 4, 0], [0, 0, 0, 0], [0, 1], [1, 1], [1, 2], [2, 1])]]
    got = run(parse_module(JAX_TWO), args, platform)
    assert [g.tolist() for g in got] == [[1, 3, 0, 0], [2, 2, 4, 0]]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_jax_axis_index_groups_example(platform):
    text = ragged_module("jax_groups", ", num_partitions=4", "s32[3]{0}", "s32[4]{0}", "s32[2]{0}",
                         "replica_groups={{0,1},{2,3}}")
    per = [([1, 2, 2], [0, 1], [1, 2], [0, 0], [1, 1]), ([3, 4, 0], [0, 1], [1, 1], [1, 2], [2, 1]),
           ([10, 20, 20], [0, 1], [1, 2], [0, 0], [1, 1]), ([30, 40, 0], [0, 1], [1, 1], [1, 2], [2, 1])]
    args = [[*_i32(x, [0, 0, 0, 0], io, ss, oo, rs)] for x, io, ss, oo, rs in per]
    got = run(parse_module(text), args, platform)
    assert [g.tolist() for g in got] == [[1, 3, 0, 0], [2, 2, 4, 0], [10, 30, 0, 0], [20, 20, 40, 0]]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_jax_singleton_groups_example(platform):
    # a group of one: a dynamic-update-slice of a run-time size; the output operand's rows stay
    text = ragged_module("jax_single", ", num_partitions=2", "s32[4]{0}", "s32[4]{0}", "s32[1]{0}",
                         "replica_groups={{0},{1}}")
    args = [[*_i32([1, 0, 0, 0], [0, 0, 0, 0], [0], [1], [2], [1])],
            [*_i32([2, 3, 4, 0], [7, 7, 7, 7], [0], [3], [1], [3])]]
    got = run(parse_module(text), args, platform)
    assert [g.tolist() for g in got] == [[0, 0, 1, 0], [7, 2, 3, 4]]


# ---- an independent numpy model on 4 participants with random ragged sizes --------------------------------

def model(groups: list[list[int]], args: list, k: int) -> list[np.ndarray]:
    """XLA's definition, sender by sender: participant p's update u for group member q (entry
    q_rank * k + u) goes to q's output at q's row output_offsets[e]."""
    outs = [np.array(a[1], copy=True) for a in args]
    for g in groups:
        for p in g:
            data, _, io, ss, oo, _ = args[p]
            for q_rank, q in enumerate(g):
                for u in range(k):
                    e = q_rank * k + u
                    outs[q][oo[e]:oo[e] + ss[e]] = data[io[e]:io[e] + ss[e]]
    return outs


def random_case(groups: list[list[int]], k: int, in_rows: int, out_rows: int, row: tuple, seed: int,
                meta_dtype=np.int64, dtype=np.float32) -> list:
    """Per participant: (input, output, input_offsets, send_sizes, output_offsets, recv_sizes),
    with gaps between updates on both sides, the output operand random (kept where unwritten)."""
    rng = np.random.default_rng(seed)
    size = sum(len(g) for g in groups)
    args: list = [None] * size
    for g in groups:
        n = len(g)
        sizes = rng.integers(0, 3, size=(n, n, k))  # sizes[sender, receiver, update]
        io = np.zeros((n, n, k), np.int64)
        oo = np.zeros((n, n, k), np.int64)
        for s in range(n):  # the sender's input: its updates in (receiver, update) order, gaps between
            at = int(rng.integers(0, 2))
            for r in range(n):
                for u in range(k):
                    io[s, r, u] = at
                    at += sizes[s, r, u] + int(rng.integers(0, 2))
            assert at <= in_rows
        for r in range(n):  # the receiver's output: by (sender, update), gaps between
            at = int(rng.integers(0, 2))
            for s in range(n):
                for u in range(k):
                    oo[s, r, u] = at
                    at += sizes[s, r, u] + int(rng.integers(0, 2))
            assert at <= out_rows
        for rank, p in enumerate(g):
            data = rng.standard_normal((in_rows,) + row).astype(dtype)
            out = rng.standard_normal((out_rows,) + row).astype(dtype)
            meta = [io[rank].reshape(-1), sizes[rank].reshape(-1), oo[rank].reshape(-1),
                    sizes[:, rank].reshape(-1)]  # recv_sizes[s * k + u] = what s sends me
            args[p] = [data, out] + [m.astype(meta_dtype) for m in meta]
    return args


def equal_the_model(text: str, groups: list[list[int]], k: int, platform: str, args: list) -> list[np.ndarray]:
    """Run ``text`` on ``args`` and compare each participant with ``model`` bit for bit."""
    want = model(groups, args, k)
    got = run(parse_module(text), args, platform)
    for p, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"), err_msg=f"participant {p}")
    return got


FOUR = ragged_module("moe_dispatch", ", num_partitions=4", "f32[25,3]{1,0}", "f32[27,3]{1,0}", "s64[8]{0}",
                     "replica_groups={{0,1,2,3}}")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_four_participants_two_updates_each_equal_the_model(platform):
    args = random_case([[0, 1, 2, 3]], 2, 25, 27, (3,), seed=1)
    got = equal_the_model(FOUR, [[0, 1, 2, 3]], 2, platform, args)
    # rows nobody writes keep the output operand's values, and some rows were written
    assert any((got[k] == args[k][1]).all(axis=1).any() for k in range(4))
    assert all(not np.array_equal(got[k], args[k][1]) for k in range(4))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_cross_replica_groups_in_group_order(platform):
    # no channel id: replica ids; the groups {{3,1},{0,2}} rank 3 before 1
    text = ragged_module("replicas", ", replica_count=4", "bf16[19,2,2]{2,1,0}", "bf16[20,2,2]{2,1,0}",
                         "s32[6]{0}", "replica_groups={{3,1},{0,2}}", channel="")
    import ml_dtypes
    groups = [[3, 1], [0, 2]]
    args = random_case(groups, 3, 19, 20, (2, 2), seed=2, meta_dtype=np.int32, dtype=ml_dtypes.bfloat16)
    equal_the_model(text, groups, 3, platform, args)


ASYNC = """HloModule ragged_async, num_partitions=4

ENTRY main {
  input = f32[25,3]{1,0} parameter(0)
  output = f32[27,3]{1,0} parameter(1)
  input_offsets = s64[8]{0} parameter(2)
  send_sizes = s64[8]{0} parameter(3)
  output_offsets = s64[8]{0} parameter(4)
  recv_sizes = s64[8]{0} parameter(5)
  start = ((f32[25,3]{1,0}, f32[27,3]{1,0}, s64[8]{0}, s64[8]{0}, s64[8]{0}, s64[8]{0}), f32[27,3]{1,0}, s32[])
    ragged-all-to-all-start(input, output, input_offsets, send_sizes, output_offsets, recv_sizes), channel_id=1,
    replica_groups={{0,1,2,3}}
  ROOT done = f32[27,3]{1,0} ragged-all-to-all-done(start)
}
"""


@pytest.mark.parametrize("platform", PLATFORMS)
def test_async_sugar_runs_as_async_start(platform):
    equal_the_model(ASYNC, [[0, 1, 2, 3]], 2, platform, random_case([[0, 1, 2, 3]], 2, 25, 27, (3,), seed=3))


# ---- refusals: by name, with the values, never out of bounds ---------------------------------------

def _with(args: list, p: int, field: int, entry: int, value: int) -> list:
    args = [list(a) for a in args]
    args[p][field] = args[p][field].copy()
    args[p][field][entry] = value
    return args


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("field, entry, value, message", [
    (4, 2, 27, "to rows [27, "),            # participant 1's output offset for rank 1 beyond 27 rows
    (2, 3, -1, "rows [-1, "),                # a negative input offset
    (3, 2, 30, "send_sizes gives 30 rows but recv_sizes"),  # a size the receiver does not expect
])
def test_rows_out_of_range_or_mismatched_are_refused_with_the_values(platform, field, entry, value, message):
    groups = [[0, 1, 2, 3]]
    args = random_case(groups, 2, 25, 27, (3,), seed=4)
    if field != 3:  # the update non-empty (the receiver expecting it), so its rows are checked
        args[1][3][entry] = max(int(args[1][3][entry]), 1)
        args[entry // 2][5][1 * 2 + entry % 2] = args[1][3][entry]
    args = _with(args, 1, field, entry, value)
    with pytest.raises(HloUnsupportedError) as e:
        run(parse_module(FOUR), args, platform)
    text = str(e.value)
    assert "ragged-all-to-all '%ra2a' (line 10)" in text and message in text, text
    assert f"from group rank 1 to rank {entry // 2}" in text, text


def test_empty_updates_may_name_any_offset():
    # a size of 0 moves nothing: its offsets (often the end of the buffer) are not rows
    groups = [[0, 1, 2, 3]]
    args = random_case(groups, 2, 25, 27, (3,), seed=5)
    args[2][3][1] = 0
    args[0][5][2 * 2 + 1] = 0
    args = _with(_with(args, 2, 2, 1, 25), 2, 4, 1, 1000)
    for platform in PLATFORMS:
        equal_the_model(FOUR, groups, 2, platform, args)


@pytest.mark.parametrize("meta, why", [
    ("s32[2,2]{1,0}", "rank-2 offsets and sizes (s32[2,2]) are not supported"),
    ("f32[2]{0}", "must be integers, not f32[2]"),
])
def test_forms_we_do_not_run_are_refused_by_name(meta, why):
    text = ragged_module("bad_meta", ", num_partitions=2", "f32[4]{0}", "f32[4]{0}", meta)
    module = parse_module(text)
    world = world_of(module)
    zeros = [np.zeros(4, np.float32)] * 2 + [np.zeros(tuple(p.shape.dimensions), np.float32 if "f32" in meta
                                                        else np.int32) for p in module.entry.parameters[2:]]
    for platform in PLATFORMS:
        with pytest.raises(HloUnsupportedError, match=r"ragged-all-to-all '%ra2a' \(line 10\): .*" + why[:20]):
            run(module, [zeros] * world.size, platform)


def test_offsets_not_a_whole_number_per_member_are_refused():
    text = ragged_module("odd_meta", ", num_partitions=2", "f32[4]{0}", "f32[4]{0}", "s32[3]{0}")
    args = [[np.zeros(4, np.float32)] * 2 + [np.zeros(3, np.int32)] * 4] * 2
    for platform in PLATFORMS:
        with pytest.raises(HloUnsupportedError, match="its 3 offsets are no whole number per member of its group of 2"):
            run(parse_module(text), args, platform)


# ---- hlo-run on a module file ----------------------------------------------------------------------------

@pytest.mark.long
def test_hlo_run_on_four_partitions(tmp_path):
    groups = [[0, 1, 2, 3]]
    args = random_case(groups, 2, 25, 27, (3,), seed=6)
    path = tmp_path / "moe.hlo"
    path.write_text(FOUR)
    np.savez(tmp_path / "in.npz", **{f"p{k}.arg{i}": x for k in range(4) for i, x in enumerate(args[k])})
    res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.run", str(path), "--platform=host",
                          "--num-partitions", "4", "--input-literals", str(tmp_path / "in.npz"),
                          "--output-literals", str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "results of all 4 participants match the interpreter" in res.stdout + res.stderr, res.stderr
    got = np.load(tmp_path / "out.npz")
    for k, want in enumerate(model(groups, args, 2)):
        np.testing.assert_array_equal(got[f"p{k}.out0"], want)
    # random inputs make random offsets: refused at run time, exit 2, no traceback
    res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.run", str(path), "--platform=host"],
                         capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert "ragged-all-to-all '%ra2a' (line 10): update 0 from group rank 0 to rank 0" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# ---- XLA's own modules (its parser tests): 8 replicas, bf16[1024,256] --------------------------------------

@pytest.mark.parametrize("name, groups", [
    ("RaggedAllToAll", [list(range(8))]),                                     # replica_groups={}
    ("RaggedAllToAllWithReplicaGroups", [list(range(8))]),
    ("RaggedAllToAllWithCollectiveDeviceList", [[0, 2, 4, 6], [1, 3, 5, 7]]),  # [2,4]<=[4,2]T(1,0)
])
def test_xla_parser_modules_equal_the_model(corpus, name, groups):
    import ml_dtypes
    path = corpus / "xla" / "parser_tests" / f"roundtrip_short__{name}.hlo"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this corpus")
    k = 8 // len(groups[0])
    args = random_case(groups, k, 1024, 1024, (256,), seed=9, meta_dtype=np.int32, dtype=ml_dtypes.bfloat16)
    for platform in PLATFORMS:
        equal_the_model(path.read_text(), groups, k, platform, args)
