"""The command lines an XLA user already knows: run_hlo_module's and hlo-opt's spellings, XLA's
comparison rule, XLA's dump names, one error format, sizes refused before any allocation,
--version, standard input, the environment in --help, and the packaging facts behind them."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import hlo_compile
from hlo_compile import HloError
from hlo_compile.cli import common
from hlo_compile.cli.compile import main as compile_main
from hlo_compile.cli.run import main as run_main
from hlo_compile.runtime import literals
from hlo_compile.runtime.compare import compare_results
from hlo_compile.runtime.compare_xla import compare_results_xla

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "examples" / "gelu.hlo"
NEG = """HloModule neg
ENTRY e {
  x = f32[8] parameter(0)
  ROOT n = f32[8] negate(x)
}
"""
RNG = """HloModule r
ENTRY e {
  a = f32[] constant(0)
  b = f32[] constant(1)
  ROOT r = f32[4] rng(a, b), distribution=rng_uniform
}
"""
# one error format: a place, or the program's name
_ERROR_LINE = re.compile(r"^(\S+:\d+:\d+: error: |hlo-(run|compile): error: )")


def _invoke(cmd, *args, input=None, env=None):
    return CliRunner().invoke(cmd, [str(a) for a in args], input=input, env=env, catch_exceptions=False)


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "error" in line.lower() and ": error:" in line]


def _assert_one_format(output: str) -> None:
    lines = _error_lines(output)
    assert lines, output
    for line in lines:
        assert _ERROR_LINE.match(line), line
    assert "Traceback" not in output and "internal error" not in output


@pytest.fixture
def neg_file(tmp_path):
    path = tmp_path / "neg.hlo"
    path.write_text(NEG)
    return path


# ---- 1. run_hlo_module's flags as written -------------------------------------------------------

@pytest.mark.parametrize("spelling", ["Interpreter", "INTERPRETER", "interpreter"])
def test_platform_names_in_any_case(neg_file, spelling):
    r = _invoke(run_main, neg_file, f"--platform={spelling}", "--reference_platform=")
    assert r.exit_code == 0, r.output
    assert "ran on interpreter" in r.output


@pytest.mark.parametrize("spelling", ["CPU", "cpu", "Host"])
def test_cpu_is_the_host_platform(neg_file, spelling):
    r = _invoke(run_main, neg_file, f"--platform={spelling}", "--reference_platform=Interpreter")
    assert r.exit_code == 0, r.output
    assert "results match the interpreter reference" in r.output


@pytest.mark.parametrize("spelling", ["CUDA", "GPU", "gpu"])
def test_gpu_names_mean_cuda(neg_file, spelling):
    from hlo_compile.runtime.cuda import available
    if available()[0]:
        pytest.skip("a CUDA device is present: the GPU tests cover this platform")
    r = _invoke(run_main, neg_file, f"--platform={spelling}")
    assert r.exit_code == 2 and "platform 'cuda' is not available here" in r.output
    assert "Invalid value" not in r.output


def test_host_can_be_the_reference(neg_file):
    r = _invoke(run_main, neg_file, "--platform=interpreter", "--reference_platform=host")
    assert r.exit_code == 0, r.output
    assert "results match the host reference" in r.output


def test_reference_platform_empty_or_none_means_no_comparison(neg_file):
    for flag in ("--reference_platform=", "--reference=none", "--reference-platform=none"):
        r = _invoke(run_main, neg_file, "--platform=host", flag)
        assert r.exit_code == 0 and "not compared (no reference requested)" in r.output, (flag, r.output)
    r = _invoke(run_main, neg_file, "--platform=host", "--reference_platform=default")
    assert "results match the interpreter reference" in r.output


def test_unknown_platform_is_refused_with_the_names(neg_file):
    r = _invoke(run_main, neg_file, "--platform=tpu")
    assert r.exit_code == 2
    assert "interpreter|host|cuda" in r.output
    _assert_one_format(r.output)


def test_several_files_and_stdin(tmp_path, neg_file):
    other = tmp_path / "rng.hlo"
    other.write_text(RNG)
    r = _invoke(run_main, neg_file, "-", "--seed=1", "--output-literals", tmp_path / "o.npz", input=RNG)
    assert r.exit_code == 0, r.output
    assert f"== {neg_file}" in r.output and "== -" in r.output
    assert (tmp_path / "o.0.npz").exists() and (tmp_path / "o.1.npz").exists()
    assert np.load(tmp_path / "o.1.npz")["out0"].shape == (4,)
    # one bad file among good ones: the others still run, the status says it
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule b\nENTRY e {\n  ROOT x = f32[2] frobnicate()\n}\n")
    r = _invoke(run_main, neg_file, bad, other, "--seed=1")
    assert r.exit_code == 2
    assert r.output.count("ran on interpreter") == 2
    _assert_one_format(r.output)


def test_input_module_and_input_format(neg_file):
    r = _invoke(run_main, f"--input_module={neg_file}", "--input_format=hlo")
    assert r.exit_code == 0, r.output
    r = _invoke(run_main, neg_file, "--input_format=pb")
    assert r.exit_code == 2 and "only HLO text" in r.output
    _assert_one_format(r.output)


def test_print_literals_and_zero_inputs(neg_file):
    r = _invoke(run_main, neg_file, "--print_literals=true", "--random_init_input_literals=false")
    assert r.exit_code == 0, r.output
    arg = r.output[r.output.index("arg0"):r.output.index("out0")]
    assert "0." in arg and not re.search(r"[1-9]", arg.split("\n", 1)[1])
    r = _invoke(run_main, neg_file, "--print_literals=false")
    assert "arg0" not in r.output
    r = _invoke(run_main, neg_file, "--print_literals=maybe")
    assert r.exit_code == 2 and "true or false" in r.output


def test_iterations_draw_new_inputs(neg_file):
    r = _invoke(run_main, neg_file, "--iterations=2", "--print-literals", "--platform=host")
    assert r.exit_code == 0, r.output
    args = re.findall(r"arg0: float32\[8\]\n(\[[^\]]*\])", r.output)
    assert len(args) == 2 and args[0] != args[1]
    assert "0/2 runs miscompared" in r.output
    m = hlo_compile.parse_module(NEG)
    first = literals.random_inputs(m, 3)[0]
    np.testing.assert_array_equal(first, np.random.default_rng(3).uniform(-0.1, 0.2, 8).astype(np.float32))
    assert not np.array_equal(first, literals.random_inputs(m, 3, iteration=1)[0])


def test_different_random_seeds_changes_rng_ops(tmp_path):
    path = tmp_path / "rng.hlo"
    path.write_text(RNG)
    same = _invoke(run_main, path, "--seed=5", "--iterations=2", "--print-literals", "--reference=none")
    outs = re.findall(r"out0: float32\[4\]\n(\[[^\]]*\])", same.output)
    assert same.exit_code == 0 and len(outs) == 2 and outs[0] == outs[1]
    diff = _invoke(run_main, path, "--iterations=2", "--print_literals", "--different_random_seeds", "--reference=none")
    outs = re.findall(r"out0: float32\[4\]\n(\[[^\]]*\])", diff.output)
    assert diff.exit_code == 0 and len(outs) == 2 and outs[0] != outs[1]


def test_large_float_range_spans_the_exponents():
    m = hlo_compile.parse_module("HloModule m\nENTRY e {\n  ROOT x = f32[4096] parameter(0)\n}\n")
    small = literals.random_inputs(m, 0)[0]
    large = literals.random_inputs(m, 0, large_float_range=True)[0]
    assert small.min() >= -0.1 and small.max() <= 0.2
    finite = np.abs(large[np.isfinite(large)])
    assert finite.max() > 1e30 and finite[finite > 0].min() < 1e-30 and (large < 0).any()


def test_ignored_and_refused_xla_flags(neg_file):
    r = _invoke(run_main, neg_file, "--run_test_hlo_passes=false", "--xla_gpu_autotune_level=0")
    assert r.exit_code == 0, r.output
    assert "--run_test_hlo_passes=false is ignored" in r.output and "--xla_gpu_autotune_level=0 is ignored" in r.output
    r = _invoke(run_main, neg_file, "--force_fake_data")
    assert r.exit_code == 2 and "not supported" in r.output
    _assert_one_format(r.output)
    r = _invoke(run_main, neg_file, "--isolate_instructions=true")  # run_hlo_module's, honoured (isolate.py)
    assert r.exit_code == 0 and "instructions run one by one" in r.output, r.output


# ---- XLA's comparison rule ----------------------------------------------------------------------

def test_xla_rule_fails_only_when_both_bounds_are_exceeded():
    e = np.array([1000.0, 0.0, 1e-6, 1.0, np.nan, np.inf, 2.0], np.float32)
    a = np.array([1000.5, 5e-4, 3e-6, 1.002, np.nan, np.inf, np.nan], np.float32)
    c = compare_results_xla([e], [a]).leaves[0]
    # abs 0.5 but rel 5e-4: passes; e == 0 with abs 5e-4 <= 1e-3: passes; rel 2 but abs 2e-6:
    # passes; both exceeded (abs 2e-3, rel 2e-3): fails; NaN/NaN and inf/inf pass; NaN vs 2 fails
    assert c.mismatches == 2 and not c.ok
    assert {w[0] for w in c.worst} == {(3,), (6,)}
    # the allclose rule judges the same pairs differently (atol + rtol*|e| for f32)
    assert compare_results([e], [a]).leaves[0].mismatches != 2
    assert compare_results_xla([e[:4]], [a[:4]], abs_bound=0.01).ok


def test_xla_rule_on_the_command_line_says_which_rule(monkeypatch, neg_file):
    import hlo_compile.cli.run as run_mod
    real = run_mod._runner

    def skewed(platform, module, seed):
        run = real("interpreter", module, seed)
        return lambda args: run(args) * np.float32(1.002)  # rel error 2e-3 everywhere
    monkeypatch.setattr(run_mod, "_runner", skewed)
    monkeypatch.setattr(run_mod, "_is_own_reference", lambda platform, reference: False)
    r = _invoke(run_main, neg_file, "--error-rule=xla")
    # generated inputs are at most 0.2: abs errors stay below 1e-3, so XLA's rule passes
    assert r.exit_code == 0, r.output
    assert "rule xla: an element fails only when |a-e| > 0.001 and |a-e|/|e| > 0.001" in r.output
    r = _invoke(run_main, neg_file, "--error_rule=xla", "--abs_error_bound=0")
    assert r.exit_code == 1 and "exceed both abs bound 0 and rel bound 0.001" in r.output
    r = _invoke(run_main, neg_file)
    assert r.exit_code == 1 and "rule allclose" in r.output and "per-type defaults" in r.output


# ---- 2. hlo-opt's spellings ---------------------------------------------------------------------

def test_stage_aliases_match_emit():
    emitted = _invoke(compile_main, GELU, "--emit=llvm").output
    assert _invoke(compile_main, GELU, "--stage=llvm-before-optimizations").output == emitted
    assert _invoke(compile_main, GELU, "--stage=hlo-backend").output == _invoke(compile_main, GELU).output
    r = _invoke(compile_main, GELU, "--stage=html")
    assert r.exit_code == 2 and "not produced here" in r.output
    r = _invoke(compile_main, "--list-stages")
    assert r.exit_code == 0
    assert [line.split()[0] for line in r.output.splitlines()[:8]] == [
        "hlo", "fusions", "indexing", "indexing-json", "llvm", "llvm-opt", "ptx", "cubin"]
    assert "llvm-after-optimizations" in r.output


def test_passes_run_only_the_chosen_ones(tmp_path):
    path = tmp_path / "call.hlo"
    path.write_text("""HloModule c
