"""A tiny harness that runs one HLO elementwise instruction through the elemental emitter on
the host: an LLVM function loops over N elements (load operands, ``emit_scalar_op``, store),
MCJIT compiles it, and the result is compared with the reference interpreter.

Math goes to libm through ``LibmTarget``, a minimal ``Target`` whose other methods raise.
MCJIT pitfalls (notes/nvptx.md §4): it owns its TargetMachine (one fresh TM per engine) and
segfaults on unresolved symbols, so only libm functions known to exist are declared.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

import hlo_compile
from hlo_compile.codegen.elemental.scalar_ops import emit_scalar_op
from hlo_compile.codegen.llvm_types import F32, F64, I1, I8, I64, PTR, compute_type, storage_type
from hlo_compile.codegen.target import Target
from hlo_compile.hlo.dtypes import numpy_dtype
from hlo_compile.hlo.ir import HloInstruction, HloModule
from hlo_compile.interpreter import evaluate_module

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

# libm functions present in every glibc: both the double and the `f` float variant exist.
LIBM = frozenset({"exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "erf", "cbrt", "asin", "acos",
                  "atan", "asinh", "acosh", "atanh", "sinh", "cosh", "pow", "atan2", "fmod"})


class LibmTarget(Target):
    """Just enough of a Target for scalar code: ``math`` calls libm by name."""

    name = "host-libm-stub"
    triple = llvm.get_process_triple()
    data_layout = ""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def math(self, builder: ir.IRBuilder, fn: str, args: Sequence[ir.Value]) -> ir.Value:
        if fn not in LIBM:
            raise KeyError(f"libm has no function {fn!r} known to this stub")
        ty = args[0].type
        if ty not in (F32, F64):
            raise TypeError(f"math({fn}) on {ty}: only float and double")
        cname = fn + ("f" if ty == F32 else "")
        self.calls.append(cname)
        module = builder.module
        callee = module.globals.get(cname) or ir.Function(module, ir.FunctionType(ty, [ty] * len(args)), cname)
        return builder.call(callee, list(args))

    def _no(self, *args, **kwargs):
        raise NotImplementedError("the elemental test target only provides math()")

    new_module = begin_kernel = end_kernel = ret = thread_id = block_id = block_dim = grid_dim = _no
    barrier = shfl_down = shfl_xor = shared_array = _no


def parse(text: str) -> HloModule:
    return hlo_compile.parse_module(text, "<elemental-test>")


def op_module(op: str, operand_types: Sequence[str], result_type: str, n: int, attrs: str = "") -> HloModule:
    """A module whose ENTRY root is ``op`` applied to parameters of ``[n]`` elements."""
    params = "\n".join(f"  p{i} = {t}[{n}] parameter({i})" for i, t in enumerate(operand_types))
    args = ", ".join(f"p{i}" for i in range(len(operand_types)))
    attrs = f", {attrs}" if attrs else ""
    return parse(f"HloModule m\nENTRY e {{\n{params}\n  ROOT r = {result_type}[{n}] {op}({args}){attrs}\n}}\n")


def _load(b: ir.IRBuilder, ptr: ir.Value, i: ir.Value, et: str) -> ir.Value:
    st = storage_type(et)
    v = b.load(b.gep(ptr, [i], source_etype=st), typ=st)
    ct = compute_type(et)
    if ct == I1:
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
    return b.trunc(v, ct) if st != ct else v


def _store(b: ir.IRBuilder, ptr: ir.Value, i: ir.Value, v: ir.Value, et: str) -> None:
    st = storage_type(et)
    if st != v.type:
        v = b.zext(v, st)  # pred is 0/1; ml_dtypes keeps s4/u4 in a byte's low bits
    b.store(v, b.gep(ptr, [i], source_etype=st))


def build_kernel(inst: HloInstruction, target: Target) -> ir.Module:
    """``void kernel(ptr out, ptr param0, ..., i64 n)``: out[i] = inst(params[k][i]...)."""
    module = ir.Module("elemental_test")
    module.triple = llvm.get_process_triple()
    params = inst.parent.parameters
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * (1 + len(params)) + [I64]), "kernel")
    out_ptr, *param_ptrs, n = fn.args
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    exit_ = fn.append_basic_block("exit")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, exit_)
    b.position_at_end(loop)
    i = b.phi(I64, "i")
    i.add_incoming(ir.Constant(I64, 0), entry)
    values = [_load(b, param_ptrs[o.parameter_number], i, o.shape.element_type) for o in inst.operands]
    result = emit_scalar_op(b, target, inst, values)
    _store(b, out_ptr, i, result, inst.shape.element_type)
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, b.block)  # the op may have moved the builder to a new block
    b.cbranch(b.icmp_signed("<", nxt, n), loop, exit_)
    b.position_at_end(exit_)
    b.ret_void()
    return module


@dataclass
class Compiled:
    """A JIT-compiled kernel; keeps its engine alive."""

    inst: HloInstruction
    ir_text: str
    engine: llvm.ExecutionEngine = field(repr=False)
    cfunc: object = field(repr=False)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        params = self.inst.parent.parameters
        ins = [np.ascontiguousarray(np.asarray(a, dtype=numpy_dtype(p.shape.element_type)))
               for a, p in zip(arrays, params)]
        n = ins[0].shape[0]
        out = np.zeros(n, dtype=numpy_dtype(self.inst.shape.element_type))
        self.cfunc(out.ctypes.data, *[a.ctypes.data for a in ins], n)
        return out


def jit(module: ir.Module, inst: HloInstruction, n_ptrs: int | None = None) -> Compiled:
    """MCJIT ``module``'s ``void kernel(ptr x n_ptrs, i64 n)`` (default: out + one per parameter)."""
    text = str(module)
    mod = llvm.parse_assembly(text)
    mod.verify()
    # MCJIT takes ownership of the target machine: a fresh one per engine.
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    addr = engine.get_function_address("kernel")
    n_ptrs = 1 + len(inst.parent.parameters) if n_ptrs is None else n_ptrs
    cfunc = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n_ptrs), ctypes.c_int64)(addr)
    return Compiled(inst, text, engine, cfunc)


