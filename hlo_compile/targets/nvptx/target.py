"""The NVPTX target: kernel building blocks for emitters (``ptx.py`` turns their IR into PTX).

``NvptxTarget`` implements the target interface (``codegen/target.py``) with NVPTX intrinsics
and libdevice calls (notes/nvptx.md §3), and ``NvptxWarpMma`` its tensor-core operations
(``ldmatrix`` and ``mma.sync`` m16n8k16, sm_80+).

Process-wide choices (LLVM options are global to the process):

- ``--nvptx-short-ptr`` is set once, before the first NVPTX target machine is created, and
  never changed: shared/local/const pointers are then 32-bit, which saves registers in every
  kernel indexing shared memory. Every NVPTX target machine and datalayout in the process
  comes from ``target_machine`` after that point, so modules, libdevice snippets and TMs all
  agree on the layout. (Code that creates its own NVPTX target machine before ours gets the
  64-bit layout; do not do that.)
- Target machines are created once per (arch, opt level) and kept.
"""
from __future__ import annotations

import re
import threading
from typing import Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ...codegen.llvm_types import F16, F32, I32, PTR, VOID
from ...codegen.target import (KernelFunction, KernelParam, Target, TargetFeatureError, WarpMma,
                               check_math_args)
from ...hlo.errors import HloError
from ...gpu.archs import ARCHS, MAX_PTX_ISA, PTX_ARCHS

TRIPLE = "nvptx64-nvidia-cuda"
SHARED_ADDRSPACE = 3

# libm name -> arity; each maps to libdevice's __nv_<name>f (float) / __nv_<name> (double).
MATH_FUNCTIONS: dict[str, int] = {
    **dict.fromkeys(
        ["exp", "expm1", "exp2", "exp10", "log", "log1p", "log2", "log10",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
         "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "lgamma", "tgamma",
         "cbrt", "rsqrt"], 1),
    **dict.fromkeys(["pow", "atan2", "fmod", "hypot", "remainder", "nextafter"], 2),
}

# Tensor cores: mma.m16n8k16 with bf16 (and f16) inputs and f32 accumulators needs sm_80.
# LLVM 22's NVVM intrinsics (checked through compile_to_ptx, see tests/codegen/test_dot_mma.py):
#   {float x4} @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32 a0..a3, i32 b0, b1, float c0..c3)
#   {float x4} @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half> a0..a3, <2 x half> b0, b1, float c0..c3)
#   {i32 x4} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))
MMA_MIN_SM = 80
# 65536 registers per SM / 255 registers per thread at most: blocks up to this size fit with any count
_THREADS_ANY_REGISTER_COUNT_FITS = 256
MMA_INTRINSICS = {"bf16": "llvm.nvvm.mma.m16n8k16.row.col.bf16", "f16": "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"}
LDMATRIX_X4 = "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16"

_SREG = {"thread_id": "tid", "block_id": "ctaid", "block_dim": "ntid", "grid_dim": "nctaid"}
_AXES = "xyz"


class UnsupportedArchError(HloError):
    """An ``--arch`` this compiler cannot generate PTX for."""


def ptx_isa_version(arch: str) -> int:
    """The PTX ISA version (times ten: 78 is 7.8) we emit for ``arch``: the lowest it needs."""
    version = ARCHS[arch].min_ptx_isa if arch in ARCHS else None
    if version is None or version > MAX_PTX_ISA:
        raise UnsupportedArchError(
            f"unsupported GPU architecture {arch!r}; supported: {', '.join(PTX_ARCHS)}")
    return version


def sm_version(arch: str | None) -> int | None:
    """``sm_90a`` -> 90; None for anything else."""
    m = re.fullmatch(r"sm_(\d+)[a-z]?", arch or "")
    return int(m.group(1)) if m else None


_PTX_IDENTIFIER = re.compile(r"(?:[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+)\Z")


