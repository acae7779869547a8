"""The fused emitter computes an element once per index, however the index was computed
(codegen/elemental/value_numbering.py): emitted IR grows linearly with a chain of values that each reach
the previous one along two index paths, not exponentially."""
from __future__ import annotations

from llvmlite import ir

from hlo_compile import parse_module
from hlo_compile.codegen.elemental.value_numbering import index_key, value_key
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from test_real_model_regressions import host_matches_interpreter


def chain_module(n: int) -> str:
    """x_i = reshape(reshape(x_{i-1})) + transpose(transpose(x_{i-1})): two index paths each."""
    lines = ["HloModule chain", "fused {", "  p = f32[4,6] parameter(0)", "  x0 = f32[4,6] negate(p)"]
    for i in range(1, n + 1):
        lines += [f"  r{i} = f32[24] reshape(x{i - 1})", f"  t{i} = f32[4,6] reshape(r{i})",
                  f"  w{i} = f32[6,4] transpose(x{i - 1}), dimensions={{1,0}}",
                  f"  v{i} = f32[4,6] transpose(w{i}), dimensions={{1,0}}",
                  f"  x{i} = f32[4,6] add(t{i}, v{i})"]
    lines += [f"  ROOT o = f32[4,6] negate(x{n})", "}", "ENTRY e {", "  a = f32[4,6] parameter(0)",
              "  ROOT f = f32[4,6] fusion(a), kind=kLoop, calls=fused", "}"]
    return "\n".join(lines) + "\n"


def llvm_size(text: str) -> int:
    return len(run_pipeline(parse_module(text), CompileOptions(), emit="llvm").artifacts["llvm"])


def test_ir_grows_linearly_along_a_chain_of_two_path_values():
    small, large = llvm_size(chain_module(4)), llvm_size(chain_module(12))
    assert large < 4 * small, (small, large)  # identity-keyed indices gave 2^n growth


def test_chain_of_two_path_values_runs_on_host():
    host_matches_interpreter(chain_module(10))


def test_equal_arithmetic_on_the_same_inputs_shares_a_key():
    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.IntType(32), ir.IntType(32), ir.PointerType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    x, y, p = fn.args
    eight = ir.Constant(ir.IntType(32), 8)
    a1, a2 = b.urem(b.add(x, y), eight), b.urem(b.add(x, y), eight)
    assert a1 is not a2 and value_key(a1) == value_key(a2)
    assert value_key(b.urem(b.add(y, x), eight)) != value_key(a1)  # operand order is structure
    assert value_key(b.udiv(b.add(x, y), eight)) != value_key(a1)
    assert value_key(b.add(x, y, flags=["nuw"])) != value_key(b.add(x, y))
    l1, l2 = b.load(p, typ=ir.IntType(32)), b.load(p, typ=ir.IntType(32))
    assert value_key(l1) != value_key(l2)  # memory reads key by identity
    assert index_key([a1, eight]) == index_key([a2, ir.Constant(ir.IntType(32), 8)])