callee {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = f32[4] call(x), to_apply=callee
}
""")
    r = _invoke(compile_main, path, "--passes=call-inliner")
    assert r.exit_code == 0, r.output
    assert "call(" not in r.output and "fusion(" not in r.output and "negate(" in r.output
    r = _invoke(compile_main, path, "--passes=inline-calls,fusion,wrap-fusions")
    assert "fusion(" in r.output
    r = _invoke(compile_main, path, "--passes=frobnicate")
    assert r.exit_code == 2 and "unknown pass 'frobnicate'" in r.output and "inline-calls" in r.output
    r = _invoke(compile_main, "--list-passes")
    assert r.exit_code == 0 and "inline-calls" in r.output and "fusion" in r.output
    r = _invoke(compile_main, path, "--passes=fusion", "--emit=ptx")
    assert r.exit_code == 2
    _assert_one_format(r.output)


def test_hlo_opt_output_and_platform_spellings(tmp_path):
    out = tmp_path / "o.txt"
    r = _invoke(compile_main, GELU, f"-o={out}", "--platform=GPU", "--format=hlo")
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("HloModule gelu")
    r = _invoke(compile_main, GELU, "--platform=cpu")
    assert r.exit_code == 2 and "hlo-run --platform=host" in r.output


# ---- 3. XLA's dump names ------------------------------------------------------------------------

def test_dump_uses_xla_names_with_a_ptx_file_per_kernel(tmp_path):
    from hlo_compile.targets.nvptx.toolkit import find_libdevice
    try:
        find_libdevice()
    except HloError:
        pytest.skip("libdevice not found: the PTX stages are skipped")
    out = tmp_path / "dump"
    r = _invoke(compile_main, GELU, "--dump-to", out)
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    for suffix in ("before_optimizations.txt", "sm_8.0_gpu_after_optimizations.txt", "ir-no-opt.ll",
                   "ir-with-opt.ll", "ptx", "fusions.txt", "summary.json"):
        assert f"module_0000.gelu.{suffix}" in names, suffix
    assert not any("indexing" in n for n in names)  # ours, large: only with --dump-indexing
    assert "module_0000.gelu.fusion.ptx" in names and "module_0000.gelu.fusion.ir-no-opt.ll" in names
    assert not any(n.endswith(".ptx.ptx") or n.endswith(".llvm.ll") for n in names)
    kernel_ptx = (out / "module_0000.gelu.fusion.ptx").read_text()
    assert ".entry fusion(" in kernel_ptx and ".version" in kernel_ptx
    assert json.loads((out / "summary.json").read_text())["module"] == "gelu"
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is not None:
        from hlo_compile.targets.nvptx.ptxas import run_ptxas
        assert run_ptxas(kernel_ptx, "sm_80").kernels.keys() == {"fusion"}


def test_dump_indexing_on_request(tmp_path):
    """--dump-indexing adds the indexing maps to the dump (=REGEX: of the instructions it
    finds); it needs a dump directory and a valid regex."""
    out = tmp_path / "all"
    r = _invoke(compile_main, "--dump-indexing", GELU, "--emit=fusions", "--dump-to", out, "--no-cache")
    assert r.exit_code == 0, r.output
    assert (out / "module_0000.gelu.indexing.txt").read_text() == _invoke(compile_main, GELU, "--emit=indexing").output
    assert json.loads((out / "module_0000.gelu.indexing.json").read_text())["instructions"]
    out = tmp_path / "none"
    r = _invoke(compile_main, GELU, "--emit=fusions", "--dump-to", out, "--no-cache", "--dump-indexing=^no_such_")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "module_0000.gelu.indexing.json").read_text()) == {"instructions": []}
    r = _invoke(compile_main, GELU, "--dump-indexing")
    assert r.exit_code == 2 and "needs --dump-to" in r.output
    r = _invoke(compile_main, GELU, "--dump-to", tmp_path / "bad", "--dump-indexing=(")
    assert r.exit_code == 2 and "not a regular expression" in r.output


def test_per_kernel_ptx_is_self_contained():
    from hlo_compile.driver.pipeline import split_ptx
    ptx = """//
