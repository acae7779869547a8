"""hlo-run at scale: inputs in their own type (chunked), the memory estimate and its refusal,
--timeout, --expected-literals, the verdict on stdout."""
from __future__ import annotations

import subprocess
import sys
import re
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import hlo_compile
from hlo_compile.cli import run_watch
from hlo_compile.cli.common import error_text
from hlo_compile.cli.run import main as run_main
from hlo_compile.hlo.errors import HloError
from hlo_compile.cli.run import main
from hlo_compile.runtime import literals, memory_estimate
from hlo_compile.runtime.memory_estimate import RunRequest, check_run, estimate_run, interpreter_live_peak

NEG = """HloModule neg
ENTRY e {
  p = f32[1000] parameter(0)
  ROOT n = f32[1000] negate(p)
}
"""

LOOP = """HloModule loop
cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(1000000000)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[64] negate(x)
  ROOT t = (s32[], f32[64]) tuple(j, y)
}
ENTRY e {
  x = f32[64] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[64]) tuple(z, x)
  w = (s32[], f32[64]) while(t), condition=cond, body=body
  ROOT r = f32[64] get-tuple-element(w), index=1
}
"""


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def neg_file(tmp_path):
    path = tmp_path / "neg.hlo"
    path.write_text(NEG)
    return path


# ---- 1. inputs in their own element type, chunked -------------------------------------------------

@pytest.mark.parametrize("etype,dtype", [("f32", np.float32), ("f16", np.float16), ("s8", np.int8),
                                         ("c64", np.complex64), ("pred", np.bool_)])
def test_random_inputs_have_the_parameter_type_and_range(etype, dtype, monkeypatch):
    monkeypatch.setattr(literals, "CHUNK_ELEMENTS", 1000)  # several chunks
    m = hlo_compile.parse_module(f"HloModule m\nENTRY e {{\n  ROOT p = {etype}[50,70] parameter(0)\n}}")
    a = literals.random_inputs(m, 1)[0]
    assert a.dtype == dtype and a.shape == (50, 70)
    if etype in ("f32", "f16"):
        assert a.min() >= np.asarray(-0.1, dtype) and a.max() <= np.asarray(0.2, dtype) and a.std() > 0.05
    if etype == "c64":
        assert a.real.min() >= -0.1 and a.imag.max() <= 0.2 and a.imag.std() > 0.05
    if etype == "s8":
        assert a.min() == -5 and a.max() == 5
    np.testing.assert_array_equal(a, literals.random_inputs(m, 1)[0])  # the same seed, the same values


def test_small_inputs_keep_the_values_of_one_whole_draw():
    m = hlo_compile.parse_module("HloModule m\nENTRY e {\n  ROOT p = f32[3,5] parameter(0)\n}")
    want = np.random.default_rng(4).uniform(-0.1, 0.2, size=(3, 5)).astype(np.float32)
    np.testing.assert_array_equal(literals.random_inputs(m, 4)[0], want)


