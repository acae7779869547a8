"""``HLO_COMPILE_TRACEBACK=1``: an internal error of hlo-compile or hlo-run is re-raised with its
traceback instead of folded into the one ``unexpected failure ... this is a bug`` line."""
from __future__ import annotations

import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_compile.cli import compile as compile_cli
from hlo_compile.cli import run as run_cli

GELU = Path(__file__).resolve().parents[2] / "examples" / "gelu.hlo"


class _Internal(ValueError):
    """An exception no input should cause (a ValueError: one of the kinds the CLIs fold)."""


def _broken(*args, **kwargs):
    raise _Internal("boom inside the compiler")


def _invoke(cmd, *args):
    return CliRunner().invoke(cmd, [str(a) for a in args], catch_exceptions=True)


@pytest.mark.parametrize("tool", ["hlo-compile", "hlo-run"])
def test_internal_error_is_one_line_by_default_and_re_raised_on_request(monkeypatch, tool):
    if tool == "hlo-compile":
        monkeypatch.setattr(compile_cli, "_main", _broken)
        cmd, args = compile_cli.main, [GELU, "--no-cache"]
    else:
        monkeypatch.setattr(run_cli, "_run_one", _broken)
        cmd, args = run_cli.main, [GELU, "--platform=interpreter"]

    monkeypatch.delenv("HLO_COMPILE_TRACEBACK", raising=False)
    r = _invoke(cmd, *args)
    assert r.exit_code == 2, r.output
    assert "unexpected failure (_Internal: boom inside the compiler)" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)

    monkeypatch.setenv("HLO_COMPILE_TRACEBACK", "0")  # off, as when unset
    assert _invoke(cmd, *args).exit_code == 2

    monkeypatch.setenv("HLO_COMPILE_TRACEBACK", "1")
    r = _invoke(cmd, *args)
    assert isinstance(r.exception, _Internal), (r.exit_code, r.output)
    assert "unexpected failure" not in r.output
    assert any(frame.name == "_broken" for frame in traceback.extract_tb(r.exc_info[2]))
