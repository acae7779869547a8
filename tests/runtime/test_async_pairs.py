"""Async pairs, tokens, send/recv and RNG state on one device and on several: the host runtime
equals the interpreter, and the values are XLA's (start shapes, rng counter)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.collective_groups import world_of
from hlo_compile.interpreter import evaluate_module
from hlo_compile.interpreter.evaluator import evaluate_spmd
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.runtime.spmd_run import compile_spmd

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

wrapped {
  p0 = f32[8]{0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  m = f32[8]{0} multiply(p0, p1)
  ROOT n = f32[8]{0} negate(m)
}
"""

ONE_DEVICE = f"""HloModule m

{ADD}
ENTRY main {{
  x = f32[8]{{0}} parameter(0)
  y = f32[8]{{0}} parameter(1)
  cs = (f32[8]{{0:S(5)}}, f32[8]{{0}}, u32[]) copy-start(x)
  cd = f32[8]{{0:S(5)}} copy-done(cs)
  as = ((f32[8]{{0}}, f32[8]{{0}}), f32[8]{{0}}, s32[]) async-start(cd, y), calls=wrapped, async_execution_thread="side"
  au = ((f32[8]{{0}}, f32[8]{{0}}), f32[8]{{0}}, s32[]) async-update(as)
  ad = f32[8]{{0}} async-done(au)
  ar = f32[8]{{0}} all-reduce-start(ad), replica_groups={{}}, to_apply=add
  ard = f32[8]{{0}} all-reduce-done(ar)
  tu = (f32[8]{{0}}, f32[8]{{0}}) tuple(ard, x)
  ob = (f32[8]{{0}}, f32[8]{{0}}) opt-barrier(tu)
  ob0 = f32[8]{{0}} get-tuple-element(ob), index=0
  t = token[] after-all()
  st = u64[2] rng-get-and-update-state(), delta=7
  pid = u32[] partition-id()
  ROOT r = (f32[8]{{0}}, u64[2], u32[]) tuple(ob0, st, pid)
}}
"""


def _args():
    return [np.linspace(-1, 1, 8, dtype=np.float32), np.arange(8, dtype=np.float32)]


def test_one_device_async_forms_on_interpreter_and_host():
    module = parse_module(ONE_DEVICE)
    x, y = _args()
    want = -(x * y)
    got = evaluate_module(module, [x, y])
    np.testing.assert_allclose(got[0], want, rtol=1e-6)
    assert got[1].tolist() == [0x7012395, 0] and int(got[2]) == 0
    exe = compile_executable(module, "host")
    host = exe.run([x, y])
    np.testing.assert_allclose(host[0], want, rtol=1e-6)
    # the counter persists across runs of one executable, advanced by delta
    assert host[1].tolist() == [0x7012395, 0]
    assert exe.run([x, y])[1].tolist() == [0x7012395 + 7, 0]
    states: dict = {}
    evaluate_module(module, [x, y], rng_states=states)
    assert evaluate_module(module, [x, y], rng_states=states)[1].tolist() == [0x7012395 + 7, 0]


def test_rng_state_carries_into_the_high_word():
    text = "HloModule m\n\nENTRY e {\n  ROOT s = u64[2] rng-get-and-update-state(), delta=18446744073709551615\n}\n"
    module = parse_module(text)
    states: dict = {}
    first = evaluate_module(module, [], rng_states=states)
    second = evaluate_module(module, [], rng_states=states)
    assert first.tolist() == [0x7012395, 0]
    assert second.tolist() == [0x7012395 - 1, 1]
    exe = compile_executable(module, "host")
    assert [exe.run([]).tolist() for _ in range(2)] == [first.tolist(), second.tolist()]