def test_generating_a_big_input_takes_no_f64_copy():
    """64 Mi f32 elements (256 MiB): the process grows by about the array (the old f64 draw
    grew it by three times that)."""
    code = textwrap.dedent("""
        import resource, hlo_compile
        from hlo_compile.runtime import literals
        m = hlo_compile.parse_module("HloModule m\\nENTRY e {\\n  ROOT p = f32[67108864] parameter(0)\\n}")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        a = literals.random_inputs(m, 0)[0]
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(a.dtype, a.nbytes >> 20, grown >> 10)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["float32", "256"]
    assert int(out[2]) < 256 + 64, out  # MiB grown: the array and one chunk's draws


# ---- 2. the memory estimate ----------------------------------------------------------------------------

SIZED = """HloModule sized
ENTRY e {
  p = f32[1000] parameter(0)
  q = f32[1000] parameter(1)
  a = f32[1000] add(p, q)
  b = f32[1000,10] broadcast(a), dimensions={0}
  c = f32[1000,10] negate(b)
  ROOT t = (f32[1000,10], f32[1000]) tuple(c, a)
}
"""


def test_live_peak_of_a_module_of_known_sizes():
    m = hlo_compile.parse_module(SIZED)
    # at c: a 4000 (the tuple reads it) + b 40000 (read by c) + c 40000 (the tuple is no buffer)
    assert interpreter_live_peak(m.entry) == 84000


def test_live_peak_drops_values_after_their_last_use():
    lines = ["HloModule chain", "ENTRY e {", "  v0 = f32[1000] parameter(0)"]
    lines += [f"  v{i} = f32[1000] negate(v{i - 1})" for i in range(1, 30)]
    lines += ["  ROOT r = f32[1000] negate(v29)", "}"]
    m = hlo_compile.parse_module("\n".join(lines))
    assert interpreter_live_peak(m.entry) == 8000  # an operand and its result at a time


def test_estimate_counts_participants_reference_iterations():
    m = hlo_compile.parse_module(SIZED)
    one = estimate_run(m, RunRequest("interpreter", "none"), generated_inputs=False)
    assert one.inputs == 8000 and one.reference_work == 0
    assert one.total == 8000 + int(84000 * memory_estimate.INTERPRETER_FACTOR) + memory_estimate.INTERPRETER_OVERHEAD
    four = estimate_run(m, RunRequest("interpreter", "none", participants=4), generated_inputs=False)
    assert four.inputs == 32000 and four.platform_work == 4 * one.platform_work
    ref = estimate_run(m, RunRequest("cuda", "interpreter"), generated_inputs=False)
    assert ref.platform_work == 44000 and ref.outputs == 44000 and ref.reference_work == one.platform_work
    assert estimate_run(m, RunRequest("cuda", "interpreter", iterations=3), generated_inputs=False).total > ref.total


def test_parse_limit():
    assert memory_estimate.parse_limit("auto") == "auto" and memory_estimate.parse_limit("NONE") is None
    assert memory_estimate.parse_limit("16G") == 16 << 30 and memory_estimate.parse_limit("500MB") == 500 * 10**6
    assert memory_estimate.parse_limit("1234") == 1234
    with pytest.raises(ValueError):
        memory_estimate.parse_limit("lots")


def test_check_run_refuses_with_the_flags_that_help():
    m = hlo_compile.parse_module(SIZED)
    with pytest.raises(HloError, match=r"needs about .*; 1000 B are available \(MemAvailable\); try "
                                       r"--reference=none") as e:
        check_run(m, RunRequest("host", "interpreter"), available=lambda: 1000)
    # one line in hlo-run's error format (the CLI exits 2 on it: test_refusal_with_a_small_memory_limit)
    assert error_text("hlo-run", e.value).startswith(f"hlo-run: error: {m.name}: the run needs about ")
    assert "--memory-limit=none" in str(e.value) and "\n" not in str(e.value)
    assert check_run(m, RunRequest("host", "interpreter"), None).total > 0  # none: no check


def test_refusal_with_a_small_memory_limit(neg_file):
    r = _invoke(neg_file, "--memory-limit", "1K")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hlo-run: error: neg: the run needs about"), r.output
    assert "1.0 KiB is allowed (--memory-limit)" in r.output and "--memory-limit=none" in r.output
    assert _invoke(neg_file, "--memory-limit", "none").exit_code == 0
    assert _invoke(neg_file, "--memory-limit", "1G").exit_code == 0
    r = _invoke(neg_file, "--memory-limit", "plenty")
    assert r.exit_code == 2 and "--memory-limit: 'plenty' is not a size" in r.output


# ---- 3. --timeout ------------------------------------------------------------------------------------

def test_timeout_stops_a_long_loop_naming_the_phase(tmp_path):
    path = tmp_path / "loop.hlo"
    path.write_text(LOOP)
    # 3 s: parsing must be over before the alarm, even on a loaded machine (a 10^9-trip loop
    # is not)
    r = _invoke(path, "--timeout", "3")
    assert r.exit_code == run_watch.EXIT_TIMEOUT == 124, r.output
    assert "hlo-run: error: timed out after 3 s in phase 'run on interpreter' of loop (--timeout)" in r.output


def test_timeout_not_reached(neg_file):
    r = _invoke(neg_file, "--timeout", "60")
    assert r.exit_code == 0, r.output


# ---- 5. --expected-literals ----------------------------------------------------------------------

def test_expected_literals_match_and_mismatch(neg_file, tmp_path):
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    np.savez(tmp_path / "in.npz", arg0=x)
    np.savez(tmp_path / "good.npz", out0=-x)
    r = _invoke(neg_file, "--input-literals", tmp_path / "in.npz", "--expected-literals", tmp_path / "good.npz")
    assert r.exit_code == 0 and "results match the expected literals" in r.output, r.output
    bad = -x
    bad[7] += 1
    np.savez(tmp_path / "bad.npz", out0=bad)
    r = _invoke(neg_file, "--input-literals", tmp_path / "in.npz", "--expected-literals", tmp_path / "bad.npz",
                "--reference=none")
    assert r.exit_code == 1 and "results differ from the expected literals" in r.output, r.output


@pytest.mark.parametrize("stored,words", [
    ({"out0": np.zeros(1000, np.float32), "out1": np.zeros(3, np.float32)}, "has 2 outputs (out0, out1), the module has 1"),
    ({"out0": np.zeros(999, np.float32)}, "out0 is float32[999], the result is float32[1000]"),
    ({"out0": np.zeros(1000, np.int32)}, "out0 is int32[1000], the result is float32[1000]"),
])
def test_expected_literals_that_do_not_fit_exit_2(neg_file, tmp_path, stored, words):
    np.savez(tmp_path / "want.npz", **stored)
    r = _invoke(neg_file, "--expected-literals", tmp_path / "want.npz")
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if "error" in ln]
    assert len(errors) == 1 and words in errors[0], r.output
    r = _invoke(neg_file, "--expected-literals", tmp_path / "missing.npz")
    assert r.exit_code == 2 and "no such file" in r.output


# ---- 4. the verdict on stdout, the phase line ----------------------------------------------------------

def test_verdict_on_stdout(neg_file):
    p = subprocess.run([sys.executable, "-m", "hlo_compile.cli.run", str(neg_file), "--reference=none"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "neg: ran on interpreter, outputs float32[1000]; not compared" in p.stdout
    assert "not compared" in p.stderr  # and with the run's other lines


def test_phase_line_is_drawn_only_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(run_watch, "LIVE_AFTER_S", 0.0)
    quiet = run_watch.Phase(live=False)
    quiet.set("parse", "m")
    assert capsys.readouterr().err == ""
    live = run_watch.Phase(live=True)
    live.set("run on interpreter", "m")
    live.close()
    err = capsys.readouterr().err
    assert "hlo-run: m: run on interpreter, " in err and err.endswith("\r\033[K")


def test_phase_line_counts_kernels_while_compiling(neg_file, monkeypatch):
    """The compile phase names the pipeline's stage and the kernels done of all (issue 30)."""
    seen: list[str] = []
    real = run_watch.phase
    monkeypatch.setattr(run_watch, "phase", lambda name, module=None: (seen.append(name), real(name, module)))
    r = CliRunner().invoke(run_main, [str(neg_file), "--platform=host", "--reference=none"])
    assert r.exit_code == 0, r.output
    assert any(re.fullmatch(r"compile for host: \S+ \d+/\d+ kernels", s) for s in seen), seen
