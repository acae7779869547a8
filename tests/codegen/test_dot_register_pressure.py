"""The config-tiled FMA dot kernel keeps each K step's multiply-adds in that step (issue 29,
registers of the Triton-config GEMM kernels against XLA's): without the accumulators pinned
(``dot_tiled.pin_values``: an empty ``asm volatile`` per accumulator) LLVM, having unrolled a short
K loop, sank every ``fma`` past the K steps' barriers into the epilogue's guarded store (their
only use), so all the values read from shared memory stayed live: 106 registers for
vae_reparam_adam's 12x20x16 bias + tanh GEMM where XLA's kernel has 32. PTX goldens (every
``fma`` before the last barrier), host = interpreter, and the pin's own rules."""
from __future__ import annotations

import pytest
from llvmlite import ir

from hlo_compile import parse_module
from hlo_compile.codegen.emitters.gemm.dot_tiled import _branchy_prologue, pin_values
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.options import CompileOptions

from codegen_helpers import filecheck, run_on_host
from test_dot_config_tiling import _nested

BIAS = """  d = f32[{m},{n}] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, backend_config={{"sizes":["16"]}}
  bb = f32[{m},{n}] broadcast(p2), dimensions={{1}}
  ROOT s = f32[{m},{n}] add(d, bb)"""


def _bias(m: int, n: int, k: int) -> str:
    """vae_reparam_adam's GEMM shape family: 16 x 8 tiles on 2 warps, one stage; M = 12 ragged, so
    the epilogue's store is guarded."""
    return _nested([f"f32[{m},{k}]", f"f32[{k},{n}]", f"f32[{n}]"], BIAS.format(m=m, n=n), f"f32[{m},{n}]",
                   [16, 8], 2)


CONCAT = """  c = f32[{k},{m}] concatenate(p0, p1), dimensions={{1}}
  ROOT d = f32[{m},{n}] dot(c, p2), lhs_contracting_dims={{0}}, rhs_contracting_dims={{1}}, backend_config={{"sizes":["16"]}}"""


def _concat(m: int, n: int, k: int) -> str:
    """model_flax_gru_forward_f32's shape family: the lhs a concatenate (staged through branches)."""
    half = m // 2
    return _nested([f"f32[{k},{half}]", f"f32[{k},{m - half}]", f"f32[{n},{k}]"], CONCAT.format(m=m, n=n, k=k),
                   f"f32[{m},{n}]", [16, 8], 2)


CASES = {
    # K = 20: two K steps, the last one ragged (tiles side by side, every step pinned)
    "ragged_k": _bias(12, 16, 20),
    # K = 32: one buffer for both tiles (``tile_reuse``), the final accumulators pinned
    "reused_tiles": _bias(12, 16, 32),
    # reused tiles, a concatenate prologue: every step pinned
    "reused_tiles_concatenate": _concat(24, 12, 32),
}


def _ptx(text: str) -> str:
    return run_pipeline(parse_module(text), CompileOptions(arch="sm_90"), emit="ptx").artifacts["ptx"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_fma_after_the_last_barrier(name, tmp_path):
    """Every multiply-add of the dot runs before the K loop's last barrier: after it only the
    epilogue (bias loads, the adds, the guarded vector store)."""
    ptx = _ptx(CASES[name])
    body = ptx[ptx.index(".visible .entry f("):]
    last = body.rindex("bar.sync")
    assert body.count("fma.rn.f32") >= 8
    assert "fma.rn.f32" not in body[last:], body[last:]
    # the pins (empty inline asm): after each K step's multiply-adds, before its barrier; with
    # reused tiles and no branchy prologue once, after the K loop
    pin = "CHECK: // begin inline asm\nCHECK-NEXT: // end inline asm\n"
    order = (f"CHECK: bar.sync 0;\n{pin}" if name == "reused_tiles" else f"{pin}CHECK: bar.sync 0;\n")
    filecheck(ptx, f"""
CHECK: .visible .entry f(
CHECK: fma.rn.f32
{order}CHECK: st.global
CHECK: ret;
""", tmp_path)


def test_ragged_k_pins_every_step(tmp_path):
    """Tiles side by side: a pin follows each K step's multiply-adds (two K steps)."""
    ptx = _ptx(CASES["ragged_k"])
    body = ptx[ptx.index(".visible .entry f("):]
    steps = body.split("bar.sync")
    pinned = [s for s in steps if "begin inline asm" in s]
    assert len(pinned) >= 2, "a pin after each K step's multiply-adds"
    for s in pinned:
        assert s.rindex("fma.rn.f32") < s.index("begin inline asm")


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_matches_interpreter(name):
    ok, report = run_on_host(parse_module(CASES[name]), seed=7)
    assert ok, report


def test_branchy_prologue():
    concat = parse_module(CASES["reused_tiles_concatenate"])
    plain = parse_module(CASES["reused_tiles"])

    def dot_of(module):
        (dot,) = [i for c in module.computations for i in c.instructions if i.opcode == "dot"]
        return dot
    assert [_branchy_prologue(o) for o in dot_of(concat).operands] == [True, False]
    assert [_branchy_prologue(o) for o in dot_of(plain).operands] == [False, False]


class _Emission:
    def __init__(self, target):
        self.target = target
        module = ir.Module()
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.IntType(16)]), "k")
        self.b = ir.IRBuilder(fn.append_basic_block())
        self.args = fn.args


def test_pin_values_rules():
    from hlo_compile.targets.host.target import HostTarget
    from hlo_compile.targets.nvptx import NvptxTarget
    gpu, host = _Emission(NvptxTarget("sm_90")), _Emission(HostTarget())
    x, h = gpu.args
    (pinned,) = pin_values(gpu, [x])
    text = str(pinned)
    assert 'asm sideeffect "", "=f,0"' in text and pinned.type == x.type
    # no register class for i16 here, and the host never pins: the values themselves
    assert pin_values(gpu, [h]) == [h]
    assert pin_values(host, [host.args[0]]) == [host.args[0]]
    assert pin_values(gpu, []) == []
