"""hlo-run: exit codes 0/1/2, npz round trip, generated inputs, messages without tracebacks."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile.cli.run import main
from hlo_compile.runtime import compare, literals

MODULE = """HloModule m
ENTRY e {
  x = bf16[2,3] parameter(0)
  p = (f32[3], s32[]) parameter(1)
  a = f32[3] get-tuple-element(p), index=0
  c = f32[2,3] convert(x)
  b = f32[2,3] broadcast(a), dimensions={1}
  s = f32[2,3] add(c, b)
  i = s32[] get-tuple-element(p), index=1
  ROOT t = (f32[2,3], (s32[], bf16[2,3])) tuple(s, (s32[], bf16[2,3]) tuple(i, x))
}
"""


@pytest.fixture
def hlo_file(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(MODULE)
    return path


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_round_trip_npz(hlo_file, tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "in.npz", arg0=x, **{"arg1.0": np.array([1, 2, 3], np.float32), "arg1.1": np.int32(7)})
    assert np.load(tmp_path / "in.npz")["arg0"].dtype.kind == "V"  # stored as raw |V2
    r = _invoke(hlo_file, "--input-literals", tmp_path / "in.npz", "--output-literals", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    out = np.load(tmp_path / "out.npz")
    assert sorted(out.files) == ["out0", "out1", "out2"]
    np.testing.assert_array_equal(out["out0"], x.astype(np.float32) + np.array([1, 2, 3], np.float32))
    assert out["out1"] == 7
    np.testing.assert_array_equal(out["out2"].view(ml_dtypes.bfloat16), x)


def test_generated_inputs_and_print(hlo_file):
    r = _invoke(hlo_file, "--seed", "3", "--print-literals")
    assert r.exit_code == 0, r.output
    assert "arg0" in r.output and "out2" in r.output


def test_bad_inputs_exit_2(hlo_file, tmp_path):
    np.savez(tmp_path / "in.npz", arg0=np.zeros((2, 3), np.float32))
    r = _invoke(hlo_file, "--input-literals", tmp_path / "in.npz")
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = _invoke(tmp_path / "missing.hlo")
    assert r.exit_code == 2 and "cannot read" in r.output
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] frobnicate(x)\n}\n")
    r = _invoke(bad)
    assert r.exit_code == 2 and "Traceback" not in r.output and "error" in r.output


def test_host_platform_matches_interpreter(hlo_file):
    r = _invoke(hlo_file, "--platform=host")
    assert r.exit_code == 0, r.output
    assert "results match the interpreter reference" in r.output


def test_cuda_platform_without_gpu_is_a_clear_error(hlo_file):
    from hlo_compile.runtime.cuda import available
    if available()[0]:
        pytest.skip("a CUDA device is present: the GPU tests cover this platform")
    r = _invoke(hlo_file, "--platform=cuda")
    assert r.exit_code == 2 and "platform 'cuda' is not available here" in r.output
    assert "Traceback" not in r.output


def test_unsupported_feature_exit_2(tmp_path):
    path = tmp_path / "rng.hlo"
    path.write_text("""HloModule m
ENTRY e {
  a = f32[] constant(0)
  b = f32[] constant(1)
  ROOT r = f32[4] rng(a, b), distribution=rng_uniform
}""")
    r = _invoke(path, "--reference=none")
    assert r.exit_code == 2 and "seed" in r.output
    assert _invoke(path, "--seed", "1").exit_code == 0


def test_split_input_file(tmp_path):
    path = tmp_path / "two.hlo"
    path.write_text("""HloModule a
ENTRY e {
  x = f32[2] parameter(0)
  ROOT n = f32[2] negate(x)
}
// -----
HloModule b
ENTRY e {
  x = s32[3] parameter(0)
  ROOT n = s32[3] add(x, x)
}
""")
    r = _invoke(path, "--split-input-file", "--output-literals", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o.0.npz").exists() and (tmp_path / "o.1.npz").exists()


def test_compare_mismatch_report_and_nan_positions():
    e = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    a = np.array([1.0, np.nan, 3.5, 4.0], np.float32)
    c = compare.compare_results([e], [a])
    assert not c.ok
    rep = c.report()
    assert "(2,)" in rep and "histogram" in rep and "MISMATCH" in rep
    assert compare.compare_results([e], [e.copy()]).ok
    assert not compare.compare_results([e], [np.array([1, 2, 3, 4], np.float32)]).ok  # NaN moved
    assert not compare.compare_results([np.array([np.inf])], [np.array([-np.inf])]).ok
    assert not compare.compare_results([np.array([1, 2], np.int32)], [np.array([1, 3], np.int32)]).ok
    assert compare.default_tolerance(np.dtype(ml_dtypes.bfloat16), "elementwise") == (1.6e-2, 1e-2)


def test_mismatch_exit_1(monkeypatch, hlo_file):
    import hlo_compile.cli.run as run_mod
    real = run_mod._runner

    def skewed(platform, module, seed):
        run = real("interpreter", module, seed)

        def wrong(args):
            out = run(args)
            return ((out[0] + 1).astype(np.float32),) + out[1:]
        return wrong
    monkeypatch.setattr(run_mod, "_runner", skewed)
    # pretend the platform under test is another one so the reference runs
    r = CliRunner().invoke(main, [str(hlo_file), "--platform=interpreter", "--reference=interpreter"])
    assert r.exit_code == 0  # the interpreter is its own reference: nothing to compare
    monkeypatch.setattr(run_mod, "_is_own_reference", lambda platform, reference: False, raising=False)
    r = CliRunner().invoke(main, [str(hlo_file), "--platform=interpreter"])
    assert r.exit_code == 1, r.output
    assert "worst elements" in r.output


def test_random_inputs_index_operands_in_range():
    import hlo_compile
    m = hlo_compile.parse_module("""HloModule m
ENTRY e {
  x = f32[10,4] parameter(0)
  i = s32[3,1] parameter(1)
  ROOT g = f32[3,4] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}""")
    args = literals.random_inputs(m, seed=5)
    assert args[0].dtype == np.float32 and args[0].min() >= -0.1 and args[0].max() <= 0.2
    assert args[1].min() >= 0 and args[1].max() <= 9