PAIRS = 'frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,0}}"}'
SPMD = f"""HloModule m, replica_count=2, num_partitions=2

{ADD}
ENTRY main {{
  x = f32[8]{{0}} parameter(0)
  y = f32[8]{{0}} parameter(1)
  e = f32[8]{{0}} exponential(x)
  r = f32[8]{{0}} all-reduce(e), channel_id=1, replica_groups={{{{0,2}},{{1,3}}}}, use_global_device_ids=true,
    to_apply=add
  g = f32[16]{{0}} all-gather(r), replica_groups={{{{0,1}}}}, dimensions={{0}}
  gs = (f32[8]{{0}}, f32[16]{{0}}) all-gather-start(y), replica_groups={{{{0,1}}}}, dimensions={{0}}
  gd = f32[16]{{0}} all-gather-done(gs)
  pp = f32[8]{{0}} collective-permute(x), channel_id=2, source_target_pairs={{{{0,1}}}}
  ps = (f32[8]{{0}}, f32[8]{{0}}, u32[], u32[]) collective-permute-start(y), source_target_pairs={{{{1,0}}}}
  pd = f32[8]{{0}} collective-permute-done(ps)
  rs = f32[4]{{0}} reduce-scatter(x), channel_id=3, replica_groups={{{{0}},{{1}}}}, dimensions={{0}}, to_apply=add
  a2a = f32[8]{{0}} all-to-all(x), channel_id=5, replica_groups={{{{0,1}}}}, dimensions={{0}}
  cb = f32[8]{{0}} collective-broadcast(y), replica_groups={{{{1,0}}}}
  as = ((f32[8]{{0}}, f32[8]{{0}}), f32[8]{{0}}, s32[]) async-start(x, y), calls=wrapped
  ad = f32[8]{{0}} async-done(as)
  t = token[] after-all()
  sn = (f32[8]{{0}}, u32[], token[]) send(ad, t), channel_id=9, {PAIRS}
  rv = (f32[8]{{0}}, u32[], token[]) recv(t), channel_id=9, {PAIRS}
  rd = (f32[8]{{0}}, token[]) recv-done(rv), channel_id=9
  sd = token[] send-done(sn), channel_id=9
  got = f32[8]{{0}} get-tuple-element(rd), index=0
  p = u32[] partition-id()
  rid = u32[] replica-id()
  ROOT o = tuple(g, gd, pp, pd, rs, a2a, cb, got, p, rid)
}}
"""


def test_spmd_host_equals_interpreter_on_every_collective():
    module = parse_module(SPMD)
    world = world_of(module)
    rng = np.random.default_rng(3)
    args = [[rng.standard_normal(8).astype(np.float32) for _ in range(2)] for _ in range(world.size)]
    want = evaluate_spmd(module, lambda k: args[k], world)
    got = compile_spmd(module, "host", world)(args)
    for k in range(world.size):
        for w, g in zip(literals.flatten(want[k]), literals.flatten(got[k])):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"participant {k}")
    # partition 1 received partition 0's send (replica by replica)
    np.testing.assert_allclose(literals.flatten(got[1])[7], -(args[0][0] * args[0][1]), rtol=1e-6)
    assert [int(literals.flatten(g)[8]) for g in got] == [0, 1, 0, 1]
    assert [int(literals.flatten(g)[9]) for g in got] == [0, 0, 1, 1]


def test_hlo_run_spmd_literals_per_participant(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(SPMD)
    rng = np.random.default_rng(0)
    inputs = {"arg1": rng.standard_normal(8).astype(np.float32)}
    inputs.update({f"p{k}.arg0": np.full(8, k, np.float32) for k in range(4)})
    np.savez(tmp_path / "in.npz", **inputs)
    for platform in ("interpreter", "host"):
        out = tmp_path / f"{platform}.npz"
        res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.run", str(path), f"--platform={platform}",
                              "--input-literals", str(tmp_path / "in.npz"), "--output-literals", str(out)],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert "4 participants" in res.stderr
        with np.load(out) as f:
            assert sorted(k for k in f.files if k.startswith("p3.")) == [f"p3.out{j}" for j in range(10)]
            np.testing.assert_allclose(f["p1.out2"], np.zeros(8))  # permute {0,1}: partition 1 gets x of p0 = 0
            np.testing.assert_allclose(f["p3.out2"], np.full(8, 2.0))
            assert int(f["p2.out9"]) == 1


