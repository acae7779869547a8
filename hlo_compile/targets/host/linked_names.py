"""The external names host kernels link by name (libm, libc): a constant table, without LLVM.

Kept apart from ``target.py`` so that planning a module for any target (``targets.
reserved_kernel_symbols``) reads them without loading the host JIT (issue 17: start-up).
"""
from __future__ import annotations

UNARY_MATH = ("exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "erf", "atan", "asin",
              "acos", "asinh", "acosh", "atanh", "sinh", "cosh", "cbrt", "exp2", "log2", "log10")
BINARY_MATH = ("pow", "atan2", "fmod", "hypot")
# libm functions LLVM's float intrinsics may become on the CPU, and erfc
LIBM_OTHER = ("sqrt", "fabs", "floor", "ceil", "rint", "round", "trunc", "erfc")
# libc: coroutine frames (malloc, free), LLVM's memory intrinsics, the process itself
LIBC = ("malloc", "free", "aligned_alloc", "memcpy", "memset", "memmove", "abort", "exit", "printf", "main")

# kernels link libm and libc by name (MCJIT finds them in the process); every name also
# with the f suffix of libm's float variants (as the planner always reserved them)
LINKED_SYMBOLS = frozenset(n + suffix for n in UNARY_MATH + BINARY_MATH + LIBM_OTHER + LIBC for suffix in ("", "f"))
