"""The cuBLAS GEMM calls run through cuBLASLt on the cuda platform (see ``library_steps.py``).

One step per call: the operands' matrices as ``blas_plan.py`` describes them (XLA's layouts,
operands swapped when D is row-major), the epilogue, bias, aux, FP8 scales and amax pointers
set as XLA's ``BlasLt::MatmulPlan`` sets them, the algorithm of the first heuristic (or entry
``selected_algorithm`` of the list), the call's own workspace leaf as workspace. Products are
computed in full f32 (never TF32 or FP8 fast accumulation), as the interpreter does. The
bindings (``nvmath.bindings.cublasLt``, the ``[cuda]`` extra) are imported when a step first
runs; without them the step refuses by name. Runs on the legacy stream (not in CUDA graphs).

NOT yet run on a GPU: written from the cuBLASLt and nvmath documentation only.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..hlo import HloInstruction
from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.library_limits import cublaslt_refusal
from ..hlo.calls.gemm import LEGACY_GEMM, Epilogue, GemmCall, parse_gemm_call
from ..hlo.calls.library_targets import GEMM_TARGETS
from .blas_plan import COLUMN, BlasPlan, MatrixLayout, blas_plan
from .nvidia_bindings import require_binding
from .steps import Frame, Step
from .values import Buffer

# cudaDataType_t
_CUDA_TYPES = {"f16": 2, "f32": 0, "f64": 1, "c64": 4, "c128": 5, "s8": 3, "s32": 10, "bf16": 14,
               "f8e4m3fn": 28, "f8e5m2": 29}
# cublasComputeType_t and the scale type, by the compute type the interpreter uses
_COMPUTE = {"f32": (68, 0), "f64": (70, 1), "c64": (68, 4), "c128": (70, 5), "s32": (72, 10)}
_SCALE_NUMPY = {0: np.float32, 1: np.float64, 4: np.complex64, 5: np.complex128, 10: np.int32}
# cublasLtEpilogue_t
_EPILOGUES = {Epilogue.DEFAULT: 1, Epilogue.RELU: 2, Epilogue.BIAS: 4, Epilogue.BIAS_RELU: 6, Epilogue.GELU: 32,
              Epilogue.BIAS_GELU: 36, Epilogue.GELU_AUX: 160, Epilogue.BIAS_GELU_AUX: 164}
_HEURISTIC_RESULT_BYTES = 96   # sizeof(cublasLtMatmulHeuristicResult_t); the algo comes first

_HANDLES: dict[str, int] = {}


def _compute(call: GemmCall, inst: HloInstruction) -> tuple[int, int]:
    out = call.output.element_type
    types = {out, inst.operands[call.a].shape.element_type, inst.operands[call.b].shape.element_type}
    if out in ("c64", "c128", "s32"):
        return _COMPUTE[out]
    return _COMPUTE["f64" if "f64" in types else "f32"]


class CublasLtMatmul(Step):
    """One GEMM call through ``cublasLtMatmul``."""

    def __init__(self, inst: HloInstruction, builder: Any = None):
        super().__init__(inst)
        self.call = parse_gemm_call(inst)
        self.plan: BlasPlan = blas_plan(self.call, [op.shape for op in inst.operands])
        for layout in (self.plan.a, self.plan.b, self.plan.c, self.plan.d):
            if layout.element_type not in _CUDA_TYPES:
                raise HloUnsupportedError(f"custom-call '%{inst.name}': cuBLASLt has no {layout.element_type} "
                                          "matrices", inst.location)
        why = cublaslt_refusal(self.call, inst)
        if why:  # lowered to our kernels before here (passes/library_calls.py): a guard
            raise HloUnsupportedError(f"custom-call '%{inst.name}': cuBLASLt does not take {why}; compile with "
                                      "--gemm=generated", inst.location)
        self.compute_type, self.scale_type = _compute(self.call, inst)
        self.outputs = [s for _, s in inst.shape.leaves()]

    def run(self, platform: Any, frame: Frame) -> None:
        inst, call, plan = self.inst, self.call, self.plan
        lt = require_binding("cublasLt", inst)
        ins = [int(frame.values[op].data) for op in inst.operands]
        outs = [Buffer(s, platform.allocate(s)) for s in self.outputs]
        value = outs if inst.shape.is_tuple else outs[0]
        frame.own(value)
        frame.values[inst] = value
        leaf = {role: int(outs[i].data) for role, i in call.result_leaves().items()} or {"d": int(outs[0].data)}
        handle = _HANDLES.get("lt") or _HANDLES.setdefault("lt", lt.create())
        keep: list[np.ndarray] = []       # host buffers cuBLASLt reads during the call

        def host(value, dtype) -> int:
            buf = np.array([value], dtype=dtype)
            keep.append(buf)
            return buf.ctypes.data

        desc = lt.matmul_desc_create(self.compute_type, self.scale_type)
        layouts = []
        pref = lt.matmul_preference_create()
        try:
            def set_desc(name: str, value, dtype=None) -> None:
                attr = getattr(lt.MatmulDescAttribute, name)
                dt = dtype or lt.get_matmul_desc_attribute_dtype(attr)
                lt.matmul_desc_set_attribute(desc, attr, host(value, dt), np.dtype(dt).itemsize)
            set_desc("TRANSA", 0)
            set_desc("TRANSB", 0)
            set_desc("EPILOGUE", _EPILOGUES[call.epilogue])
            if call.bias is not None:
                set_desc("BIAS_POINTER", ins[call.bias], np.uint64)
            if "aux" in leaf:
                set_desc("EPILOGUE_AUX_POINTER", leaf["aux"], np.uint64)
                set_desc("EPILOGUE_AUX_LD", plan.d.ld)
                set_desc("EPILOGUE_AUX_BATCH_STRIDE", plan.d.batch_stride)
            if call.is_f8:
                scales = (call.b_scale, call.a_scale) if plan.swapped else (call.a_scale, call.b_scale)
                set_desc("A_SCALE_POINTER", ins[scales[0]], np.uint64)
                set_desc("B_SCALE_POINTER", ins[scales[1]], np.uint64)
                if call.output_is_f8 and call.d_scale is not None:
                    set_desc("D_SCALE_POINTER", ins[call.d_scale], np.uint64)
                if "amax" in leaf:
                    set_desc("AMAX_D_POINTER", leaf["amax"], np.uint64)
            for layout in (plan.a, plan.b, plan.c, plan.d):
                layouts.append(_matrix_layout(lt, layout))
            ws_bytes = outs[call.workspace_index].shape.element_count() if call.workspace_index is not None else 0
            attr = lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
            lt.matmul_preference_set_attribute(pref, attr, host(ws_bytes, np.uint64), 8)
            algo = self._algorithm(lt, handle, desc, layouts, pref)
            a_ptr, b_ptr = (ins[call.b], ins[call.a]) if plan.swapped else (ins[call.a], ins[call.b])
            c_ptr = ins[call.c] if call.c is not None else 0
            scale = _SCALE_NUMPY[self.scale_type]
            alpha = complex(*call.alpha) if np.dtype(scale).kind == "c" else call.alpha[0]
            lt.matmul(handle, desc, host(alpha, scale), a_ptr, layouts[0], b_ptr, layouts[1],
                      host(call.beta, scale), c_ptr, layouts[2], leaf["d"], layouts[3], algo.ptr,
                      leaf.get("workspace", 0), ws_bytes, 0)
            platform.synchronize()
        finally:
            for layout in layouts:
                lt.matrix_layout_destroy(layout)
            lt.matmul_preference_destroy(pref)
            lt.matmul_desc_destroy(desc)

    def describe(self) -> str:
        """The types and epilogue cuBLASLt was asked for, for messages."""
        p, call = self.plan, self.call
        parts = [f"A {p.a.element_type}", f"B {p.b.element_type}", f"C {p.c.element_type}", f"D {p.d.element_type}",
                 f"epilogue {getattr(call.epilogue, 'name', call.epilogue)}"]
        if call.bias is not None:
            parts.append(f"bias {self.inst.operands[call.bias].shape.element_type}")
        if "amax" in call.result_leaves():
            parts.append("amax of D")
        return ", ".join(parts)

    def _algorithm(self, lt: Any, handle: int, desc: int, layouts: list, pref: int) -> Any:
        """Entry ``selected_algorithm`` of the heuristic list (XLA asks for 1 when it is 0, else 128)."""
        # legacy cuBLAS's number is a cublasGemmAlgo_t, not an index of this list: first heuristic
        selected = max(0, self.call.selected_algorithm) if self.call.target != LEGACY_GEMM else 0
        want = 1 if selected == 0 else 128
        results = lt.MatmulHeuristicResult(want)
        count = np.zeros(1, np.int32)
        try:
            lt.matmul_algo_get_heuristic(handle, desc, *layouts, pref, want, results.ptr, count.ctypes.data)
        except Exception as e:  # nvmath's cuBLASLtError: refuse by name what cuBLASLt cannot do
            if "NOT_SUPPORTED" not in str(e):
                raise
            raise HloUnsupportedError(f"custom-call '%{self.inst.name}': cuBLASLt does not support this GEMM on "
                                      f"this GPU ({self.describe()}; CUBLAS_STATUS_NOT_SUPPORTED): compile with "
                                      "--gemm=generated", self.inst.location) from None
        if count[0] <= selected:
            raise HloUnsupportedError(f"custom-call '%{self.inst.name}': cuBLASLt offers {int(count[0])} algorithms "
                                      f"for this GEMM, the config selects number {selected}", self.inst.location)
        return _Algo(results, results.ptr + selected * _HEURISTIC_RESULT_BYTES)


class _Algo:
    """A heuristic result kept alive while its algorithm pointer is used."""

    def __init__(self, results: Any, ptr: int):
        self.results, self.ptr = results, ptr


def _matrix_layout(lt: Any, m: MatrixLayout) -> int:
    """A cublasLtMatrixLayout_t for ``m`` (order, batch count and stride set as XLA does)."""
    rows_ld = (m.rows, m.cols, m.ld)
    layout = lt.matrix_layout_create(_CUDA_TYPES[m.element_type], *rows_ld)
    for name, value in (("ORDER", 0 if m.order == COLUMN else 1), ("BATCH_COUNT", m.batch),
                        ("STRIDED_BATCH_OFFSET", m.batch_stride)):
        attr = getattr(lt.MatrixLayoutAttribute, name)
        dt = lt.get_matrix_layout_attribute_dtype(attr)
        buf = np.array([value], dtype=dt)
        lt.matrix_layout_set_attribute(layout, attr, buf.ctypes.data, buf.nbytes)
    return layout


STEPS: dict[str, Callable[[HloInstruction, Any], Step]] = {t: CublasLtMatmul for t in sorted(GEMM_TARGETS)}
