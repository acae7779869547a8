"""Compile an emitted host kernel plus its driver to machine code with MCJIT.

Steps: parse the kernel's IR, link in the driver (``driver``, ``scheduler``) and the soft-float helpers
(``softfloat``), make the kernel internal (so O3 inlines it into the serial driver), run
O3 with a target machine for this CPU, emit the object, check its external symbols resolve
(``symbols``), then give MCJIT that same object through its object cache so the code is
generated once.

Pitfalls this module exists to avoid (notes/nvptx.md §4): MCJIT takes ownership of the
target machine, so every engine gets a fresh one; MCJIT crashes on unresolved symbols; LLVM's
global context is shared by every thread, so all LLVM work here holds one lock.
"""
from __future__ import annotations

import ctypes
import re
import ctypes.util
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

from ...codegen.errors import CodegenError
from .driver import build_driver_module
from .driver_ir import DRIVER_NAME
from .softfloat import softfloat_ir
from .symbols import check_symbols_resolve
from .target import HostKernelInfo, init_native

LLVM_LOCK = threading.Lock()
_libm_loaded = False

DriverFn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)


def _load_libm() -> None:
    """Make libm's symbols visible to MCJIT's resolver even if the process linked it lazily."""
    global _libm_loaded
    if not _libm_loaded:
        path = ctypes.util.find_library("m")
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:
                pass  # the math functions are usually in the process already
        _libm_loaded = True


def _host_features() -> str:
    """This CPU's features, minus AVX512-BF16: its f32→bf16 conversion (``vcvtneps2bf16``)
    flushes subnormals to zero, while XLA (and the interpreter) round them exactly. Without
    it LLVM calls our own ``__truncsfbf2``, which rounds to nearest even."""
    features = llvm.get_host_cpu_features()
    if "avx512bf16" in features:
        features["avx512bf16"] = False
    return features.flatten()


def host_target_machine(cpu: str | None = None, opt: int = 3) -> llvm.TargetMachine:
    """A new target machine for this process (``cpu=None``: the host CPU with its features).

    Always a fresh one: MCJIT owns and frees the machine it is given.
    """
    init_native()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    if cpu is None:
        return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=_host_features(),
                                            opt=opt, codemodel="jitdefault")
    return target.create_target_machine(cpu=cpu, opt=opt, codemodel="jitdefault")


_HALF_TYPES = re.compile(r"\b(half|bfloat)\b")


def needs_softfloat(kernel_ir: str) -> bool:
    """Whether LLVM may lower this kernel's conversions to the soft-float libcalls: only
    ``half``/``bfloat`` values do. Linking and optimising the helpers into every kernel was
    about 60% of a trivial kernel's host compile time; a libcall left unresolved anyway is
    caught by ``check_symbols_resolve`` with a clear error, never a crash."""
    return _HALF_TYPES.search(kernel_ir) is not None


def host_tuning_options() -> llvm.PipelineTuningOptions:
    """O3 without the loop vectorizer and interleaver.

    LLVM 22's loop vectorizer miscompiles the serial driver's thread loop when the kernel
    indexes an operand with ``tid urem C``: with interleaving it treats the index as
    consecutive across unrolled parts and reads past the operand (a broadcast into the minor
    dimension of ``f32[2,2,16,8]`` read garbage; tests/test_host_miscompiles.py). The thread
    loop is ours, not the kernel's, so nothing the GPU runs is lost; SLP vectorisation stays.
    """
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = False
    pto.loop_interleaving = False
    return pto


@dataclass
class JitCode:
    """A compiled kernel + driver; keeps the engine (and so the code) alive."""

    engine: llvm.ExecutionEngine
    run: ctypes._CFuncPtr  # i32 hlo_host_run(i64* desc)
    optimized_ir: str


def _parse(text: str, what: str) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the {what}: {e}") from None
    return mod


def jit_compile(kernel_ir: str, info: HostKernelInfo, cpu: str | None = None) -> JitCode:
    """Build, optimise (O3) and load ``kernel_ir`` with the driver for ``info.mode``."""
    _load_libm()
    with LLVM_LOCK:
        tm = host_target_machine(cpu)
        triple, layout = llvm.get_process_triple(), str(tm.target_data)
        mod = _parse(kernel_ir, f"host kernel {info.name!r}")
        mod.triple, mod.data_layout = triple, layout
        driver = build_driver_module(triple, layout, info.name, info.num_params, info.mode)
        mod.link_in(_parse(str(driver), "host driver"))
        if needs_softfloat(kernel_ir):
            mod.link_in(_parse(softfloat_ir(triple, layout), "soft-float helpers"))
        mod.get_function(info.name).linkage = llvm.Linkage.internal
        try:
            mod.verify()
        except RuntimeError as e:
            raise CodegenError(f"host module for {info.name!r} does not verify: {e}") from None
        pb = llvm.create_pass_builder(tm, host_tuning_options())
        pb.getModulePassManager().run(mod, pb)
        del pb
        obj = tm.emit_object(mod)
        check_symbols_resolve(obj, mod, info.name)
        optimized = str(mod)
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.set_object_cache(getbuffer_func=lambda _module: obj)
        engine.finalize_object()
        address = engine.get_function_address(DRIVER_NAME)
    if not address:
        raise CodegenError(f"the host driver of {info.name!r} was not found after JIT compilation")
    return JitCode(engine=engine, run=DriverFn(address), optimized_ir=optimized)
