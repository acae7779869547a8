"""Compiling a module with overrides (``hlo_compile/driver/overrides.py``: which files replace which
kernel's IR or PTX): the host platform's kernel stage for overridden IR, and
``compile_executable`` with a module's overrides in place. Kept in the runtime layer so that
``driver/overrides.py`` stays below the driver and the platforms."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..driver.overrides import ModuleOverrides, OverrideError, OverrideSpec, check_ir, host_ir

if TYPE_CHECKING:
    from ..codegen.compiler import ModulePlan
    from ..hlo import HloModule


def host_kernels(platform: Any, options: Any, plan: ModulePlan, overrides: ModuleOverrides | None):
    """The host platform's kernel stage with ``overrides``: an overridden kernel's IR
    translated (``host_ir``) and JIT-compiled with the driver our own kernel would get."""
    import time

    from ..driver.stages import StageOutput
    if not overrides:
        return platform.compile_kernels(options, plan)
    from ..targets.host import HostTarget, NeedsSync
    from ..targets.host.jit import jit_compile
    from ..targets.host.kernel import HostKernel
    import dataclasses
    kernels, seconds, compiled = {}, {}, {}
    owners = {k.kernel_name: k for k in plan.unique_kernels}
    for p in plan.kernels:
        name = p.kernel_name
        if name not in compiled:
            t0 = time.perf_counter()
            f = overrides.ir(name) or overrides.module_ir
            if f is None:
                compiled[name] = platform.compile(owners[name], options.dot_tensor_cores)
            else:
                target = HostTarget("serial", tensor_cores=options.dot_tensor_cores)
                try:
                    owners[name].emit(target)
                except NeedsSync:
                    raise OverrideError(f"override {f.path}: kernel {name} uses barriers or warp shuffles, which "
                                        "an overridden kernel cannot do on --platform=host; run it on "
                                        "--platform=cuda") from None
                info = dataclasses.replace(target.kernels[name], ctx=None, coroutine=None)
                check_ir(f, {name: ["ptr"] * info.num_params})  # (the NVPTX kernel's: a ptr per buffer)
                text = host_ir(f.text, [name] if f is not overrides.module_ir else list(owners), f.path)
                compiled[name] = HostKernel(info, text, jit_compile(text, info))
            seconds[name] = time.perf_counter() - t0
        kernels[p.fusion.name] = compiled[name]
    return StageOutput(kernels, kernel_seconds=seconds)


def compile_executable(module: HloModule, platform: str, options: Any, spec: OverrideSpec, *,
                       dump_to: Any = None, module_index: int = 0, cache: Any = None, progress: Any = None):
    """``runtime.executable.compile_executable`` with ``spec``'s overrides for module number
    ``module_index``."""
    import time

    from ..driver.pipeline import run_pipeline
    from .executable import PROGRAMS, Executable, make_platform, programs_stage
    from .platform import KERNELS
    from ..driver.stages import Stage
    t0 = time.perf_counter()
    p = make_platform(platform)
    options = p.compile_options(options)
    kernel_stage = p.kernel_stage()
    if p.name == "host":
        kernel_stage = Stage(KERNELS, ("fusions",),
                             lambda o, plan: host_kernels(p, o, plan, spec.bound.get(module_index)),
                             description=kernel_stage.description)
    result = run_pipeline(module, options, dump_to=dump_to, module_index=module_index,
                          then=[programs_stage(p), kernel_stage], cache=cache, overrides=spec,
                          progress=progress)
    return Executable(result.plan, p, result.values[KERNELS], compile_seconds=time.perf_counter() - t0,
                      programs=result.values[PROGRAMS], pipeline=result)
