"""XLA's complex semantics at hand-picked points, on the host target and in the interpreter, and
the declared result types of the ops that move between complex and real values.

The expected values are XLA:CPU's answers (jax 0.10.2, ``shared/tools/xla_ref.py``, recorded
here so the test needs no jax): the signed zeros and special values its elemental formulas
give, which the textbook functions (numpy's C99 ones) do not. ``test_complex_codegen.py``
checks the whole corner grid host = interpreter; this file pins both to XLA's own numbers.

Result types follow XLA's shape inference: ``real``/``imag``/``abs`` of c64 are f32 (c128: f64),
``complex`` of two f32 is c64 (f64: c128); any other declared type is refused by the verifier
with exit status 2, naming the instruction and its line.
"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as compile_main
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime.executable import compile_executable

INF, NAN = float("inf"), float("nan")
EPS32 = float(np.finfo(np.float32).eps)

# op, operands (one list per operand), XLA:CPU's result as (re, im) pairs, or bools for compare
XLA_POINTS = [
    ("cosine", [[1 + 0j, complex(-0.0, 0.0)]], [(0.5403022766113281, 0.0), (1.0, -0.0)]),
    ("sign", [[complex(-0.0, 0.0), complex(0.0, -0.0), complex(INF, NAN)]], [(-0.0, 0.0), (0.0, -0.0), (NAN, NAN)]),
    ("exponential-minus-one", [[complex(-0.0, 0.0), 1e-20 + 0j]], [(0.0, 0.0), (9.999999682655225e-21, 0.0)]),
    ("tanh", [[complex(1e-5, 1), complex(INF, 2), complex(3, NAN)]],
     [(3.4255190257681534e-05, 1.5574077367782593), (1.0, -0.0), (NAN, NAN)]),
    ("tan", [[complex(0.5, 0.0), complex(2, INF)]], [(0.5463024973869324, 0.0), (-0.0, 1.0)]),
    ("logistic", [[0j, complex(-100, 0), complex(0, np.pi)]], [(0.5, 0.0), (0.0, 0.0), (0.0, -11438667.0)]),
    ("power", [[complex(1, 0), complex(2, 3), complex(INF, 0), complex(INF, 0), 0j, 0j],
               [complex(INF, 1), 0j, 2 + 0j, -2 + 0j, 0j, 2 + 0j]],
     [(1.0, 0.0), (1.0, 0.0), (INF, 0.0), (0.0, 0.0), (1.0, 0.0), (0.0, 0.0)]),
    ("atan2", [[1 + 0j, 0j, 1 + 1j], [1 + 0j, complex(-1, 0), 2 + 0j]],
     [(0.7853981852531433, 5.960464477539063e-08), (3.1415927410125732, 0.0),
      (0.5535743832588196, 0.4023594558238983)]),
    ("maximum", [[1 + 0j, complex(NAN, 0), 1 + 3j], [1 + 5j, 2 + 0j, 1 + 2j]], [(1.0, 0.0), (2.0, 0.0), (1.0, 3.0)]),
    ("minimum", [[1 + 0j, complex(NAN, 0), 1 + 3j], [1 + 5j, 2 + 0j, 1 + 2j]], [(1.0, 0.0), (2.0, 0.0), (1.0, 3.0)]),
    ("compare LE", [[1 + 5j, 2 + 0j, complex(NAN, 0)], [1 + 2j, 1 + 9j, 1 + 0j]], [True, False, False]),
    ("compare LT", [[1 + 1j, 1 + 5j, complex(1, NAN)], [1 + 2j, 1 + 2j, 1 + 2j]], [True, False, False]),
    ("compare GE", [[1 + 1j, 1 + 5j, complex(1, NAN)], [1 + 2j, 1 + 2j, 1 + 2j]], [True, True, True]),
]


def _module(op: str, n: int, arity: int) -> str:
    opcode, _, direction = op.partition(" ")
    rt = "pred" if opcode == "compare" else "c64"
    params = "".join(f"  p{i} = c64[{n}] parameter({i})\n" for i in range(arity))
    args = ", ".join(f"p{i}" for i in range(arity))
    extra = f", direction={direction}" if direction else ""
    return f"HloModule m\n\nENTRY main {{\n{params}  ROOT r = {rt}[{n}] {opcode}({args}){extra}\n}}\n"


def _same_as_xla(got: np.ndarray, want: list) -> list[str]:
    """Mismatches: NaN positions, zero signs, infinities exactly; finite parts within 4 ulps of max(|w|, 1)."""
    bad = []
    for i, (g, w) in enumerate(zip(got.tolist(), want)):
        if isinstance(w, bool):
            if g != w:
                bad.append(f"{i}: {g} != {w}")
            continue
        for part, gp, wp in (("re", g.real, w[0]), ("im", g.imag, w[1])):
            if np.isnan(wp) or np.isnan(gp):
                ok = np.isnan(wp) and np.isnan(gp)
            elif wp == 0 or np.isinf(wp):
                ok = gp == wp and np.signbit(gp) == np.signbit(wp)
            else:
                ok = abs(gp - wp) <= 4 * EPS32 * max(abs(w[0]) if np.isfinite(w[0]) else 0, abs(w[1]), 1.0)
            if not ok:
                bad.append(f"{i} {part}: got {gp!r}, XLA {wp!r}")
    return bad


@pytest.mark.parametrize("where", ["host", "interpreter"])
@pytest.mark.parametrize("op,operands,want", XLA_POINTS, ids=[p[0] for p in XLA_POINTS])
def test_xla_answers_at_corner_points(op, operands, want, where):
    args = [np.array(v, np.complex64) for v in operands]
    module = parse_module(_module(op, args[0].size, len(args)))
    with np.errstate(all="ignore"):
        if where == "host":
            got = compile_executable(module, "host").run(args)
            got = got[0] if isinstance(got, (list, tuple)) else got
        else:
            got = evaluate_module(module, args)
    bad = _same_as_xla(np.asarray(got), want)
    assert not bad, (op, where, bad)


# ---- declared result types ------------------------------------------------------------------------

WRONG_TYPES = [  # the root's body, XLA's inferred shape
    ("c64[4] real(a)", "f32[4]"),
    ("c64[4] imag(a)", "f32[4]"),
    ("c64[4] abs(a)", "f32[4]"),
    ("f64[4] real(a)", "f32[4]"),
    ("f32[4] imag(w)", "f64[4]"),
    ("f32[4] abs(w)", "f64[4]"),
    ("c128[4] complex(f, f)", "c64[4]"),
    ("f32[4] complex(f, f)", "c64[4]"),
    ("c64[4] complex(d, d)", "c128[4]"),
    ("c64[4] real(f)", "f32[4]"),
]
RIGHT_TYPES = ["f32[4] real(a)", "f32[4] imag(a)", "f32[4] abs(a)", "f64[4] real(w)", "f64[4] abs(w)",
               "c64[4] complex(f, f)", "c128[4] complex(d, d)"]


def _types_module(root: str) -> str:
    return ("HloModule m\n\nENTRY main {\n  a = c64[4] parameter(0)\n  w = c128[4] parameter(1)\n"
            f"  f = f32[4] parameter(2)\n  d = f64[4] parameter(3)\n  ROOT r = {root}\n}}\n")


@pytest.mark.parametrize("root,inferred", WRONG_TYPES)
def test_wrong_declared_result_type_is_refused(root, inferred, tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(_types_module(root))
    r = CliRunner().invoke(compile_main, [str(path), "--emit=hlo"], catch_exceptions=False)
    opcode = root.split()[1].split("(")[0]
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "m.hlo:8:" in r.output and f"r ({opcode})" in r.output, r.output     # instruction and its line
    assert f"declared shape {root.split()[0]}" in r.output and f"inferred shape {inferred}" in r.output


@pytest.mark.parametrize("root", RIGHT_TYPES)
def test_xla_result_types_are_accepted(root, tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(_types_module(root))
    r = CliRunner().invoke(compile_main, [str(path), "--emit=hlo"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
