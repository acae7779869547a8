"""Library calls at run time: the step that runs a ``__cublas$*`` or ``__cudnn$*`` custom-call
through NVIDIA's library, on a platform that has it (cuda, with the ``[cuda]`` extra).

Each family registers a builder per target in its own module (``cublas_steps.py``,
``cudnn_steps.py``); a call whose target has no builder, or a platform without the library,
is refused by name. Calls are only kept as calls when ``CompileOptions.gemm``/``conv`` say
"library"; otherwise they were lowered to kernels before fusion.
"""
from __future__ import annotations

from typing import Any, Callable

from ..hlo import HloInstruction
from ..hlo.calls.library_targets import library_family
from . import cublas_steps, cudnn_steps
from .nvidia_bindings import binding_missing
from ..driver.runnable import unsupported
from .steps import Step

LIBRARY_STEPS: dict[str, Callable[[HloInstruction, Any], Step]] = {**cublas_steps.STEPS, **cudnn_steps.STEPS}


def library_step(inst: HloInstruction, builder: Any) -> Step:
    """The step of library call ``inst`` (``builder``: the ``ProgramBuilder``)."""
    build = LIBRARY_STEPS.get(inst.attr("custom_call_target", None))
    if build is None:
        raise unsupported(inst, builder.platform_name)
    return build(inst, builder)


# the binding (runtime/nvidia_bindings.py) each family's steps import
_BINDINGS = {"gemm": "cublasLt", "conv": "cudnn", "fmha": "cudnn"}


def library_unavailable(family: str) -> str | None:
    """Why the library calls of ``family`` cannot run through NVIDIA's library here (None: they can)."""
    if not any(library_family(t) == family for t in LIBRARY_STEPS):
        return f"no {family} library step is implemented"
    return binding_missing(_BINDINGS[family])
