"""hlo-compile's command line: stages to stdout or a file, the binary cubin stage, XLA's bare
fusion test files (--as-fusion), errors as messages with exit status 2; the one driver loop both
tools build through: the same dump from hlo-run as from hlo-compile, each stage run once, frozen
options."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_compile.cli.compile import main as compile_main
from hlo_compile.cli.run import main as run_main

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "examples" / "gelu.hlo"
BARE = """fused {
  p0 = f32[64,96] parameter(0)
  t = f32[96,64] transpose(p0), dimensions={1,0}
  ROOT e = f32[96,64] exponential(t)
}
"""


def _invoke(cmd, *args):
    return CliRunner().invoke(cmd, [str(a) for a in args], catch_exceptions=False)


def test_cubin_needs_an_output_file(tmp_path):
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    r = _invoke(compile_main, GELU, "--emit=cubin")
    assert r.exit_code == 2 and "-o FILE" in r.output
    out = tmp_path / "gelu.cubin"
    r = _invoke(compile_main, GELU, "--emit=cubin", "-o", out)
    assert r.exit_code == 0 and out.read_bytes()[:4] == b"\x7fELF"


def test_short_form_prints_the_module_after_passes():
    r = _invoke(compile_main, GELU, "--short")
    assert r.exit_code == 0 and "fusion(" in r.output and "f32[1024,1024]{1,0} %" not in r.output


def test_as_fusion_compiles_a_bare_fused_computation(tmp_path):
    path = tmp_path / "bare.hlo"
    path.write_text(BARE)
    r = _invoke(compile_main, path, "--as-fusion", "--emit=fusions")
    assert r.exit_code == 0 and r.output.count("-> kernel") == 1 and "emitter: transpose" in r.output
    r = _invoke(compile_main, path, "--emit=fusions")  # as a module: its two ops fused again
    assert r.exit_code == 0 and r.output.count("-> kernel") == 1 and "emitter: transpose" in r.output
    r = _invoke(compile_main, path, "--emit=fusions", "--no-fusion")  # one kernel per instruction
    assert r.exit_code == 0 and r.output.count("-> kernel") == 2
    r = _invoke(run_main, path, "--as-fusion", "--platform=host")
    assert r.exit_code == 0 and "results match" in r.output


def test_unsupported_element_type_is_exit_2_without_traceback(tmp_path):
    path = tmp_path / "c.hlo"
    # 4-bit floats (MX formats) have no code generation yet (c64, used here before, now has)
    path.write_text("HloModule m\nENTRY e {\n  p = f4e2m1fn[4] parameter(0)\n  ROOT n = f4e2m1fn[4] negate(p)\n}\n")
    r = _invoke(compile_main, path, "--emit=llvm")
    assert r.exit_code == 2 and "f4e2m1fn" in r.output and "Traceback" not in r.output
    r = _invoke(run_main, path, "--platform=host")
    assert r.exit_code == 2 and "f4e2m1fn" in r.output and "Traceback" not in r.output


# ---- the one driver loop ------------------------------------------------------------------------

def _dump(directory: Path) -> tuple[dict[str, bytes], dict]:
    """(every file but the summaries, summary.json without its timings)."""
    files = {p.name: p.read_bytes() for p in directory.iterdir() if not p.name.endswith("summary.json")}
    summary = json.loads((directory / "summary.json").read_text())
    summary.pop("stage_seconds")
    for k in summary["kernels"]:
        assert set(k.pop("stage_seconds")) == {"llvm"}
    return files, summary


@pytest.mark.parametrize("example", ["gelu.hlo", "tiled_layout.hlo"])
def test_hlo_run_dumps_what_hlo_compile_dumps(tmp_path, example):
    path = ROOT / "examples" / example
    r = _invoke(compile_main, path, "--dump-to", tmp_path / "compile")
    assert r.exit_code == 0, r.output
    r = _invoke(run_main, path, "--platform=host", "--dump-to", tmp_path / "run")
    assert r.exit_code == 0 and "results match" in r.output, r.output
    compiled, compiled_summary = _dump(tmp_path / "compile")
    ran, ran_summary = _dump(tmp_path / "run")
    assert sorted(ran) == sorted(compiled) and ran == compiled
    assert ran_summary == compiled_summary
    assert any(n.endswith(".ir-no-opt.ll") for n in ran)


def _count_calls(monkeypatch, module, names: list[str], calls: Counter) -> None:
    for name in names:
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("tool", ["hlo-compile", "hlo-run"])
def test_each_stage_runs_once(monkeypatch, tmp_path, tool):
    from hlo_compile.driver import stages
    from hlo_compile.codegen import compiler
    from hlo_compile.runtime import host_platform
    calls: Counter = Counter()
    _count_calls(monkeypatch, compiler, ["run_passes"], calls)
    _count_calls(monkeypatch, stages, ["plan_prepared_module", "compile_to_ptx", "run_ptxas"], calls)
    _count_calls(monkeypatch, host_platform, ["compile_host_kernel"], calls)
    if tool == "hlo-compile":
        r = _invoke(compile_main, GELU, "--dump-to", tmp_path / "d")
    else:
        r = _invoke(run_main, GELU, "--platform=host", "--dump-to", tmp_path / "d")
    assert r.exit_code == 0, r.output
    assert calls["run_passes"] == calls["plan_prepared_module"] == calls["compile_to_ptx"] == 1, calls
    assert calls["run_ptxas"] <= 1 and calls["compile_host_kernel"] == (tool == "hlo-run"), calls


def test_a_stage_only_the_dump_needs_cannot_fail_a_run(monkeypatch, tmp_path):
    from hlo_compile.driver import stages
    from hlo_compile.codegen.errors import CodegenError

    def broken(*args, **kwargs):
        raise CodegenError("LLVM could not parse the module: boom")
    monkeypatch.setattr(stages, "compile_to_ptx", broken)
    r = _invoke(run_main, GELU, "--platform=host", "--dump-to", tmp_path / "run")
    assert r.exit_code == 0 and "results match" in r.output, r.output
    assert "the dump of gelu is incomplete: stage 'llvm-opt': LLVM could not parse the module: boom" in r.output
    assert "stage 'ptx' skipped: stage 'llvm-opt' failed" in r.output
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert "module_0000.gelu.ir-no-opt.ll" in names and "module_0000.gelu.ptx" not in names
    r = _invoke(compile_main, GELU, "--dump-to", tmp_path / "compile")  # there, the dump is the product
    assert r.exit_code == 2 and "boom" in r.output


def test_compile_options_are_frozen_and_hashable():
    from hlo_compile.options import CompileOptions
    a, b = CompileOptions(arch="sm_90"), CompileOptions(arch="sm_90")
    assert a == b and hash(a) == hash(b) and len({a, b, CompileOptions()}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.arch = "sm_80"  # type: ignore[misc]
    assert dataclasses.replace(a, fusion=False) != a and a.fusion


def test_a_platform_gives_its_own_options_to_the_pipeline():
    from hlo_compile import parse_module
    from hlo_compile.options import CompileOptions
    from hlo_compile.runtime.executable import compile_executable
    from hlo_compile.runtime.host_platform import HostPlatform

    class Sm90Host(HostPlatform):
        def compile_options(self, options):
            return dataclasses.replace(options, arch="sm_90")

    asked = CompileOptions(dot_tensor_cores=True)
    exe = compile_executable(parse_module(GELU.read_text()), Sm90Host(), asked)
    assert exe.pipeline.options == dataclasses.replace(asked, arch="sm_90") and asked.arch == "sm_80"
    assert exe.plan.device.arch == "sm_90" and set(exe.kernels) == {k.fusion.name for k in exe.plan.kernels}
    assert {"hlo", "fusions", "programs", "kernels"} <= set(exe.pipeline.module_seconds)


def test_module_without_kernels_gives_valid_ptx_and_cubin(tmp_path):
    """A module that launches nothing (a tuple of its parameters; an fft or a library call alone)
    still has a module PTX with its header, which ptxas assembles (the per-kernel merge once gave
    an empty text: 'Missing .version directive')."""
    from hlo_compile.targets.nvptx import toolkit
    path = tmp_path / "t.hlo"
    path.write_text("HloModule t\nENTRY e {\n  a = f32[4] parameter(0)\n  b = f32[2] parameter(1)\n"
                    "  ROOT t = (f32[4], f32[2]) tuple(a, b)\n}\n")
    r = _invoke(compile_main, path, "--emit=ptx")
    assert r.exit_code == 0 and ".version" in r.output and ".target sm_80" in r.output, r.output
    if toolkit.find_ptxas() is None:
        return  # the PTX checks above still ran
    r = _invoke(compile_main, path, "--dump-to", str(tmp_path / "d"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "d" / "module_0000.t.cubin").stat().st_size > 0