SUB = "sub {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] subtract(a, b)\n}\n"


@pytest.mark.parametrize("cli,flags", [("run", ["--platform=host"]), ("compile", ["--emit=llvm"]),
                                       ("compile", ["--emit=ptx"])])
@pytest.mark.parametrize("form", ["all-reduce", "all-reduce-start", "reduce-scatter-start"])
def test_unsupported_reduction_is_refused_by_name(tmp_path, cli, flags, form):
    """hlo-compile refuses what hlo-run refuses (runnable.check_runnable after fusion planning)."""
    path = tmp_path / "m.hlo"
    shape, extra = ("f32[4]{0}", ", dimensions={0}") if form.startswith("reduce-scatter") else ("f32[8]{0}", "")
    if form.endswith("-start"):
        shape = f"((f32[8]{{0}}), {shape}, s32[])" if form.startswith("reduce-scatter") else shape
    done = f"\n  ROOT d = {'f32[4]{0}' if 'scatter' in form else 'f32[8]{0}'} {form[:-6]}-done(r)" \
        if form.endswith("-start") else ""
    root = "" if done else "ROOT "
    path.write_text(f"HloModule m, num_partitions=2\n\n{SUB}\nENTRY e {{\n  x = f32[8]{{0}} parameter(0)\n"
                    f"  {root}r = {shape} {form}(x), channel_id=1, replica_groups={{{{0,1}}}}, "
                    f"use_global_device_ids=true{extra}, to_apply=sub{done}\n}}\n")
    res = subprocess.run([sys.executable, "-m", f"hlo_compile.cli.{cli}", str(path)] + flags,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    op = form[:-6] if "scatter" in form else form
    assert f"{op} '%" in res.stderr and "(line 11)" in res.stderr, res.stderr
    assert "reduction computation sub is not add" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# ---- the async sugar X-start/-update/-done (passes/async_wrapping.py) -----------------------------

GEMM_CONFIG = ('{"operation_queue_id":"0","wait_on_operation_queues":[],"gemm_backend_config":{"alpha_real":1.0,'
               '"alpha_imag":0.0,"beta":0.0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],'
               '"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},'
               '"precision_config":{"operand_precision":["DEFAULT","DEFAULT"],"algorithm":"ALG_UNSET"},'
               '"epilogue":"DEFAULT","grad_x":false,"grad_y":false,"damax_output":false,"selected_algorithm":"0"}}')

SUGAR = f"""HloModule async_sugar, entry_computation_layout={{(f32[16,8]{{1,0}}, f32[8,12]{{1,0}},
    s32[])->(f32[16,8]{{1,0}}, f32[16,8]{{1,0}}, f32[16,12]{{1,0}}, f32[32,8]{{1,0}})}}

%fused_computation (param_0: f32[16,8]) -> f32[16,8] {{
  %param_0 = f32[16,8]{{1,0}} parameter(0)
  %exponential.1 = f32[16,8]{{1,0}} exponential(f32[16,8]{{1,0}} %param_0)
  ROOT %multiply.1 = f32[16,8]{{1,0}} multiply(f32[16,8]{{1,0}} %exponential.1, f32[16,8]{{1,0}} %param_0)
}}

%callee (x: f32[16,8], y: f32[16,8]) -> f32[16,8] {{
  %x = f32[16,8]{{1,0}} parameter(0)
  %y = f32[16,8]{{1,0}} parameter(1)
  %sub = f32[16,8]{{1,0}} subtract(f32[16,8]{{1,0}} %x, f32[16,8]{{1,0}} %y)
  ROOT %tanh = f32[16,8]{{1,0}} tanh(f32[16,8]{{1,0}} %sub)
}}

ENTRY %main (p0: f32[16,8], p1: f32[8,12], i: s32[]) -> (f32[16,8], f32[16,8], f32[16,12], f32[32,8]) {{
  %p0 = f32[16,8]{{1,0}} parameter(0)
  %p1 = f32[8,12]{{1,0}} parameter(1)
  %i = s32[] parameter(2)
  %fusion-start = ((f32[16,8]{{1,0}}), f32[16,8]{{1,0}}, s32[]) fusion-start(f32[16,8]{{1,0}} %p0), kind=kLoop,
      calls=%fused_computation
  %fusion-done = f32[16,8]{{1,0}} fusion-done(((f32[16,8]{{1,0}}), f32[16,8]{{1,0}}, s32[]) %fusion-start)
  %call-start = ((f32[16,8]{{1,0}}, f32[16,8]{{1,0}}), f32[16,8]{{1,0}},
      s32[]) call-start(f32[16,8]{{1,0}} %fusion-done, f32[16,8]{{1,0}} %p0), to_apply=%callee,
      async_execution_thread="parallel_thread"
  %call-update = ((f32[16,8]{{1,0}}, f32[16,8]{{1,0}}), f32[16,8]{{1,0}}, s32[]) call-update(((f32[16,8]{{1,0}},
      f32[16,8]{{1,0}}), f32[16,8]{{1,0}}, s32[]) %call-start)
  %call-done = f32[16,8]{{1,0}} call-done(((f32[16,8]{{1,0}}, f32[16,8]{{1,0}}), f32[16,8]{{1,0}}, s32[]) %call-update)
  %cc-start = ((f32[16,8]{{1,0}}, f32[8,12]{{1,0}}), (f32[16,12]{{1,0}}, s8[1024]{{0}}),
      s32[]) custom-call-start(f32[16,8]{{1,0}} %call-done, f32[8,12]{{1,0}} %p1),
      custom_call_target="__cublas$lt$matmul", backend_config={GEMM_CONFIG}
  %cc-done = (f32[16,12]{{1,0}}, s8[1024]{{0}}) custom-call-done(((f32[16,8]{{1,0}}, f32[8,12]{{1,0}}),
      (f32[16,12]{{1,0}}, s8[1024]{{0}}), s32[]) %cc-start)
  %gemm = f32[16,12]{{1,0}} get-tuple-element((f32[16,12]{{1,0}}, s8[1024]{{0}}) %cc-done), index=0
  %c = f32[] constant(1.5)
  %big = f32[32,8]{{1,0}} broadcast(f32[] %c), dimensions={{}}
  %zero = s32[] constant(0)
  %dus-start = ((f32[32,8]{{1,0}}, f32[16,8]{{1,0}}, s32[], s32[]), f32[32,8]{{1,0}},
      s32[]) dynamic-update-slice-start(f32[32,8]{{1,0}} %big, f32[16,8]{{1,0}} %call-done, s32[] %i, s32[] %zero)
  %dus-done = f32[32,8]{{1,0}} dynamic-update-slice-done(((f32[32,8]{{1,0}}, f32[16,8]{{1,0}}, s32[], s32[]),
      f32[32,8]{{1,0}}, s32[]) %dus-start)
  ROOT %out = (f32[16,8]{{1,0}}, f32[16,8]{{1,0}}, f32[16,12]{{1,0}}, f32[32,8]{{1,0}}) tuple(%fusion-done,
      %call-done, %gemm, %dus-done)
}}
"""


def _sugar_args(index: int):
    rng = np.random.default_rng(7)
    return [rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, 12)).astype(np.float32),
            np.int32(index)]