.version 8.0
.target sm_80
.address_size 64

.extern .func (.param .b32 func_retval0) __nv_expf(.param .b32 x);
.shared .align 4 .b8 tile[128];
	// .globl	a
.visible .entry a(.param .u64 p)
{
	ld.param.u64 	%rd1, [p];
	ret;
}
	// .globl	b
.visible .entry b(.param .u64 p)
{
	{ .reg .b32 t; }
	ret;
}
"""
    parts = split_ptx(ptx, ["a", "b"])
    assert set(parts) == {"a", "b"}
    for name, text in parts.items():
        assert text.count(".entry") == 1 and f".entry {name}(" in text
        assert ".target sm_80" in text and "tile[128]" in text and "__nv_expf" in text


def test_kernel_named_like_a_module_file_collides_with_nothing(tmp_path):
    text = """HloModule module
fused {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}
fused2 {
  p = f32[4] parameter(0)
  ROOT n = f32[4] exponential(p)
}
ENTRY e {
  p = f32[4] parameter(0)
  module = f32[4] fusion(p), kind=kLoop, calls=fused
  ROOT ptx = f32[4] fusion(module), kind=kLoop, calls=fused2
}"""
    from hlo_compile.driver.pipeline import DumpWriter, run_pipeline
    from hlo_compile.options import CompileOptions
    out = tmp_path / "d"
    result = run_pipeline(hlo_compile.parse_module(text), CompileOptions(), dump_to=out)
    written = result.writer.written
    assert len(written) == len(set(written.values())) == len(list(out.iterdir())) - 1  # + summary.json
    assert "module_0000.module.ir-no-opt.ll" in written and "module_0000.module.module.ir-no-opt.ll" in written
    # the writer itself never overwrites: a second file of the same name gets -2
    w = DumpWriter(tmp_path / "w", "m")
    (tmp_path / "w").mkdir()
    a, b = w.write("ptx", "one", kernel="k"), w.write("ptx", "two", kernel="k")
    assert a != b and a.read_text() == "one" and b.name == "module_0000.m.k-2.ptx"


def test_split_input_file_dumps_numbered_modules(tmp_path):
    path = tmp_path / "two.hlo"
    path.write_text(NEG + "// -----\n" + NEG.replace("HloModule neg", "HloModule neg2"))
    out = tmp_path / "d"
    r = _invoke(compile_main, path, "--split-input-file", "--dump-to", out, "--emit=fusions")
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    assert "module_0000.neg.fusions.txt" in names and "module_0001.neg2.fusions.txt" in names
    summary = json.loads((out / "summary.json").read_text())
    assert [m["module"] for m in summary["modules"]] == ["neg", "neg2"]


def test_hlo_run_dumps_and_xla_flags_are_honoured(tmp_path, neg_file):
    out = tmp_path / "run-dump"
    r = _invoke(run_main, neg_file, "--platform=host", "--dump-to", out)
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    assert "module_0000.neg.before_optimizations.txt" in names and "module_0000.neg.ir-no-opt.ll" in names
    interp = tmp_path / "interp-dump"
    r = _invoke(run_main, neg_file, f"--xla_dump_to={interp}")
    assert r.exit_code == 0 and {p.name for p in interp.iterdir()} == {"module_0000.neg.before_optimizations.txt"}
    env_dump = tmp_path / "env-dump"
    r = _invoke(compile_main, neg_file, "--emit=fusions",
                env={"XLA_FLAGS": f"--xla_dump_hlo_as_text --xla_dump_to={env_dump}"})
    assert r.exit_code == 0 and "module_0000.neg.fusions.txt" in {p.name for p in env_dump.iterdir()}
    env_dump2 = tmp_path / "env-dump2"
    r = _invoke(run_main, neg_file, "--platform=host", env={"XLA_FLAGS": f"--xla_dump_to={env_dump2}"})
    assert r.exit_code == 0 and "module_0000.neg.ir-no-opt.ll" in {p.name for p in env_dump2.iterdir()}


def test_missing_ptxas_is_said_on_stderr(monkeypatch, tmp_path, neg_file):
    from hlo_compile.targets.nvptx import toolkit
    monkeypatch.setattr(toolkit, "find_ptxas", lambda: None)
    r = _invoke(compile_main, neg_file, "--dump-to", tmp_path / "d")
    assert r.exit_code == 0, r.output
    assert "hlo-compile: note: stage 'cubin' skipped: ptxas not found" in r.output
    assert "hlo-compile[ptxas]" in r.output


def test_missing_libdevice_names_the_extra(monkeypatch, tmp_path):
    from hlo_compile.targets.nvptx import libdevice, toolkit

    def missing():
        raise toolkit.ToolkitNotFound("libdevice (libdevice.10.bc) not found\nFix: " + toolkit.LIBDEVICE_EXTRA)
    monkeypatch.setattr(libdevice, "find_libdevice", missing)
    monkeypatch.setattr(libdevice, "_DEFAULT", libdevice.LibDeviceLinker())
    r = _invoke(compile_main, GELU, "--dump-to", tmp_path / "d")  # tanh needs libdevice
    assert r.exit_code == 0, r.output
    assert "stage 'ptx' skipped: libdevice not found (pip install 'hlo-compile[libdevice]'" in r.output
    r = _invoke(compile_main, GELU, "--emit=ptx")
    assert r.exit_code == 2 and "hlo-compile[libdevice]" in r.output
    _assert_one_format(r.output)


# ---- 4. sizes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dims, words", [
    ("1000000000000000000000000000000", "larger than XLA's limit"),
    ("4611686018427387904,4", "more than XLA's limit"),
])
def test_shapes_beyond_xla_limits_are_parse_errors(dims, words):
    text = f"HloModule m\nENTRY e {{\n  ROOT p = f32[{dims}] parameter(0)\n}}\n"
    for fast in (True, False):
        with pytest.raises(HloError, match=words) as info:
            hlo_compile.parse_module(text, "big.hlo", fast_path=fast)
        assert (info.value.line, info.value.column) == (3, 12)


def test_huge_constant_is_an_hlo_error_not_an_overflow():
    text = "HloModule m\nENTRY e {\n  ROOT c = f32[10000000000000000000000000] constant(0)\n}\n"
    with pytest.raises(HloError):
        hlo_compile.parse_module(text)
    text = "HloModule m\nENTRY e {\n  ROOT c = f32[100000000000] constant(0)\n}\n"
    from hlo_compile.hlo import parser
    original = parser.available_memory
    try:
        parser.available_memory = lambda: 1 << 30
        with pytest.raises(HloError, match="needs .* of memory"):
            hlo_compile.parse_module(text)
    finally:
        parser.available_memory = original


def test_hlo_run_refuses_before_allocating(monkeypatch, tmp_path):
    path = tmp_path / "big.hlo"
    path.write_text("HloModule big\nENTRY e {\n  p = f32[100000000000] parameter(0)\n  ROOT n = f32[100000000000] negate(p)\n}\n")
    from hlo_compile.runtime import memory_estimate
    monkeypatch.setattr(memory_estimate, "available_memory", lambda: 16 << 30)

    def never(*args, **kwargs):
        raise AssertionError("inputs were generated")
    monkeypatch.setattr(literals, "random_inputs", never)
    r = _invoke(run_main, path)
    assert r.exit_code == 2, r.output
    assert "needs about" in r.output and "inputs 372.5 GiB" in r.output and "16.0 GiB are available" in r.output
    _assert_one_format(r.output)


def test_memory_estimate_counts_inputs_and_the_values_live_together():
    from hlo_compile.runtime.memory_estimate import RunRequest, check_run, estimate_run, interpreter_live_peak
    m = hlo_compile.parse_module("""HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  p = f32[1000] parameter(0)
  b = f32[1000,10] broadcast(p), dimensions={0}
  z = f32[] constant(0)
  ROOT r = f32[1000] reduce(b, z), dimensions={1}, to_apply=add
}""")
    assert estimate_run(m, RunRequest(), generated_inputs=False).inputs == 4000
    assert interpreter_live_peak(m.entry) == 4000 + 40000  # p and b live together, b the largest
    with pytest.raises(HloError, match=r"m: the run needs about .*; 1000 B are available"):
        check_run(m, RunRequest(), generated_inputs=False, available=lambda: 1000)


# ---- 5. errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_75", "banana"])
def test_bad_arch_is_refused_before_reading_the_file(tmp_path, arch):
    r = _invoke(compile_main, tmp_path / "does-not-exist.hlo", f"--arch={arch}")
    assert r.exit_code == 2
    assert f"--arch={arch}: unsupported GPU architecture; supported: sm_80" in r.output
    assert "cannot read" not in r.output
    _assert_one_format(r.output)


def test_arch_from_the_environment_is_checked_too(neg_file):
    r = _invoke(compile_main, neg_file, env={"HLO_COMPILE_ARCH": "sm_70"})
    assert r.exit_code == 2 and "--arch=sm_70: unsupported" in r.output
    r = _invoke(compile_main, neg_file, "--emit=fusions", env={"HLO_COMPILE_ARCH": "SM_90"})
    assert r.exit_code == 0 and "sm_90" in r.output


def test_cubin_without_output_is_refused_before_any_work(tmp_path):
    r = _invoke(compile_main, tmp_path / "does-not-exist.hlo", "--emit=cubin")
    assert r.exit_code == 2 and "-o FILE" in r.output and "cannot read" not in r.output


def test_empty_binary_and_missing_inputs(tmp_path):
    empty = tmp_path / "empty.hlo"
    empty.write_text("\n// only a comment\n")
    binary = tmp_path / "m.pb"
    binary.write_bytes(b"\x08\x01\x12\x04main\xff\xfe\x00\x01")
    for cmd in (compile_main, run_main):
        r = _invoke(cmd, empty)
        assert r.exit_code == 2 and f"{empty}:1:1: error: empty input" in r.output
        assert "expected '('" not in r.output
        r = _invoke(cmd, binary)
        assert r.exit_code == 2 and f"{binary}:1:9: error: not UTF-8 text (byte 0xff)" in r.output
        assert "codec" not in r.output
        r = _invoke(cmd, tmp_path / "missing.hlo")
        assert r.exit_code == 2 and "cannot read" in r.output
        r = _invoke(cmd, tmp_path)
        assert r.exit_code == 2 and "is a directory" in r.output
        _assert_one_format(r.output)


def test_usage_errors_share_the_format(neg_file):
    for cmd, args in ((run_main, ["--frobnicate"]), (run_main, ["--iterations=0"]),
                      (compile_main, ["--frobnicate"]), (run_main, ["--abs-error-bound=-1"]),
                      (run_main, ["--use-cuda-graph"])):
        r = _invoke(cmd, neg_file, *args)
        assert r.exit_code == 2, (args, r.output)
        _assert_one_format(r.output)
        assert "Usage:" not in r.output


def test_parse_errors_keep_their_place(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  ROOT y = f32[2] frobnicate(f32[2] parameter(0))\n}\n")
    for cmd in (compile_main, run_main):
        r = _invoke(cmd, bad)
        assert r.exit_code == 2 and re.search(rf"^{re.escape(str(bad))}:3:\d+: error: ", r.output, re.M)
        _assert_one_format(r.output)


# ---- 6. --version, stdin, environment ------------------------------------------------------------

def test_version_and_help():
    for cmd, prog in ((compile_main, "hlo-compile"), (run_main, "hlo-run")):
        r = _invoke(cmd, "--version")
        assert r.exit_code == 0 and r.output.startswith(f"{prog} {hlo_compile.__version__} (") and "llvmlite" in r.output
        r = _invoke(cmd, "--help")
        assert r.exit_code == 0
        for name, _ in common.ENVIRONMENT:
            assert name in r.output, name


def test_compile_reads_standard_input():
    r = _invoke(compile_main, "-", "--emit=fusions", input=NEG)
    assert r.exit_code == 0 and "emitter: loop" in r.output
    r = _invoke(compile_main, "-", input="HloModule m\nENTRY e {\n  ROOT x = f32[2] negate(f32[2] y)\n}\n")
    assert r.exit_code == 2 and r.output.startswith("<stdin>:3:")


def test_readme_lists_every_environment_variable():
    readme = (ROOT / "README.md").read_text()
    for name, _ in common.ENVIRONMENT:
        for var in name.split(", "):
            assert f"`{var}`" in readme, var
    assert "docs/DESIGN.md" in readme and (ROOT / "docs" / "DESIGN.md").is_file()
    assert "../shared/DESIGN.md" not in readme


# ---- 7, 8. packaging and the test command ----------------------------------------------------------

def test_packaging_facts():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = project["project"]["dependencies"]
    assert "llvmlite>=0.48" in deps
    assert any(d.startswith("cuda-pathfinder") for d in deps)
    assert not any(d.startswith("nvidia-nvvm") for d in deps)
    extras = project["project"]["optional-dependencies"]
    for extra in ("libdevice", "cuda", "test"):
        assert any(d.startswith("nvidia-nvvm") for d in extras[extra]), extra
    assert "-rs" in project["tool"]["pytest"]["ini_options"]["addopts"].split()


def test_llvmlite_floor_is_checked(monkeypatch):
    monkeypatch.setattr(common, "_version", lambda dist: "0.47.0" if dist == "llvmlite" else None)
    with pytest.raises(common.UserError, match="llvmlite 0.47.0 is too old"):
        common.check_llvmlite()


def test_toolkit_asks_cuda_pathfinder_first(monkeypatch, tmp_path):
    from hlo_compile.targets.nvptx import toolkit
    fake = tmp_path / "libdevice.10.bc"
    fake.write_bytes(b"BC")
    for var in toolkit.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(toolkit, "pathfinder_lookup", lambda kind: (fake, "") if kind == "libdevice" else (None, "x"))
    assert toolkit.find_libdevice() == fake
    own = tmp_path / "own"
    (own / "nvvm" / "libdevice").mkdir(parents=True)
    (own / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    monkeypatch.setenv("HLO_COMPILE_CUDA_HOME", str(own))  # an explicit choice wins
    assert toolkit.find_libdevice() == own / "nvvm" / "libdevice" / "libdevice.10.bc"


def test_cuda_pathfinder_finds_what_the_wheels_hold():
    pytest.importorskip("cuda.pathfinder")
    from hlo_compile.targets.nvptx import toolkit
    found, note = toolkit.pathfinder_lookup("libdevice")
    if found is None:
        pytest.skip(f"no libdevice for cuda-pathfinder here: {note}")
    assert found.name == "libdevice.10.bc" and found.is_file()
    assert toolkit.find_libdevice() in (found, found.resolve())
