"""How the passes' cost grows with the module: a generated chain of blocks of lone
instructions (what a framework hands over, before any fusion) at 1×, 2×, 4× and 8× the size.

Each block reads the previous block's result and a parameter shared by all blocks (a value
with a user in every block, as the weights and constants of a model are), goes through a few
elementwise ops, a broadcast of a shared scalar constant and a row reduction, so that the
fusion pass forms two fusions per block and duplicates the cheap shared producers into each.
A pass whose cost grows with the square of the module shows as a ratio 8×/1× near 64.
"""
from __future__ import annotations

import time

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import prepare_module
from hlo_compile.hlo import HloModule
from hlo_compile.options import CompileOptions

SCALES = (1, 2, 4, 8)


def chain_text(blocks: int, rows: int = 8, cols: int = 16) -> str:
    """A module of ``blocks`` blocks of lone instructions, each reading the one before."""
    m, v = f"f32[{rows},{cols}]", f"f32[{rows}]"
    out = [f"HloModule chain_{blocks}", "",
           "%add (a: f32[], b: f32[]) -> f32[] {", "  %a = f32[] parameter(0)", "  %b = f32[] parameter(1)",
           "  ROOT %s = f32[] add(%a, %b)", "}", "",
           f"ENTRY %main (x: {m}, w: {m}) -> {m} {{",
           f"  %h0 = {m} parameter(0)", f"  %w = {m} parameter(1)",
           "  %zero = f32[] constant(0)", "  %half = f32[] constant(0.5)",
           f"  %halves = {m} broadcast(%half), dimensions={{}}"]
    for i in range(blocks):
        h = f"%h{i}"
        out += [f"  %tm{i} = {m} multiply({h}, %w)",
                f"  %ex{i} = {m} tanh(%tm{i})",
                f"  %sc{i} = {m} multiply(%ex{i}, %halves)",
                f"  %rd{i} = {v} reduce(%sc{i}, %zero), dimensions={{1}}, to_apply=%add",
                f"  %bc{i} = {m} broadcast(%rd{i}), dimensions={{0}}",
                f"  %nd{i} = {m} subtract(%sc{i}, %bc{i})",
                f"  %h{i + 1} = {m} add(%nd{i}, {h})"]
    out.append(f"  ROOT %out = {m} copy(%h{blocks})")
    out.append("}")
    return "\n".join(out) + "\n"


def chain_module(blocks: int) -> HloModule:
    return parse_module(chain_text(blocks), f"chain_{blocks}.hlo")


def pass_seconds(blocks: int, repeat: int = 3) -> float:
    """The best of ``repeat`` runs of the passes (``prepare_module``) on ``chain_module(blocks)``."""
    module = chain_module(blocks)
    options = CompileOptions()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        prepare_module(module, options)
        best = min(best, time.perf_counter() - t0)
    return best


def scaling_section(ns) -> dict:
    base = 25 if ns.quick else 250
    rows = []
    times = {}
    for k in SCALES:
        n = base * k
        times[k] = pass_seconds(n, 1 if ns.quick else 3)
        rows.append({"name": f"passes at {k}x ({n} blocks, {7 * n + 5} instructions)", "value": times[k],
                     "unit": "s", "extra": {"ratio_to_1x": times[k] / times[1]}})
    ratio = times[SCALES[-1]] / times[1]
    return {"method": f"prepare_module (every pass) on bench/scaling.py's chain of {base}×k blocks, best of "
                      f"{1 if ns.quick else 3}; the bar: {SCALES[-1]}x/1x ≤ 10 (linear is 8)",
            "rows": rows, "ratio_8x_over_1x": ratio, "linear": ratio <= 10}
