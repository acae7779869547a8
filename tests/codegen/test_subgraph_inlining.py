"""Fusions whose subgraph functions, inlined, would multiply (codegen/elemental/fused_emitter.py,
``flattening_explodes``): XLA's inlined threefry key split, where each round's two values both
read both values of the round before, made LLVM's always-inliner copy 2^rounds bodies before any
CSE (``hlo-compile --emit=ptx`` grew by ~50 MB/s and never ended). Such fusions are emitted in
one body instead, each (instruction, index) once.

tests/data/rng/threefry_key_split.hlo: the key-split fusion of XLA:GPU's optimized module of
``jax.random.split(wrap_key_data(key)); fold_in(k1, 11)`` (jax 0.10.2, sm_90), extracted with
``hlo-compile --extract`` and metadata removed.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from hlo_compile import parse_module
from hlo_compile.codegen.elemental.fused_emitter import flattening_explodes
from hlo_compile.codegen.elemental.partitioner import partition
from tests.codegen_helpers import needs_libdevice, run_on_host

KEY_SPLIT = Path(__file__).parents[1] / "data" / "rng" / "threefry_key_split.hlo"


def two_path_chain(n: int) -> str:
    """a_i = a_{i-1} + b_{i-1}, b_i = rotl(b_{i-1}, 13) ^ a_i, with outputs of two dims, so
    that every a_i and b_i is a subgraph of its own that the next two both call."""
    lines = ["HloModule chain", "fused {", "  p = u32[8] parameter(0)", "  q = u32[8] parameter(1)",
             "  a0 = u32[8] add(p, q)", "  b0 = u32[8] xor(p, q)",
             "  c13 = u32[] constant(13)", "  k13 = u32[8] broadcast(c13), dimensions={}",
             "  c19 = u32[] constant(19)", "  k19 = u32[8] broadcast(c19), dimensions={}"]
    for i in range(1, n + 1):
        lines += [f"  a{i} = u32[8] add(a{i - 1}, b{i - 1})",
                  f"  l{i} = u32[8] shift-left(b{i - 1}, k13)",
                  f"  r{i} = u32[8] shift-right-logical(b{i - 1}, k19)",
                  f"  o{i} = u32[8] or(l{i}, r{i})",
                  f"  b{i} = u32[8] xor(o{i}, a{i})"]
    lines += [f"  ra = u32[1,8] reshape(a{n})", f"  ROOT t = (u32[1,8], u32[8]) tuple(ra, b{n})", "}",
              "ENTRY e {", "  x = u32[8] parameter(0)", "  y = u32[8] parameter(1)",
              "  ROOT f = (u32[1,8], u32[8]) fusion(x, y), kind=kLoop, calls=fused", "}"]
    return "\n".join(lines) + "\n"


def _fused(module):
    return next(c for c in module.computations if c.name.startswith("fused"))


def test_flattened_size_of_a_two_path_chain_is_exponential():
    sizes = [partition(_fused(parse_module(two_path_chain(n)))).flattened_size() for n in (4, 8)]
    assert sizes[1] > 8 * sizes[0], sizes
    assert flattening_explodes(partition(_fused(parse_module(two_path_chain(20)))))


def test_plain_fusions_keep_their_subgraph_functions():
    text = """HloModule m
fused {
  p = f32[4,6] parameter(0)
  l = f32[4,6] log(p)
  t = f32[4,6] transpose(l), dimensions={0,1}
  ROOT a = f32[4,6] add(l, t)
}
ENTRY e {
  x = f32[4,6] parameter(0)
  ROOT f = f32[4,6] fusion(x), kind=kLoop, calls=fused
}
"""
    assert not flattening_explodes(partition(_fused(parse_module(text))))
    assert not flattening_explodes(partition(_fused(parse_module(two_path_chain(2)))))


def test_two_path_chain_runs_on_host():
    ok, report = run_on_host(parse_module(two_path_chain(24)))
    assert ok, report


def test_threefry_key_split_matches_interpreter_on_host():
    module = parse_module(KEY_SPLIT.read_text())
    part = partition(_fused(module))
    assert part.flattened_size() > 10**6 and flattening_explodes(part)
    ok, report = run_on_host(module, args=[np.array([0, 42], np.uint32)])
    assert ok, report
    ok, report = run_on_host(module, seed=3)
    assert ok, report


def test_threefry_key_split_compiles_to_ptx_in_bounded_time(tmp_path: Path):
    needs_libdevice()
    out = tmp_path / "k.ptx"
    cmd = [sys.executable, "-c", "from hlo_compile.cli.compile import main; main()", str(KEY_SPLIT),
           "--emit=ptx", "--arch=sm_90", "--no-cache", "-q", "-j1", "-o", str(out)]
    # before the fix: > 300 s and 14 GB; now about a second (generous bound for loaded machines)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ptx = out.read_text()
    assert ".entry" in ptx and "call" not in ptx.split(".entry", 1)[1]
