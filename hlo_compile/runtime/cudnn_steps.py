"""Steps that run cudnn library calls on the cuda platform (see ``library_steps.py``).

The cuDNN convolution calls (``hlo/calls/conv.py``) through the cuDNN frontend's Python graph
API (``import cudnn``, package nvidia-cudnn-frontend; notes/xla-gpu-calls.md §7.3): one graph
per call, built on its first run and kept, with the call's forward window
(``conv_fprop``/``conv_dgrad``/``conv_wgrad``, pre/post padding, strides, dilations). Tensors
are described in cuDNN's canonical order (N, C, spatial...; filters K, C, spatial...) with the
element strides of our buffers' layouts, so no data is moved; a 1-D convolution gets a unit
spatial dimension in front, as XLA passes it. Bias-activation runs only in the form cuDNN's
graph takes without scalars: ``relu?(conv + side_input + bias)`` (scales 1); other scales and
activations, reversed windows, and graph capture are refused by name.

Calls cuDNN does not take (``hlo/calls/library_limits.py``: layouts other than packed NCHW/NHWC and
KCRS/KRSC, the bias-activation forms above) are lowered to our kernels before they get here;
the check stays as a guard. Run on an H200 (cuDNN 9, frontend 1.20) by ``tests/gpu/test_gpu_libraries.py``.
"""
from __future__ import annotations

from typing import Any, Callable

from ..hlo import HloInstruction, Shape
from ..hlo.calls.conv import TARGET_KINDS, ConvCall, ConvKind, parse_conv_call
from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.library_limits import cudnn_conv_refusal, cudnn_dims_strides
from .nvidia_bindings import require_binding
from .platform import Platform
from .steps import Frame, Step
from .values import Buffer

_HANDLES: dict[int, Any] = {}   # id(platform) -> cudnn handle


class CudnnConvolution(Step):
    """One cuDNN convolution call: its result and a (zeroed-on-allocation-free) scratch leaf."""

    def __init__(self, inst: HloInstruction, builder: Any):
        super().__init__(inst)
        self.call = parse_conv_call(inst)
        why = cudnn_conv_refusal(self.call)
        if why:
            raise HloUnsupportedError(f"custom-call %{inst.name} ({self.call.target}) through cuDNN: {why}; "
                                      "use --conv=generated", inst.location)
        self.graph: Any = None
        self.tensors: dict[str, Any] = {}
        self.workspace = 0

    def run(self, platform: Platform, frame: Frame) -> None:
        device = getattr(platform, "device", None)
        if platform.name != "cuda" or device is None:
            raise HloUnsupportedError(f"custom-call %{self.inst.name}: cuDNN runs on the cuda platform only "
                                      "(not inside a captured graph)", self.inst.location)
        cudnn = require_binding("cudnn", self.inst)
        handle = _HANDLES.get(id(platform))
        if handle is None:
            handle = _HANDLES[id(platform)] = cudnn.create_handle()
        if self.graph is None:
            self._build(cudnn, handle)
        call = self.call
        out = Buffer(call.result, platform.allocate(call.result))
        scratch = Buffer(call.scratch, platform.allocate(call.scratch))
        work = platform.allocate(Shape.array("u8", [max(self.workspace, 1)]))
        # a side input scaled by 0 is passed but not in the graph: cuDNN never reads it
        pointers = {self.tensors[role]: frame.values[op].data.ptr
                    for role, op in zip(call.operand_roles, self.inst.operands) if role in self.tensors}
        pointers[self.tensors["out"]] = out.data.ptr
        try:
            self.graph.execute(pointers, work.ptr, handle=handle)
            platform.synchronize()
        finally:
            platform.free(work)
        value = [out, scratch]
        frame.own(value)
        frame.values[self.inst] = value

    # ---- the graph ---------------------------------------------------------------------------

    def _build(self, cudnn: Any, handle: Any) -> None:
        call = self.call
        types = {"f16": cudnn.data_type.HALF, "bf16": cudnn.data_type.BFLOAT16, "f32": cudnn.data_type.FLOAT,
                 "f64": cudnn.data_type.DOUBLE, "s8": cudnn.data_type.INT8, "s32": cudnn.data_type.INT32}
        compute = {"f64": cudnn.data_type.DOUBLE}.get(call.x.element_type,
                                                      cudnn.data_type.INT32 if call.is_integer else cudnn.data_type.FLOAT)
        g = cudnn.pygraph(io_data_type=types[call.x.element_type], intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=compute, handle=handle)

        def tensor(role: str) -> Any:
            shape = {"x": call.x, "w": call.w, "y": call.y}[role]
            dim, stride = cudnn_dims_strides(call, role)
            return g.tensor(name=role, dim=dim, stride=stride, data_type=types[shape.element_type])

        pads = [(wd.padding_low, wd.padding_high) for wd in call.window]
        conv = {"pre_padding": [lo for lo, _ in pads], "post_padding": [hi for _, hi in pads],
                "stride": [wd.stride for wd in call.window], "dilation": [wd.window_dilation for wd in call.window]}
        if call.spatial_rank == 1:   # a unit spatial dimension in front, as XLA passes 1-D convolutions
            conv = {k: ([0] if "padding" in k else [1]) + v for k, v in conv.items()}
        roles = call.operand_roles
        ins = {r: tensor(r) for r in roles if r in ("x", "w", "y")}
        if call.kind is ConvKind.BACKWARD_INPUT:
            out = g.conv_dgrad(loss=ins["y"], filter=ins["w"], **conv)
        elif call.kind is ConvKind.BACKWARD_FILTER:
            out = g.conv_wgrad(image=ins["x"], loss=ins["y"], **conv)
        else:
            out = g.conv_fprop(image=ins["x"], weight=ins["w"], compute_data_type=compute, **conv)
            if call.kind is ConvKind.BIAS_ACTIVATION:
                if call.uses_side_input:
                    dim, stride = cudnn_dims_strides(call, "y")
                    ins["side_input"] = g.tensor(name="side_input", dim=dim, stride=stride,
                                                 data_type=types[call.side_input.element_type])
                    out = g.add(a=out, b=ins["side_input"])
                ins["bias"] = g.tensor(name="bias", dim=_bias_dims(call), stride=_bias_strides(call),
                                       data_type=types[call.bias.element_type])
                out = g.add(a=out, b=ins["bias"])
                if call.activation == "kRelu":
                    out = g.relu(input=out)
        dim, stride = cudnn_dims_strides(call, call.result_role)
        out.set_output(True).set_dim(dim).set_stride(stride).set_data_type(types[call.result.element_type])
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if call.x.element_type in ("f32", "f64"):
            # full precision, as the interpreter (and XLA's HIGHEST) computes: no TF32 tensor-core
            # engines, no inputs converted down (the first GPU run measured 2.4e-4 with them)
            notes = cudnn.numerical_note
            g.deselect_numeric_notes([notes.TENSOR_CORE, notes.DOWN_CONVERT_INPUTS, notes.REDUCED_PRECISION_REDUCTION])
        g.check_support()
        g.build_plans()
        self.workspace = int(g.get_workspace_size())
        self.tensors = {**ins, "out": out}
        self.graph = g


def _bias_dims(call: ConvCall) -> list[int]:
    return [1, call.bias.dimensions[0]] + [1] * max(call.spatial_rank, 2)


def _bias_strides(call: ConvCall) -> list[int]:
    return [call.bias.dimensions[0], 1] + [1] * max(call.spatial_rank, 2)


STEPS: dict[str, Callable[[Any, Any], Any]] = {t: CudnnConvolution for t in TARGET_KINDS}
