"""Progress and timing on stderr (issue 17): a live line (stage, kernels done/total, elapsed)
only when stderr is a terminal and the compile has run for a second, cleared before the final
stage-times line; nothing live when stderr is a file or pipe; -q silences both."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_compile.cli import compile as compile_cli

REPO = Path(__file__).resolve().parents[2]
GELU = REPO / "examples" / "gelu.hlo"
LIVE = "\r\033[K"


def _module(n: int) -> str:
    comps, body = [], ["  %v0 = f32[16,8] parameter(0)"]
    for i in range(n):
        comps.append(f"%f{i} (p: f32[16,8]) -> f32[16,8] {{\n  %p = f32[16,8] parameter(0)\n"
                     f"  %c = f32[] constant({i + 1}.5)\n  %b = f32[16,8] broadcast(%c), dimensions={{}}\n"
                     f"  ROOT %m = f32[16,8] multiply(%p, %b)\n}}\n")
        root = "ROOT " if i == n - 1 else ""
        body.append(f"  {root}%v{i + 1} = f32[16,8] fusion(%v{i}), kind=kLoop, calls=%f{i}")
    return ("HloModule chain\n\n" + "\n".join(comps) + "\nENTRY %main (x: f32[16,8]) -> f32[16,8] {\n"
            + "\n".join(body) + "\n}\n")


@pytest.fixture
def always_timed(monkeypatch):
    """Every compile counts as a long one (the threshold is a second of wall clock)."""
    monkeypatch.setattr(compile_cli, "TIMING_THRESHOLD_S", 0.0)
    monkeypatch.setattr(compile_cli.Progress, "INTERVAL_S", 0.0)


def _run(args, tmp_path):
    src = tmp_path / "chain.hlo"
    src.write_text(_module(3))
    return CliRunner().invoke(compile_cli.main, [str(src), *args, "--cache-dir", str(tmp_path / "c")])


def test_no_live_line_when_stderr_is_not_a_terminal(always_timed, tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cli, "stderr_is_tty", lambda: False)
    r = _run(["--emit=llvm"], tmp_path)
    assert r.exit_code == 0, r.output
    assert LIVE not in r.stderr and "\r" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hlo-compile: chain: ")
    assert "3 kernels for 3 fusions" in lines[0] and "llvm " in lines[0] and "fusions " in lines[0]


def test_live_line_on_a_terminal_shows_stage_and_kernels_then_clears(always_timed, tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cli, "stderr_is_tty", lambda: True)
    r = _run(["--emit=llvm"], tmp_path)
    assert r.exit_code == 0, r.output
    live, _, final = r.stderr.rpartition(LIVE)  # the last clear comes before the timing line
    assert "hlo-compile: chain: llvm 3/3 kernels, " in live
    assert "hlo-compile: chain: fusions" in live and "hlo-compile: chain: hlo" in live
    for n in (1, 2):
        assert f"llvm {n}/3 kernels" in live
    assert final.startswith("hlo-compile: chain: ") and "kernels for 3 fusions" in final
    assert LIVE not in final and final.count("\n") == 1


def test_quiet_prints_neither(always_timed, tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cli, "stderr_is_tty", lambda: True)
    r = _run(["--emit=llvm", "-q"], tmp_path)
    assert r.exit_code == 0 and r.stderr == ""


def test_short_compiles_print_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cli, "stderr_is_tty", lambda: True)
    r = _run(["--emit=fusions"], tmp_path)  # well under a second
    assert r.exit_code == 0 and r.stderr == ""
