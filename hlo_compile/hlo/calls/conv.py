"""XLA:GPU's cuDNN convolution custom-calls, read once for the interpreter and the lowering.

A ``__cudnn$conv*`` custom-call carries a convolution's ``window``, ``dim_labels`` and
``feature_group_count`` (decoded by the parser exactly as on ``convolution``), a
``cudnn_conv_backend_config`` and a tuple result ``(conv result, u8[scratch])``
(notes/xla-gpu-calls.md §2). The window and dim_labels ALWAYS describe the forward convolution
``y = conv(x, w)``; the kind says which of x, w, y are operands and which is the result:

=================  =====================================  =========
kind               operands                               result
=================  =====================================  =========
forward            x, w                                   y
bias-activation    x, w, bias, [side_input]               y
backward input     dy (y role), w                         dx (x role)
backward filter    x, dy (y role)                         dw (w role)
=================  =====================================  =========

``parse_conv_call`` checks everything the two evaluators rely on and refuses (with
``HloUnsupportedError`` naming the call, its target and its line) what XLA's cuDNN runner would
not run or what we do not know the meaning of: int8x32 vectorized/reordered layouts, a result
scale other than 1 on an unfused convolution, activations other than none/relu/relu6/elu/
leaky-relu, s8 results (cuDNN's float->s8 rounding is unverified), inconsistent shapes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..attributes import ConvDimensionNumbers, WindowDim
from ..backend_config import backend_config, config_float
from ..element_types import is_float
from ..errors import HloUnsupportedError, SourceLocation
from ..ir import HloInstruction
from ..shape import Shape


class ConvKind(str, Enum):
    FORWARD = "forward"
    BIAS_ACTIVATION = "bias-activation"
    BACKWARD_INPUT = "backward input"
    BACKWARD_FILTER = "backward filter"


TARGET_KINDS: dict[str, ConvKind] = {
    "__cudnn$convForward": ConvKind.FORWARD,
    "__cudnn$convBiasActivationForward": ConvKind.BIAS_ACTIVATION,
    "__cudnn$convBackwardInput": ConvKind.BACKWARD_INPUT,
    "__cudnn$convBackwardFilter": ConvKind.BACKWARD_FILTER,
}

# stream_executor.dnn.ActivationMode: the enum's numbers, for configs that print it as a number
_ACTIVATION_NUMBERS = {0: "kNone", 1: "kSigmoid", 2: "kRelu", 3: "kRelu6", 4: "kReluX", 5: "kTanh",
                       6: "kBandPass", 7: "kElu", 8: "kLeakyRelu", 9: "kGeluExact"}
# the activations XLA fuses into a convolution (CudnnFusedConvRewriter)
ACTIVATIONS = ("kNone", "kRelu", "kRelu6", "kElu", "kLeakyRelu")
FLOAT_TYPES = ("f16", "bf16", "f32", "f64")
# the config keys of CudnnConvBackendConfig (old dumps and hand-written tests give it bare)
_CONFIG_KEYS = frozenset({"algorithm", "conv_result_scale", "activation_mode", "side_input_scale",
                          "leakyrelu_alpha", "reordered_int8_nchw_vect", "serialized_graph"})


@dataclass(frozen=True)
class ConvCall:
    """One cuDNN convolution call. ``x``, ``w``, ``y`` are the shapes of the forward
    convolution's input, kernel and output, whichever of them is the result."""
    name: str
    target: str
    kind: ConvKind
    window: tuple[WindowDim, ...]
    dnums: ConvDimensionNumbers
    feature_group_count: int
    x: Shape
    w: Shape
    y: Shape
    result: Shape              # leaf 0 of the call's tuple, with its declared layout
    scratch: Shape             # the last leaf, u8[N]: contents undefined
    bias: Shape | None = None
    side_input: Shape | None = None
    conv_result_scale: float = 1.0
    side_input_scale: float = 0.0
    activation: str = "kNone"
    leakyrelu_alpha: float = 0.0
    location: SourceLocation | None = field(default=None, compare=False)

    @property
    def result_role(self) -> str:
        """Which forward tensor the call computes: "y", "x" (backward input) or "w"."""
        return {ConvKind.BACKWARD_INPUT: "x", ConvKind.BACKWARD_FILTER: "w"}.get(self.kind, "y")

    @property
    def operand_roles(self) -> tuple[str, ...]:
        """The role of each operand, in order ("x", "w", "y", "bias", "side_input")."""
        if self.kind is ConvKind.BACKWARD_INPUT:
            return ("y", "w")
        if self.kind is ConvKind.BACKWARD_FILTER:
            return ("x", "y")
        if self.kind is ConvKind.BIAS_ACTIVATION:
            return ("x", "w", "bias") + (("side_input",) if self.side_input is not None else ())
        return ("x", "w")

    def operand_index(self, role: str) -> int | None:
        roles = self.operand_roles
        return roles.index(role) if role in roles else None

    @property
    def spatial_rank(self) -> int:
        return len(self.dnums.input_spatial_dimensions)

    @property
    def reversed(self) -> bool:
        """A true convolution (every window dimension reversed) rather than a cross-correlation."""
        return bool(self.window) and all(wd.window_reversal for wd in self.window)

    @property
    def is_integer(self) -> bool:
        return not is_float(self.x.element_type)

    @property
    def compute_type(self) -> str:
        """The type cuDNN's epilogue computes in: f64 for f64 convolutions, else f32."""
        return "f64" if self.y.element_type == "f64" else "f32"

    @property
    def uses_side_input(self) -> bool:
        return self.side_input is not None and self.side_input_scale != 0.0

    def describe(self) -> str:
        return f"custom-call %{self.name} ({self.target})"