def is_ptx_identifier(name: str) -> bool:
    """Whether ``name`` can name a kernel in PTX. LLVM emits entry names verbatim, so a
    name like ``fusion.1`` gives PTX that ptxas and the driver reject."""
    return _PTX_IDENTIFIER.match(name) is not None


def ptx_identifier(name: str) -> str:
    """``name`` with every character PTX does not allow replaced by ``_`` (``fusion.1`` →
    ``fusion_1``); for drivers naming kernels after HLO instructions."""
    cleaned = re.sub(r"[^A-Za-z0-9_$]", "_", name)
    return cleaned if is_ptx_identifier(cleaned) else f"_{cleaned}"


# ---------------------------------------------------------------------------------------------
# Target machines


_init_lock = threading.Lock()
_initialized = False
_machines: dict[tuple[str, int], llvm.TargetMachine] = {}


def _ensure_llvm() -> None:
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        llvm.set_option("", "--nvptx-short-ptr")  # see the module docstring
        _initialized = True


def target_machine(arch: str, opt_level: int = 3) -> llvm.TargetMachine:
    """The (cached) NVPTX target machine for ``arch`` at codegen level ``opt_level``."""
    if opt_level not in (0, 1, 2, 3):
        raise ValueError(f"opt_level must be 0..3, not {opt_level}")
    features = f"+ptx{ptx_isa_version(arch)}"
    with _init_lock:
        tm = _machines.get((arch, opt_level))
        if tm is None:
            _ensure_llvm()
            tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, features=features, opt=opt_level)
            _machines[(arch, opt_level)] = tm
        return tm


# ---------------------------------------------------------------------------------------------
# The target interface


def _declare(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name)
    return fn


def _module_of(builder: ir.IRBuilder) -> ir.Module:
    return builder.block.parent.module


