"""Compile cost of fusions whose pads would copy their operands once per branch arm
(codegen/elemental/fused_emitter.py, ``branch_arms_explode``; issues 28 item 4, 29 item 8).

``lax.associative_scan`` fuses, level after level, ``add(pad(x, interior), pad(mul(w, x),
interior))``: both pads read ``x``, and pad reads its operand inside a branch arm, where nothing
the other arm emitted is visible. In a reduction kernel (emitted inline) every level doubled
the copies: XLA:GPU's lax_associative_scan_ssm module (a 24-element scan in a pad+reduce
fusion of 86 instructions) emitted 14,000 instructions, 30,000 lines of LLVM IR, and took
33-69 s to a cubin. Such fusions now select between operands read at clamped indices, which
both pads compute the same way (``floor(i/step) - floor(low/step)``), so ``x`` is emitted once
per element. These tests bound the emitted IR (no timings) and check the values.
"""
from __future__ import annotations

import re

from hlo_compile import parse_module
from hlo_compile.codegen.elemental.fused_emitter import branch_arms_explode
from tests.codegen_helpers import emit_stage, run_on_host


def scan_reduce(levels: int) -> str:
    """A reduce fusion with an associative-scan-like side output of ``2**levels`` elements:
    x_{i+1} = pad(x_i, 1_0_1) + pad(x_i * w_i, 0_1_1), each level reading x_i through two pads."""
    n = 2 ** levels
    lines = ["HloModule scan", "add {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
             "  ROOT s = f32[] add(a, b)", "}", "fused {",
             f"  p0 = f32[{n}] parameter(0)", f"  p1 = f32[{n}] parameter(1)", "  z = f32[] constant(0)",
             "  r = f32[] reduce(p0, z), dimensions={0}, to_apply=add",
             "  x0 = f32[1] slice(p1), slice={[0:1]}"]
    for i in range(levels):
        s = 2 ** i
        lines += [f"  e{i} = f32[{2 * s}] pad(x{i}, z), padding=1_0_1",
                  f"  w{i} = f32[{s}] slice(p1), slice={{[{s}:{2 * s}]}}",
                  f"  m{i} = f32[{s}] multiply(x{i}, w{i})",
                  f"  o{i} = f32[{2 * s}] pad(m{i}, z), padding=0_1_1",
                  f"  x{i + 1} = f32[{2 * s}] add(e{i}, o{i})"]
    lines += [f"  ROOT t = (f32[], f32[{n}]) tuple(r, x{levels})", "}", "ENTRY e {",
              f"  a = f32[{n}] parameter(0)", f"  b = f32[{n}] parameter(1)",
              f"  ROOT f = (f32[], f32[{n}]) fusion(a, b), kind=kInput, calls=fused", "}"]
    return "\n".join(lines) + "\n"


def _fused(module):
    return next(c for c in module.computations if c.name.startswith("fused"))


def _instructions(llvm_ir: str) -> int:
    """LLVM instructions (assignments and stores) in the module's function bodies."""
    return len(re.findall(r"^\s+(?:%\S+ = |store )", llvm_ir, re.M))


def test_scan_through_pads_is_detected():
    assert branch_arms_explode(_fused(parse_module(scan_reduce(8))))
    assert not branch_arms_explode(_fused(parse_module(scan_reduce(3))))


def test_plain_pads_keep_their_branches():
    text = """HloModule m
fused {
  p = f32[4,6] parameter(0)
  z = f32[] constant(0)
  l = f32[4,6] log(p)
  a = f32[6,6] pad(l, z), padding=1_1x0_0
  b = f32[6,6] pad(p, z), padding=2_0x0_0
  c = f32[12,6] concatenate(a, b), dimensions={0}
  ROOT n = f32[12,6] negate(c)
}
ENTRY e {
  x = f32[4,6] parameter(0)
  ROOT f = f32[12,6] fusion(x), kind=kLoop, calls=fused
}
"""
    assert not branch_arms_explode(_fused(parse_module(text)))


def test_scan_reduce_llvm_ir_is_linear_in_the_levels():
    # with a copy per arm: 2**levels copies of the first levels (levels=8: ~20,000
    # instructions; 10 took minutes); now each level adds a bounded amount. (The row reduction
    # unrolls its tile steps, up to 16 / vector: the side output's code is copied per step, so
    # sizes grow with the row until the tile is whole, from 9 levels on: 3,409 then 3,784.)
    sizes = {lv: _instructions(emit_stage(scan_reduce(lv), "llvm", "sm_90")) for lv in (9, 10)}
    assert sizes[10] < 6000, sizes
    assert sizes[10] - sizes[9] < sizes[9] // 2, sizes


def test_scan_reduce_matches_interpreter_on_host():
    for levels in (3, 6):
        ok, report = run_on_host(parse_module(scan_reduce(levels)))
        assert ok, report


# --- compile time against XLA:GPU (bench/compile_vs_xla.py; issue 29 item 8) -------------------

def test_compile_vs_xla_skips_with_a_reason_without_jax(tmp_path, monkeypatch):
    import argparse
    from bench import compile_vs_xla
    monkeypatch.setenv("HLO_JAXENV", str(tmp_path / "no-jax-here"))
    out = compile_vs_xla.compile_vs_xla_section(argparse.Namespace(quick=False), tmp_path)
    assert out["rows"] == [] and "no jax at" in out["skipped"] and "HLO_JAXENV" in out["skipped"]
    quick = compile_vs_xla.compile_vs_xla_section(argparse.Namespace(quick=True), tmp_path)
    assert quick["rows"] == [] and quick["skipped"] == "--quick"


def test_compile_vs_xla_times_both_and_reports_ratios(tmp_path, monkeypatch):
    """The section's bookkeeping, with both compilers stood in for: medians, three ratios per
    module, and a module whose compile fails reported, not timed."""
    import argparse
    from bench import compile_vs_xla
    corpus = tmp_path / "corpus"
    for _, rel in compile_vs_xla.MODULES[:2]:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text("HloModule m\n")
    monkeypatch.setattr(compile_vs_xla, "jax_env", lambda: ({}, ""))
    monkeypatch.setattr(compile_vs_xla, "snapshot", lambda tmp: {})
    monkeypatch.setattr(compile_vs_xla, "ours_once", lambda path, env, tmp: (3.0, 2.5, {"compile": 2.0}, ""))
    xla = iter([(2.0, 2.0, {"compile": 1.0}, ""), (0.0, 0.0, None, "boom")] * 3)
    monkeypatch.setattr(compile_vs_xla, "xla_once", lambda path, env, config: next(xla))
    out = compile_vs_xla.compile_vs_xla_section(argparse.Namespace(quick=False), corpus, runs=3)
    rows = {r["name"]: r for r in out["rows"]}
    first = compile_vs_xla.MODULES[0][0]
    assert rows[f"{first} ours/XLA (process)"]["value"] == 1.5
    assert rows[f"{first} ours/XLA (compile)"]["value"] == 2.0
    assert rows[f"{first} ours/XLA (cpu)"]["value"] == 1.25
    second = compile_vs_xla.MODULES[1][0]
    assert rows[f"{second} ours/XLA (process)"]["value"] is None
    assert any("boom" in e for e in out["errors"])