def parse_conv_call(inst: HloInstruction) -> ConvCall:
    """The ``ConvCall`` of custom-call ``inst``; ``HloUnsupportedError`` for anything malformed
    or outside what XLA:GPU runs (see the module docstring)."""
    target = inst.attr("custom_call_target", None)
    if target not in TARGET_KINDS:
        raise HloUnsupportedError(f"custom-call %{inst.name}: '{target}' is not a cuDNN convolution target",
                                  inst.location)
    return _Reader(inst, target).read()


class _Reader:
    def __init__(self, inst: HloInstruction, target: str):
        self.inst, self.target, self.kind = inst, target, TARGET_KINDS[target]

    def refuse(self, why: str) -> HloUnsupportedError:
        return HloUnsupportedError(f"custom-call %{self.inst.name} ({self.target}): {why}", self.inst.location)

    def read(self) -> ConvCall:
        inst, kind = self.inst, self.kind
        result, scratch = self._result_leaves()
        dn = inst.attr("dim_labels", None)
        if not isinstance(dn, ConvDimensionNumbers):
            raise self.refuse("needs dim_labels naming every dimension (e.g. dim_labels=b01f_01io->b01f)")
        ops = [o.shape for o in inst.operands]
        counts = {ConvKind.BIAS_ACTIVATION: (3, 4)}.get(kind, (2,))
        if len(ops) not in counts:
            raise self.refuse(f"expects {' or '.join(map(str, counts))} operands, got {len(ops)}")
        for k, s in enumerate(ops):
            if not s.is_array:
                raise self.refuse(f"operand {k} is not an array")
        if kind is ConvKind.BACKWARD_INPUT:
            y, w, x = ops[0], ops[1], result
        elif kind is ConvKind.BACKWARD_FILTER:
            x, y, w = ops[0], ops[1], result
        else:
            x, w, y = ops[0], ops[1], result
        config = self._config()
        if config.get("reordered_int8_nchw_vect"):
            raise self.refuse("int8x32 reordered filter (reordered_int8_nchw_vect) is not supported")
        nsp = len(dn.input_spatial_dimensions)
        for role, s in (("x", x), ("w", w), ("y", y)):
            if s.rank != nsp + 2:
                vect = " (an int8 vectorized NCHW_VECT_C layout?)" if s.rank == nsp + 3 else ""
                raise self.refuse(f"the {role} tensor {s.to_text(False)} has rank {s.rank}, dim_labels give "
                                  f"{nsp + 2}{vect}; vectorized int8 layouts are not supported")
        if nsp > 3:
            raise self.refuse(f"{nsp} spatial dimensions; cuDNN takes at most 3")
        window = self._window(dn, w, nsp)
        fgc = int(inst.attr("feature_group_count", 1))
        if int(inst.attr("batch_group_count", 1)) != 1:
            raise self.refuse("batch_group_count must be 1 on a cuDNN convolution")
        self._check_types(x, w, y)
        self._check_dims(dn, window, fgc, x, w, y)
        bias = side = None
        if kind is ConvKind.BIAS_ACTIVATION:
            bias = ops[2]
            out_features = y.dimensions[dn.output_feature_dimension]
            if bias.rank != 1 or bias.dimensions[0] != out_features:
                raise self.refuse(f"bias {bias.to_text(False)} must be rank 1 over the {out_features} output features")
            if bias.element_type not in (y.element_type, "f32"):
                raise self.refuse(f"bias of type {bias.element_type} with a {y.element_type} result")
            if len(ops) == 4:
                side = ops[3]
                if side.dimensions != y.dimensions or side.element_type != y.element_type:
                    raise self.refuse(f"side input {side.to_text(False)} must have the result's shape "
                                      f"{y.to_text(False)}")
        scale = config_float(config.get("conv_result_scale"), 0.0)
        side_scale = config_float(config.get("side_input_scale"), 0.0)
        alpha = config_float(config.get("leakyrelu_alpha"), 0.0)
        activation = self._activation(config.get("activation_mode"))
        if kind is not ConvKind.BIAS_ACTIVATION:
            if scale != 1.0:
                raise self.refuse(f"conv_result_scale is {scale:g}; XLA's cuDNN runner requires 1 on a "
                                  "convolution without bias/activation (an absent config means 0)")
            if activation != "kNone":
                raise self.refuse(f"activation {activation} on a convolution without bias/activation")
        if side is None and side_scale != 0.0:
            raise self.refuse(f"side_input_scale is {side_scale:g} but there is no side input")
        return ConvCall(inst.name, self.target, kind, window, dn, fgc, x, w, y, result, scratch, bias, side,
                        scale, side_scale, activation, alpha, inst.location)

    # ---- pieces -----------------------------------------------------------------------------

    def _result_leaves(self) -> tuple[Shape, Shape]:
        shape = self.inst.shape
        if not shape.is_tuple or len(shape.tuple_shapes) != 2:
            raise self.refuse(f"expects a result (conv result, u8[scratch]), got {shape.to_text(False)}")
        result, scratch = shape.tuple_shapes
        if not result.is_array:
            raise self.refuse("the first result leaf must be an array")
        if not scratch.is_array or scratch.element_type != "u8" or scratch.rank != 1:
            raise self.refuse(f"the last result leaf must be the u8[N] scratch buffer, got {scratch.to_text(False)}")
        return result, scratch

    def _config(self) -> dict[str, Any]:
        try:
            cfg = backend_config(self.inst)
        except HloUnsupportedError:
            raise self.refuse("its backend_config is not valid JSON") from None
        inner = cfg.get("cudnn_conv_backend_config")
        if isinstance(inner, dict):
            return inner
        if inner is not None:
            raise self.refuse("cudnn_conv_backend_config is not an object")
        # older dumps and XLA's hand-written tests give CudnnConvBackendConfig itself
        return cfg if _CONFIG_KEYS & set(cfg) else {}

    def _activation(self, raw: Any) -> str:
        if raw is None or raw == "":
            return "kNone"
        if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit()):
            name = _ACTIVATION_NUMBERS.get(int(raw), str(raw))
        else:
            name = str(raw)
        if name not in ACTIVATIONS:
            raise self.refuse(f"activation_mode {name} is not supported (XLA fuses {', '.join(ACTIVATIONS)})")
        if name != "kNone" and self.kind is not ConvKind.BIAS_ACTIVATION:
            raise self.refuse(f"activation {name} on a convolution without bias/activation")
        return name

    def _window(self, dn: ConvDimensionNumbers, w: Shape, nsp: int) -> tuple[WindowDim, ...]:
        window = self.inst.attr("window", None)
        if window is None:
            window = tuple(WindowDim(size=w.dimensions[d]) for d in dn.kernel_spatial_dimensions)
        if len(window) != nsp:
            raise self.refuse(f"window has {len(window)} dimensions, dim_labels {nsp} spatial dimensions")
        for k, wd in enumerate(window):
            if wd.base_dilation != 1:
                raise self.refuse("lhs_dilate on a cuDNN convolution (XLA legalizes it away)")
            if wd.size != w.dimensions[dn.kernel_spatial_dimensions[k]]:
                raise self.refuse(f"window size {wd.size} differs from the kernel's spatial size "
                                  f"{w.dimensions[dn.kernel_spatial_dimensions[k]]} in dimension {k}")
            if wd.size <= 0 or wd.stride <= 0 or wd.window_dilation <= 0:
                raise self.refuse("window sizes, strides and dilations must be positive")
        if len({wd.window_reversal for wd in window}) > 1:
            raise self.refuse("window reversal must be all or none (cuDNN convolves or cross-correlates)")
        return tuple(window)

    def _check_types(self, x: Shape, w: Shape, y: Shape) -> None:
        tx, tw, ty = x.element_type, w.element_type, y.element_type
        if tx in FLOAT_TYPES:
            if not tx == tw == ty:
                raise self.refuse(f"element types x {tx}, w {tw}, y {ty} differ")
            return
        if tx == tw == "s8" and self.kind in (ConvKind.FORWARD, ConvKind.BIAS_ACTIVATION):
            if ty == "s8":
                raise self.refuse("s8 results are not supported (cuDNN's float to s8 rounding is unverified)")
            if ty in ("s32", "f32") and not (ty == "s32" and self.kind is ConvKind.BIAS_ACTIVATION):
                return
        raise self.refuse(f"element types x {tx}, w {tw}, y {ty} are not a cuDNN convolution's")

    def _check_dims(self, dn: ConvDimensionNumbers, window: tuple[WindowDim, ...], fgc: int,
                    x: Shape, w: Shape, y: Shape) -> None:
        xd, wd, yd = x.dimensions, w.dimensions, y.dimensions
        if 0 in xd or 0 in wd or 0 in yd:
            raise self.refuse("zero-element tensors (XLA does not send them to cuDNN)")
        c, o = xd[dn.input_feature_dimension], wd[dn.kernel_output_feature_dimension]
        if fgc <= 0 or c % fgc or o % fgc:
            raise self.refuse(f"feature_group_count {fgc} must divide the input features {c} and output features {o}")
        if wd[dn.kernel_input_feature_dimension] != c // fgc:
            raise self.refuse(f"kernel input features {wd[dn.kernel_input_feature_dimension]} must be the input "
                              f"features {c} / feature_group_count {fgc}")
        if yd[dn.output_feature_dimension] != o:
            raise self.refuse(f"output features {yd[dn.output_feature_dimension]} differ from the kernel's {o}")
        if yd[dn.output_batch_dimension] != xd[dn.input_batch_dimension]:
            raise self.refuse(f"output batch {yd[dn.output_batch_dimension]} differs from the input batch "
                              f"{xd[dn.input_batch_dimension]}")
        for k, win in enumerate(window):
            xs = xd[dn.input_spatial_dimensions[k]]
            want = forward_output_size(xs, win)
            got = yd[dn.output_spatial_dimensions[k]]
            if got != want:
                raise self.refuse(f"spatial dimension {k}: an input of size {xs} gives a forward output of size "
                                  f"{want} under the window, but the y tensor has {got}")


def forward_output_size(size: int, wd: WindowDim) -> int:
    """The forward convolution's output size along one spatial dimension."""
    padded = size + wd.padding_low + wd.padding_high
    span = (wd.size - 1) * wd.window_dilation + 1
    return 0 if padded < span else (padded - span) // wd.stride + 1
