"""Several kernel modules (one per fusion) as one LLVM module, as XLA emits one module per HLO
module: one PTX file that the runtime loads once."""
from __future__ import annotations

from typing import Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ..codegen.errors import CodegenError
from ..codegen.target import Target


def link_kernel_modules(target: Target, name: str, modules: Sequence[ir.Module]) -> str:
    """The IR text of one module holding every kernel (their internal helpers are prefixed
    with the kernel name, so nothing clashes)."""
    if not modules:
        return str(target.new_module(name))
    try:
        main = llvm.parse_assembly(str(target.new_module(name)))
        for m in modules:
            other = llvm.parse_assembly(str(m))
            main.link_in(other)
        main.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the emitted kernels of module {name}: {e}") from None
    return str(main)