def _assert_close(got, want, rtol=1e-5, atol=1e-5):
    got, want = literals.flatten(got), literals.flatten(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_sugar_forms_become_async_start_over_a_wrapped_computation():
    from hlo_compile.passes.async_wrapping import wrap_async_sugar
    module = wrap_async_sugar(parse_module(SUGAR))
    starts = [i for i in module.entry.instructions if i.opcode == "async-start"]
    assert [i.name for i in starts] == ["fusion-start", "call-start", "cc-start", "dus-start"]
    wrapped = [s.attr("calls").root for s in starts]
    assert [w.opcode for w in wrapped] == ["fusion", "call", "custom-call", "dynamic-update-slice"]
    # X keeps the start's attributes and location; the start keeps its thread and its shape
    assert wrapped[0].attr("calls").name == "fused_computation" and wrapped[0].attr("kind") == "kLoop"
    assert wrapped[2].attr("custom_call_target") == "__cublas$lt$matmul"
    assert wrapped[2].shape.to_text(False) == "(f32[16,12], s8[1024])"
    assert starts[1].attr("async_execution_thread") == "parallel_thread"
    assert not wrapped[1].has_attr("async_execution_thread")
    assert all(w.location.line == s.location.line for w, s in zip(wrapped, starts))
    assert starts[3].shape.tuple_shapes[1].to_text(False) == "f32[32,8]"
    ops = {i.opcode for i in module.entry.instructions}
    assert "async-update" in ops and "async-done" in ops and not any(o.endswith("-start") and o != "async-start"
                                                                     for o in ops)
    assert all(len(s.attr("calls").parameters) == len(s.operands) for s in starts)


def test_sugar_forms_on_host_equal_the_interpreter():
    module = parse_module(SUGAR)
    exe = compile_executable(module, "host")
    for index in (0, 9, 30):  # 30 is clamped to 16, as XLA's dynamic-update-slice
        args = _sugar_args(index)
        want = evaluate_module(module, args)
        _assert_close(exe.run(args), want)
    x = args[0]
    np.testing.assert_allclose(literals.flatten(want)[0], np.exp(x) * x, rtol=1e-6)
    np.testing.assert_allclose(literals.flatten(want)[1], np.tanh(np.exp(x) * x - x), rtol=1e-6)


def test_sugar_forms_through_hlo_run_and_hlo_compile(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(SUGAR)
    res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.run", str(path), "--platform=host"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.compile", str(path), "--passes=async-wrapping",
                          "--emit=hlo"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "async-start(" in res.stdout and "calls=%async_wrapped_fusion-start" in res.stdout, res.stdout
    assert "fusion-start(" not in res.stdout


LOOP_DUS = """HloModule loop_dus

while_cond {
  state = (s32[], f32[10,10], ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[])) parameter(0)
  n = s32[] get-tuple-element(state), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(n, three), direction=LT
}

while_body {
  state = (s32[], f32[10,10], ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[])) parameter(0)
  n = s32[] get-tuple-element(state), index=0
  async_state = ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[]) get-tuple-element(state), index=2
  async_update = ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[]) dynamic-update-slice-update(async_state)
  done = f32[10,10] dynamic-update-slice-done(async_update)
  slice = f32[2,2] constant({ {1, 2}, {3, 4} })
  one = s32[] constant(1)
  m = s32[] add(n, one)
  twice = s32[] add(m, m)
  next_start = ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[]) dynamic-update-slice-start(done, slice,
      twice, m)
  ROOT next_state = (s32[], f32[10,10], ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[])) tuple(m, done,
      next_start)
}

ENTRY Entry {
  p0 = f32[10,10] parameter(0)
  p1 = f32[2,2] parameter(1)
  idx0 = s32[] parameter(2)
  idx1 = s32[] parameter(3)
  zero = s32[] constant(0)
  async_start = ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[]) dynamic-update-slice-start(p0, p1, idx0, idx1)
  init = (s32[], f32[10,10], ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[])) tuple(zero, p0, async_start)
  loop = (s32[], f32[10,10], ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[])) while(init),
      condition=while_cond, body=while_body
  post_loop_async = ((f32[10,10], f32[2,2], s32[], s32[]), f32[10,10], s32[]) get-tuple-element(loop), index=2
  ROOT post_loop_done = f32[10,10] dynamic-update-slice-done(post_loop_async)
}
"""


def test_dynamic_update_slice_pair_crossing_a_loop():
    """XLA's LoopCrossingAsyncDynamicUpdateSliceSyntaxSugar, with a loop that ends: the start
    of one iteration is done in the next, and after the loop."""
    module = parse_module(LOOP_DUS)
    args = [np.zeros((10, 10), np.float32), np.full((2, 2), 7, np.float32), np.int32(4), np.int32(5)]
    want = evaluate_module(module, args)
    expected = np.zeros((10, 10), np.float32)
    expected[4:6, 5:7] = 7
    for m in (1, 2, 3):
        expected[2 * m:2 * m + 2, m:m + 2] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(want, expected)
    np.testing.assert_array_equal(compile_executable(module, "host").run(args), expected)


def test_late_binding_is_refused_by_name(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text("HloModule m\n\nENTRY main {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
                    "  s = ((), (), s32[]) call-start(), to_apply={\n    a = f32[] parameter(0)\n"
                    "    b = f32[] parameter(1)\n    ROOT add = f32[] add(a, b)\n  }\n"
                    "  u = ((f32[], f32[]), f32[], s32[]) call-update(s, p0, p1)\n  ROOT d = f32[] call-done(u)\n}\n")
    for cli in ("run", "compile"):
        res = subprocess.run([sys.executable, "-m", f"hlo_compile.cli.{cli}", str(path)] +
                             (["--platform=host"] if cli == "run" else ["--emit=llvm"]),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 2, res.stderr
        assert "call-update '%u' (line 11)" in res.stderr and "late binding" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


SPMD_SUGAR = f"""HloModule spmd_sugar, num_partitions=4

{ADD}
ENTRY main {{
  x = f32[8,4]{{1,0}} parameter(0)
  a2a-start = ((f32[8,4]{{1,0}}), f32[8,4]{{1,0}}, s32[]) all-to-all-start(x), channel_id=1,
      replica_groups={{{{0,1,2,3}}}}, dimensions={{0}}
  a2a-done = f32[8,4]{{1,0}} all-to-all-done(a2a-start)
  rs-start = ((f32[8,4]{{1,0}}), f32[4,4]{{1,0}}, s32[]) reduce-scatter-start(a2a-done), channel_id=2,
      replica_groups={{{{0,2}},{{1,3}}}}, use_global_device_ids=true, dimensions={{0}}, to_apply=add
  rs-done = f32[4,4]{{1,0}} reduce-scatter-done(rs-start)
  ROOT out = (f32[8,4]{{1,0}}, f32[4,4]{{1,0}}) tuple(a2a-done, rs-done)
}}
"""


def test_collective_sugar_on_host_equals_the_interpreter():
    module = parse_module(SPMD_SUGAR)
    world = world_of(module)
    assert world.size == 4
    args = [[np.arange(32, dtype=np.float32).reshape(8, 4) + 100 * k] for k in range(4)]
    want = evaluate_spmd(module, lambda k: args[k], world)
    got = compile_spmd(module, "host", world)(args)
    for k in range(4):
        _assert_close(got[k], want[k])
    # all-to-all: participant k's rows 2j..2j+1 come from participant j's rows 2k..2k+1
    a2a = [literals.flatten(w)[0] for w in want]
    np.testing.assert_array_equal(a2a[1][4:6], args[2][0][2:4])
    np.testing.assert_array_equal(literals.flatten(want[2])[1], (a2a[0] + a2a[2])[4:8])


# ---- rng-get-and-update-state against XLA:CPU (shared/tools/xla_ref.py) ----------------------------

from xla_reference import xla_ref_module  # noqa: E402

RNG_MODULE = """HloModule rng_state

ENTRY e {
  x = f32[4] parameter(0)
  s = u64[2] rng-get-and-update-state(), delta=7
  st2 = u64[2] rng-get-and-update-state(), delta=100
  philox = (u64[2], u32[8]) rng-bit-generator(s), algorithm=rng_philox
  bits = u32[8] get-tuple-element(philox), index=1
  next = u64[2] get-tuple-element(philox), index=0
  three = (u64[2], u32[2,3]) rng-bit-generator(st2), algorithm=rng_three_fry
  tbits = u32[2,3] get-tuple-element(three), index=1
  ROOT t = (u64[2], u64[2], u32[8], u64[2], u32[2,3], f32[4]) tuple(s, st2, bits, next, tbits, x)
}
"""


def _xla_ref():
    return xla_ref_module()


def test_rng_state_and_its_generators_agree_with_xla_cpu_over_runs():
    """What XLA:CPU does, recorded: each rng-get-and-update-state instruction has its own
    128-bit counter starting at 0x7012395, returned then advanced by its delta, persisting
    across executions of one loaded executable (a new executable starts again); the state
    feeds rng-bit-generator (Philox, ThreeFry) bit for bit. Interpreter and host agree on three
    consecutive runs."""
    ref = _xla_ref()
    if ref is None:
        pytest.skip("jax or shared/tools/xla_ref.py not available")
    import jax
    x = np.zeros(4, np.float32)
    first, exe = ref.run_hlo_text(RNG_MODULE, [x], return_exe=True)
    dev = jax.devices("cpu")[0]
    xla_runs = [first] + [[np.asarray(p[0]) for p in exe.execute_sharded([jax.device_put(x, dev)])
                           .disassemble_into_single_device_arrays()] for _ in range(2)]
    assert [r[0].tolist() for r in xla_runs] == [[0x7012395 + 7 * i, 0] for i in range(3)]
    assert [r[1].tolist() for r in xla_runs] == [[0x7012395 + 100 * i, 0] for i in range(3)]
    module = parse_module(RNG_MODULE)
    host = compile_executable(module, "host")
    states: dict = {}
    for i, want in enumerate(xla_runs):
        for got in (literals.flatten(evaluate_module(module, [x], rng_states=states)), literals.flatten(host.run([x]))):
            assert len(got) == len(want) == 6
            for j, (g, w) in enumerate(zip(got, want)):
                np.testing.assert_array_equal(g, w, err_msg=f"run {i}, output {j}")
    # a new executable starts the counters again, as XLA's
    assert literals.flatten(compile_executable(module, "host").run([x]))[0].tolist() == [0x7012395, 0]


def test_sugar_whose_wrapped_op_has_the_wrong_shape_is_a_verify_error(tmp_path):
    """dot-start(%l, %r) with no contracting dimensions is an outer product: its declared result
    f32[128,128] is wrong (XLA's desugaring parser test), refused at the start's line, not an
    internal error in the emitter (it was)."""
    from click.testing import CliRunner

    from hlo_compile.cli.compile import main
    path = tmp_path / "d.hlo"
    path.write_text("HloModule d\nENTRY main {\n  %lhs = f32[128,128] parameter(0)\n"
                    "  %rhs = f32[128,128] parameter(1)\n"
                    "  %dot-start = ((f32[128,128], f32[128,128]), f32[128,128], u32[]) dot-start(%lhs, %rhs)\n"
                    "  ROOT %result = f32[128,128] dot-done(%dot-start)\n}\n")
    r = CliRunner().invoke(main, [str(path), "--emit=ptx", "--no-cache"])
    assert r.exit_code == 2 and ":5:" in r.output and "inferred shape f32[128,128,128,128]" in r.output, r.output
    assert "Traceback" not in r.output and "internal" not in r.output
