"""Async pairs, tokens, send/recv and RNG state on one device and on several: the host runtime
equals the interpreter, and the values are XLA's (start shapes, rng counter)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

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


def test_unsupported_reduction_is_refused_by_name(tmp_path):
    path = tmp_path / "m.hlo"
    sub = "sub {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] subtract(a, b)\n}\n"
    path.write_text(f"HloModule m, num_partitions=2\n\n{sub}\nENTRY e {{\n  x = f32[8]{{0}} parameter(0)\n"
                    "  ROOT r = f32[8]{0} all-reduce(x), channel_id=1, replica_groups={{0,1}}, "
                    "use_global_device_ids=true, to_apply=sub\n}\n")
    res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.run", str(path), "--platform=host"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "all-reduce '%r'" in res.stderr and "reduction computation" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
