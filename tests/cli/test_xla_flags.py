"""XLA's --xla_* flags: honoured (--xla_disable_hlo_passes, --xla_enable_hlo_passes_only,
--xla_dump_hlo_pass_re, --xla_dump_to), accepted with a note when they cannot change what runs
here (``common.XLA_OBSERVATIONAL_FLAGS``), refused (exit 2, one line) otherwise: on the command
line and in XLA_FLAGS, for hlo-compile and hlo-run."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.cli import common
from hlo_compile.cli.compile import main as compile_main
from hlo_compile.cli.pass_list import all_passes
from hlo_compile.cli.run import main as run_main
from hlo_compile.options import CompileOptions
from hlo_compile.passes import REQUIRED_PASSES, PassContext, pass_steps, run_passes

# add and negate: our fusion pass makes them one fusion; without it each is wrapped alone
NEG = """HloModule neg
ENTRY e {
  x = f32[8] parameter(0)
  a = f32[8] add(x, x)
  ROOT n = f32[8] negate(a)
}
"""


def _invoke(cmd, *args, env=None):
    env = {"XLA_FLAGS": "", **(env or {})}
    return CliRunner().invoke(cmd, [str(a) for a in args], env=env, catch_exceptions=False)


def _one_error_line(output: str, prog: str) -> str:
    lines = [line for line in output.splitlines() if ": error:" in line]
    assert len(lines) == 1, output
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in output, output
    return lines[0]


def _fusions(text: str) -> int:
    return len(re.findall(r"= \S+ fusion\(", text))


@pytest.fixture
def neg_file(tmp_path):
    path = tmp_path / "neg.hlo"
    path.write_text(NEG)
    return path


# ---- refused: exit 2, one line ----------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--xla_gpu_enable_priority_fusion=false", "--xla_backend_optimization_level=0",
                                  "--xla_disable_all_hlo_passes", "--xla_gpu_deterministic_ops=true"])
@pytest.mark.parametrize("cmd,prog", [(compile_main, "hlo-compile"), (run_main, "hlo-run")])
def test_unknown_xla_flags_are_refused(neg_file, flag, cmd, prog):
    r = _invoke(cmd, neg_file, flag, "--no-cache" if cmd is compile_main else "--platform=interpreter")
    assert r.exit_code == 2, r.output
    line = _one_error_line(r.output, prog)
    assert flag.split("=")[0] in line and "may change what XLA compiles or runs and is not supported here" in line


def test_refusal_names_what_to_use_instead(neg_file):
    r = _invoke(compile_main, neg_file, "--xla_gpu_enable_priority_fusion=false")
    assert "--no-fusion" in _one_error_line(r.output, "hlo-compile")
    r = _invoke(compile_main, neg_file, "--xla_dump_hlo_as_pretty_graphs")  # not a known dump flag: refused
    assert r.exit_code == 2 and "--dump-to" in _one_error_line(r.output, "hlo-compile")


@pytest.mark.parametrize("flag", ["--xla_gpu_ptx_file=foo.ptx", "--xla_gpu_llvm_ir_file=foo.ll"])
def test_ptx_and_llvm_ir_files_are_honoured_never_ignored(neg_file, flag):
    # honoured (tests/driver/test_overrides.py); a file that cannot be read is refused before any work
    assert flag[2:].split("=")[0] in common.XLA_HONOURED
    for cmd, prog in ((compile_main, "hlo-compile"), (run_main, "hlo-run")):
        r = _invoke(cmd, neg_file, flag, "--platform=cuda" if cmd is run_main else "--emit=ptx")
        assert r.exit_code == 2, r.output
        line = _one_error_line(r.output, prog)
        assert "foo." in line and "cannot read" in line and "ignored" not in line


def test_debug_options_file_is_refused(neg_file):
    for cmd, prog in ((compile_main, "hlo-compile"), (run_main, "hlo-run")):
        r = _invoke(cmd, neg_file, "--debug_options_file=opts.txt")
        assert r.exit_code == 2 and "--debug_options_file" in _one_error_line(r.output, prog)


# ---- observational: accepted with a note --------------------------------------------------------

@pytest.mark.parametrize("flag", ["--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto", "--xla_dump_include_timestamp",
                                  "--xla_dump_hlo_module_re=.*", "--xla_gpu_autotune_level=0",
                                  "--xla_gpu_enable_latency_hiding_scheduler=true", "--xla_hlo_profile"])
def test_observational_flags_are_accepted_with_a_note(neg_file, flag):
    r = _invoke(compile_main, neg_file, flag, "--no-cache")
    assert r.exit_code == 0, r.output
    notes = [line for line in r.output.splitlines() if line.startswith("hlo-compile: note:")]
    assert len(notes) == 1 and flag in notes[0] and "cannot change what runs here" in notes[0]
    reason = common.XLA_OBSERVATIONAL_FLAGS[flag[2:].split("=")[0]]
    assert reason in notes[0]
    r = _invoke(run_main, neg_file, flag)
    assert r.exit_code == 0 and "ran on interpreter" in r.output, r.output


def test_the_observational_table_is_one_table_of_xla_flags():
    assert all(k.startswith("xla_") and v for k, v in common.XLA_OBSERVATIONAL_FLAGS.items())
    honoured = {"xla_dump_to", *common.XLA_HONOURED, *common.XLA_NOT_YET}
    assert not honoured & common.XLA_OBSERVATIONAL_FLAGS.keys()


# ---- XLA_FLAGS --------------------------------------------------------------------------------

def test_xla_flags_are_read_the_same_way(neg_file, tmp_path):
    r = _invoke(run_main, neg_file, env={"XLA_FLAGS": "--xla_gpu_enable_priority_fusion=false"})
    assert r.exit_code == 2
    line = _one_error_line(r.output, "hlo-run")
    assert "--xla_gpu_enable_priority_fusion (from XLA_FLAGS)" in line
    r = _invoke(compile_main, neg_file, "--no-cache", env={"XLA_FLAGS": "--xla_gpu_autotune_level=2"})
    assert r.exit_code == 0 and "--xla_gpu_autotune_level=2 (from XLA_FLAGS) is ignored" in r.output
    r = _invoke(compile_main, neg_file, "--no-cache", env={"XLA_FLAGS": "--xla_disable_hlo_passes=fusion"})
    assert r.exit_code == 0 and _fusions(r.output) == 2, r.output
    r = _invoke(compile_main, neg_file, env={"XLA_FLAGS": "--xla_disable_hlo_passes=no-such-pass"})
    assert r.exit_code == 2 and "unknown pass 'no-such-pass'" in _one_error_line(r.output, "hlo-compile")
    # --xla_dump_to keeps working, with a dump flag beside it
    dump = tmp_path / "d"
    r = _invoke(compile_main, neg_file, "--no-cache", "--emit=fusions",
                env={"XLA_FLAGS": f"--xla_dump_hlo_as_text --xla_dump_to={dump}"})
    assert r.exit_code == 0 and "module_0000.neg.fusions.txt" in {p.name for p in dump.iterdir()}


# ---- --xla_disable_hlo_passes / --xla_enable_hlo_passes_only -------------------------------------

def test_disabling_fusion_changes_the_module(neg_file):
    fused = _invoke(compile_main, neg_file, "--no-cache")
    assert fused.exit_code == 0 and _fusions(fused.output) == 1, fused.output
    for flags in (["--xla_disable_hlo_passes=fusion"], ["--disable-passes", "fusion"]):
        r = _invoke(compile_main, neg_file, "--no-cache", "--emit=hlo", *flags)
        assert r.exit_code == 0 and _fusions(r.output) == 2, r.output
        assert "fused_a" in r.output and "fused_n" in r.output  # each op wrapped alone, nothing fused
    assert _invoke(compile_main, neg_file, "--no-cache", "--no-fusion").output == r.output
    everything = ",".join(p.name for p in all_passes() if p.name != "fusion")
    r = _invoke(compile_main, neg_file, "--no-cache", f"--xla_enable_hlo_passes_only={everything}")
    assert r.exit_code == 0 and _fusions(r.output) == 2, r.output
    r = _invoke(compile_main, neg_file, "--no-cache", f"--xla_enable_hlo_passes_only={everything},fusion")
    assert r.exit_code == 0 and r.output == fused.output


def test_hlo_run_with_fusion_disabled_still_matches_the_interpreter(neg_file, tmp_path):
    r = _invoke(run_main, neg_file, "--platform=host", "--xla_disable_hlo_passes=fusion",
                "--dump-to", tmp_path / "d")
    assert r.exit_code == 0 and "results match the interpreter reference" in r.output, r.output
    fusions = (tmp_path / "d" / "module_0000.neg.fusions.txt").read_text()
    assert "2 kernel(s)" in fusions  # add and negate, each its own kernel
    r = _invoke(run_main, neg_file, "--platform=host", env={"XLA_FLAGS": "--xla_disable_hlo_passes=fusion"})
    assert r.exit_code == 0 and "results match" in r.output, r.output


def test_unknown_and_required_pass_names(neg_file):
    for cmd, prog in ((compile_main, "hlo-compile"), (run_main, "hlo-run")):
        r = _invoke(cmd, neg_file, "--xla_disable_hlo_passes=algsimp")
        line = _one_error_line(r.output, prog)
        assert r.exit_code == 2 and "unknown pass 'algsimp'" in line and "fusion" in line and "inline-calls" in line
        r = _invoke(cmd, neg_file, "--xla_disable_hlo_passes=call-inliner")  # XLA's name of inline-calls
        line = _one_error_line(r.output, prog)
        assert r.exit_code == 2 and "'inline-calls' cannot be skipped" in line
        assert REQUIRED_PASSES["inline-calls"] in line
        r = _invoke(cmd, neg_file, "--xla_enable_hlo_passes_only=fusion")
        line = _one_error_line(r.output, prog)
        assert r.exit_code == 2 and "missing: async-wrapping" in line
        r = _invoke(cmd, neg_file, "--xla_disable_hlo_passes")
        assert r.exit_code == 2 and "takes a value" in _one_error_line(r.output, prog)


def test_pass_names_agree_and_skips_enter_cache_keys():
    steps = [p.name for p in pass_steps(PassContext(arch="sm_80"))]
    assert steps == [p.name for p in all_passes()] and len(set(steps)) == len(steps)
    assert [p.name for p in pass_steps(PassContext(fusion=False))] == \
        [n for n in steps if n not in ("fusion", "tree-reduction")]  # no arch: no tree-reduction split
    assert set(REQUIRED_PASSES) == set(steps) - {"fusion"}
    assert "skip_passes=('fusion',)" in repr(CompileOptions(skip_passes=("fusion",)))
    with pytest.raises(ValueError):
        run_passes(parse_module(NEG), skip={"wrap-fusions"})


def test_skipped_fusion_is_not_served_from_the_cache(neg_file, tmp_path):
    cache = tmp_path / "cache"
    fused = _invoke(compile_main, neg_file, "--cache-dir", cache)
    unfused = _invoke(compile_main, neg_file, "--cache-dir", cache, "--xla_disable_hlo_passes=fusion")
    assert _fusions(fused.output) == 1 and _fusions(unfused.output) == 2


# ---- --xla_dump_hlo_pass_re --------------------------------------------------------------------

def test_dump_hlo_pass_re_writes_xla_per_pass_files(neg_file, tmp_path):
    dump = tmp_path / "d"
    r = _invoke(compile_main, neg_file, "--no-cache", f"--xla_dump_to={dump}", "--xla_dump_hlo_pass_re=^fusion$")
    assert r.exit_code == 0, r.output
    per_pass = sorted(p.name for p in dump.iterdir() if ".passes." in p.name)
    assert per_pass == ["module_0000.neg.0000.passes.after_tree-reduction.before_fusion.txt",
                        "module_0000.neg.0001.passes.after_fusion.before_wrap-fusions.txt"]
    before, after = (dump / name for name in per_pass)
    assert _fusions(before.read_text()) == 0 and _fusions(after.read_text()) == 1
    # every pass, from XLA_FLAGS, for hlo-run; skipped passes are not in the names
    dump2 = tmp_path / "d2"
    r = _invoke(run_main, neg_file, "--platform=host",
                env={"XLA_FLAGS": f"--xla_dump_to={dump2} --xla_dump_hlo_pass_re=.* --xla_disable_hlo_passes=fusion"})
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in dump2.iterdir() if ".passes." in p.name)
    assert len(names) == len(all_passes()) and "after_fusion" not in " ".join(names)
    assert names[0] == "module_0000.neg.0000.passes.after_pipeline-start.before_async-wrapping.txt"
    assert names[-1].endswith("after_prepare-control-flow.before_pipeline-end.txt")


def test_dump_hlo_pass_re_needs_a_dump_directory_and_a_regex(neg_file, tmp_path):
    r = _invoke(compile_main, neg_file, "--xla_dump_hlo_pass_re=.*")
    assert r.exit_code == 2 and "needs a dump directory" in _one_error_line(r.output, "hlo-compile")
    r = _invoke(run_main, neg_file, "--xla_dump_hlo_pass_re=(", "--dump-to", tmp_path / "d")
    assert r.exit_code == 2 and "not a regular expression" in _one_error_line(r.output, "hlo-run")
