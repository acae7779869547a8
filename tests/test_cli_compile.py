"""hlo-compile's command line: stages to stdout or a file, the binary cubin stage, XLA's bare
fusion test files (--as-fusion), errors as messages with exit status 2."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_compile.cli.compile import main as compile_main
from hlo_compile.cli.run import main as run_main

ROOT = Path(__file__).resolve().parents[1]
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
    from hlo_compile.targets.toolkit import find_ptxas
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
    path.write_text("HloModule m\nENTRY e {\n  p = c64[4] parameter(0)\n  ROOT n = c64[4] negate(p)\n}\n")
    r = _invoke(compile_main, path, "--emit=llvm")
    assert r.exit_code == 2 and "c64" in r.output and "Traceback" not in r.output
    r = _invoke(run_main, path, "--platform=host")
    assert r.exit_code == 2 and "c64" in r.output and "Traceback" not in r.output