def compile_op(module: HloModule) -> Compiled:
    inst = module.entry.root
    return jit(build_kernel(inst, LibmTarget()), inst)


def emit_ir(module: HloModule) -> str:
    """The LLVM IR text of the kernel for ``module``'s root (no JIT; any element type)."""
    inst = module.entry.root
    return str(build_kernel(inst, LibmTarget()))


def reference(module: HloModule, *arrays: np.ndarray) -> np.ndarray:
    return evaluate_module(module, list(arrays))


def run_both(module: HloModule, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(JIT result, interpreter result) of ``module`` on ``arrays``."""
    return compile_op(module)(*arrays), reference(module, *arrays)


# ---- NVPTX: every case must lower (an unsupported intrinsic aborts the process) ------------

MODULE_SEPARATOR = "\n; ---- next module ----\n"


def nvptx_assemble(texts: Sequence[str], cpu: str) -> str:
    """Link the kernels of ``texts`` (renamed ``kernel0, kernel1...``) into one NVPTX module,
    run O3 and return the PTX. Run it in a subprocess: LLVM aborts on what it cannot select."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu=cpu, opt=3)
    linked = None
    for k, text in enumerate(texts):
        text = text.replace('@"kernel"', f'@"kernel{k}"').replace(f'target triple = "{llvm.get_process_triple()}"', "")
        mod = llvm.parse_assembly(text)
        mod.triple = "nvptx64-nvidia-cuda"
        mod.data_layout = str(tm.target_data)
        if linked is None:
            linked = mod
        else:
            linked.link_in(mod)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(linked, pb)
    return tm.emit_assembly(linked)


if __name__ == "__main__":  # python elemental_harness.py CPU IN.ll OUT.ptx
    import sys

    _cpu, _src, _dst = sys.argv[1:4]
    with open(_src) as f:
        _texts = f.read().split(MODULE_SEPARATOR)
    with open(_dst, "w") as f:
        f.write(nvptx_assemble(_texts, _cpu))