def _unique_ptx_name(module: ir.Module, name: str) -> str:
    """``name`` made a PTX identifier and unique in ``module`` (``tile``, ``tile_1``, ...):
    LLVM would otherwise mangle ``tile.1`` into ``tile_$_1``."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "smem"
    if base[0].isdigit():
        base = "_" + base
    candidate, n = base, 0
    while candidate in module.globals:
        n += 1
        candidate = f"{base}_{n}"
    return candidate


class NvptxTarget(Target):
    """Kernels for NVIDIA GPUs; see notes/nvptx.md §3 for the PTX each method becomes."""

    name = "nvptx"
    triple = TRIPLE

    def __init__(self, arch: str = "sm_80", *, dot_tensor_cores: bool = False):
        ptx_isa_version(arch)  # rejects an unknown arch before any LLVM work
        self.arch = arch
        # CompileOptions.dot_tensor_cores, given by whoever creates the target (never set
        # afterwards); has_tensor_cores reads it
        self.dot_tensor_cores = dot_tensor_cores
        self.data_layout = str(target_machine(arch).target_data)

    def __repr__(self) -> str:
        return f"NvptxTarget({self.arch!r})"

    def new_module(self, name: str) -> ir.Module:
        module = ir.Module(name)
        module.triple = self.triple
        module.data_layout = self.data_layout
        return module

    def begin_kernel(self, module: ir.Module, name: str, params: Sequence[KernelParam],
                     block: tuple[int, int, int] | None = None) -> KernelFunction:
        if not is_ptx_identifier(name):
            raise ValueError(f"kernel name {name!r} is not a PTX identifier; use ptx_identifier(name) "
                             f"({ptx_identifier(name)!r})")
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * len(params)), name)
        fn.calling_convention = "ptx_kernel"
        if block is not None and block[0] * block[1] * block[2] > _THREADS_ANY_REGISTER_COUNT_FITS:
            # .maxntid x, y, z: ptxas keeps the registers per thread within what a block of that
            # many threads may use (65536 / threads), as XLA's launch-dimension annotation does;
            # without it a 1024-thread kernel given 78 registers could not be launched. Smaller
            # blocks fit with any count (255 at most), and there the bound would only make ptxas
            # trade registers for occupancy (spilling), so they are left unbounded.
            set.add(fn.attributes, f'"nvvm.maxntid"="{block[0]},{block[1]},{block[2]}"')
        for arg, param in zip(fn.args, params):
            arg.name = param.name
            # noalias: XLA buffers given to one kernel do not overlap, except an in-place
            # kernel's donated operand and its output (KernelParam.noalias False for both);
            # with readonly this gives ld.global.nc.
            if param.noalias:
                arg.add_attribute("noalias")
            arg.add_attribute("captures(none)")
            if param.readonly:
                set.add(arg.attributes, "readonly")  # not in llvmlite's whitelist
            if param.align > 1:
                arg.attributes.align = param.align
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        return KernelFunction(fn, builder, list(fn.args))

    def end_kernel(self, builder: ir.IRBuilder) -> None:
        builder.ret_void()

    def ret(self, builder: ir.IRBuilder) -> None:
        builder.ret_void()
        builder.position_at_end(builder.function.append_basic_block("after_return"))

    def _sreg(self, builder: ir.IRBuilder, kind: str, axis: int) -> ir.Value:
        if axis not in (0, 1, 2):
            raise ValueError(f"axis must be 0, 1 or 2, not {axis}")
        reg = _SREG[kind]
        fn = _declare(_module_of(builder), f"llvm.nvvm.read.ptx.sreg.{reg}.{_AXES[axis]}", I32, [])
        return builder.call(fn, [], name=f"{reg}.{_AXES[axis]}")

    def thread_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._sreg(builder, "thread_id", axis)

    def block_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._sreg(builder, "block_id", axis)

    def block_dim(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._sreg(builder, "block_dim", axis)

    def grid_dim(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._sreg(builder, "grid_dim", axis)

    # the inline-asm register constraint of a value type (PTX: .f32, .f64, .b32, .b64 registers)
    _PIN_CONSTRAINTS = {"float": "f", "double": "d", "i32": "r", "i64": "l"}

    def pin(self, builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
        """An empty ``asm volatile`` identity (no PTX instruction): LLVM cannot move the
        arithmetic that computes ``value`` below it (types without a register constraint: the value)."""
        code = self._PIN_CONSTRAINTS.get(str(value.type))
        if code is None:
            return value
        return builder.asm(ir.FunctionType(value.type, [value.type]), "", f"={code},0", [value], True)

    def barrier(self, builder: ir.IRBuilder) -> None:
        # LLVM 22's name for __syncthreads (llvm.nvvm.barrier0 is auto-upgraded to it)
        fn = _declare(_module_of(builder), "llvm.nvvm.barrier.cta.sync.aligned.all", VOID, [I32])
        builder.call(fn, [ir.Constant(I32, 0)])

    def _shuffle(self, builder: ir.IRBuilder, mode: str, value: ir.Value, lane_arg: int) -> ir.Value:
        if value.type == F32:
            suffix = "f32"
        elif value.type == I32:
            suffix = "i32"
        else:
            raise ValueError(f"warp shuffles take i32 or float values, not {value.type}")
        ty = value.type
        fn = _declare(_module_of(builder), f"llvm.nvvm.shfl.sync.{mode}.{suffix}", ty, [I32, ty, I32, I32])
        # mask -1: the whole warp takes part; 31: clamp to the full 32-lane segment
        args = [ir.Constant(I32, -1), value, ir.Constant(I32, lane_arg), ir.Constant(I32, 31)]
        return builder.call(fn, args, name=f"shfl.{mode}")

    def shfl_down(self, builder: ir.IRBuilder, value: ir.Value, delta: int) -> ir.Value:
        return self._shuffle(builder, "down", value, delta)

    def shfl_xor(self, builder: ir.IRBuilder, value: ir.Value, mask: int) -> ir.Value:
        return self._shuffle(builder, "bfly", value, mask)

    def shared_array(self, builder: ir.IRBuilder, name: str, element_type: ir.Type, count: int) -> ir.Value:
        """A static ``.shared`` array; ``count == 0`` declares the dynamic shared memory
        (``.extern .shared``), sized at launch by ``LaunchDims.shared_bytes``."""
        if count < 0:
            raise ValueError(f"shared array {name!r} has negative size {count}")
        module = _module_of(builder)
        gv = ir.GlobalVariable(module, ir.ArrayType(element_type, count), _unique_ptx_name(module, name),
                               addrspace=SHARED_ADDRSPACE)
        gv.align = 16
        if count > 0:
            gv.linkage = "internal"
            gv.initializer = ir.Constant(gv.value_type, ir.Undefined)
        # llvmlite gives globals a typed pointer type; geps on it would then build typed
        # pointers that stores reject. Make it the opaque ptr addrspace(3) it really is.
        gv.type = ir.PointerType(addrspace=SHARED_ADDRSPACE)
        return gv

    def math(self, builder: ir.IRBuilder, fn: str, args: Sequence[ir.Value]) -> ir.Value:
        arity = MATH_FUNCTIONS.get(fn)
        ty = check_math_args("NVPTX", fn, arity, args)
        name = f"__nv_{fn}f" if ty == F32 else f"__nv_{fn}"
        callee = _declare(_module_of(builder), name, ty, [ty] * arity)
        return builder.call(callee, list(args), name=fn)

    # ---- tensor cores -----------------------------------------------------------------------
    def has_tensor_cores(self) -> bool:
        return bool(self.dot_tensor_cores) and (sm_version(self.arch) or 0) >= MMA_MIN_SM

    def warp_mma(self, builder: ir.IRBuilder, element_type: str) -> WarpMma:
        if not self.has_tensor_cores():
            why = ("dot_tensor_cores is off" if not self.dot_tensor_cores
                   else f"{self.arch} has no mma.m16n8k16 (sm_{MMA_MIN_SM}+)")
            raise TargetFeatureError(f"no warp-level MMA on this target: {why}")
        return NvptxWarpMma(_module_of(builder), element_type)


class NvptxWarpMma(WarpMma):
    """``ldmatrix.sync.aligned.m8n8.x4.b16`` and ``mma.sync.aligned.m16n8k16.row.col`` (f32
    accumulators) through their NVVM intrinsics, declared in the module when made. A/B
    fragment registers are ``i32`` for bf16, ``<2 x half>`` for f16."""

    def __init__(self, module: ir.Module, element_type: str):
        if element_type not in MMA_INTRINSICS:
            raise ValueError(f"warp-level MMA takes f16 or bf16 inputs, not {element_type}")
        self.element_type = element_type
        self.fragment_type = I32 if element_type == "bf16" else ir.VectorType(F16, 2)
        f4 = ir.LiteralStructType([F32] * 4)
        i4 = ir.LiteralStructType([I32] * 4)
        self._mma = _declare(module, MMA_INTRINSICS[element_type], f4, [self.fragment_type] * 6 + [F32] * 4)
        self._ldmatrix = _declare(module, LDMATRIX_X4, i4, [ir.PointerType(addrspace=SHARED_ADDRSPACE)])

    def load_matrix_x4(self, builder: ir.IRBuilder, address: ir.Value) -> list[ir.Value]:
        v = builder.call(self._ldmatrix, [address])
        out = [builder.extract_value(v, i) for i in range(4)]
        return out if self.fragment_type == I32 else [builder.bitcast(x, self.fragment_type) for x in out]

    def mma(self, builder: ir.IRBuilder, a: Sequence[ir.Value], b: Sequence[ir.Value],
            c: Sequence[ir.Value]) -> ir.Value:
        return builder.call(self._mma, [*a, *b, *c])
