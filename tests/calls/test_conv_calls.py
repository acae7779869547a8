"""XLA:GPU's cuDNN convolution custom-calls (``__cudnn$convForward``, ``convBackwardInput``,
``convBackwardFilter``, ``convBiasActivationForward``; notes/xla-gpu-calls.md §2) on the
interpreter and the host.

Each case is a module shaped as XLA:GPU writes it (tuple result with a ``u8`` scratch leaf,
``window``/``dim_labels`` of the forward convolution, ``cudnn_conv_backend_config``) and,
written separately from the notes' formulas, the plain HLO it stands for: a ``convolution``
plus epilogue ops for forward and bias-activation, ``convolution(dy, reverse(w))`` with lhs
dilation for backward input (one per group, concatenated, for grouped ones), and the
original ``convolution(x, dy)`` with batch/feature roles swapped and ``batch_group_count`` for
backward filter. Checked: (a) the host (the call lowered to our kernels) against the
interpreter on the call; (b) the interpreter on the call against the interpreter on the plain
HLO; (c) with jax importable, XLA:CPU (``shared/tools/xla_ref.py``) on the plain HLO against
the interpreter on the call; (d) refusals exit 2 naming the call and its line.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner
from xla_reference import xla_ref_module as _xla_ref

from hlo_compile import parse_module
from hlo_compile.cli.run import main as hlo_run
from hlo_compile.codegen.compiler import plan_module, prepare_module
from hlo_compile.hlo.calls.conv import ConvKind, parse_conv_call
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime.executable import compile_executable

TARGETS = {"fwd": "__cudnn$convForward", "bias": "__cudnn$convBiasActivationForward",
           "bwd_input": "__cudnn$convBackwardInput", "bwd_filter": "__cudnn$convBackwardFilter"}
NP_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64, "s8": np.int8}
# max |got - want| / max |want| allowed: two units in the last place of the result type at its
# largest magnitude, and accumulation-order noise for f32
TOLERANCE = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 2e-5, "f64": 1e-12, "s32": 0.0}


# ---- a convolution problem and its two texts ---------------------------------------------------------

@dataclass(frozen=True)
class Conv:
    """A forward convolution ``y = conv(x, w)`` in the terms of a cuDNN call's attributes."""
    labels: str                      # dim_labels, e.g. b01f_01io->b01f
    n: int
    c: int
    o: int
    x_sp: tuple[int, ...]
    k_sp: tuple[int, ...]
    stride: tuple[int, ...] = ()
    pad: tuple[tuple[int, int], ...] = ()
    dil: tuple[int, ...] = ()
    groups: int = 1
    et: str = "f32"
    out_et: str | None = None        # the result type where it differs (s8 convolutions)
    reversed: bool = False
    layouts: dict = field(default_factory=dict, hash=False)   # role -> minor_to_major

    @property
    def nsp(self) -> int:
        return len(self.x_sp)

    def s(self, k: int) -> int:
        return self.stride[k] if self.stride else 1

    def p(self, k: int) -> tuple[int, int]:
        return self.pad[k] if self.pad else (0, 0)

    def d(self, k: int) -> int:
        return self.dil[k] if self.dil else 1

    @property
    def y_sp(self) -> tuple[int, ...]:
        out = []
        for k in range(self.nsp):
            lo, hi = self.p(k)
            span = (self.k_sp[k] - 1) * self.d(k) + 1
            out.append((self.x_sp[k] + lo + hi - span) // self.s(k) + 1)
        return tuple(out)

    def part(self, role: str) -> str:
        lhs, rest = self.labels.split("_")
        rhs, out = rest.split("->")
        return {"x": lhs, "w": rhs, "y": out}[role]

    def dims(self, role: str) -> list[int]:
        sizes = {"x": {"b": self.n, "f": self.c}, "w": {"i": self.c // self.groups, "o": self.o},
                 "y": {"b": self.n, "f": self.o}}[role]
        sp = {"x": self.x_sp, "w": self.k_sp, "y": self.y_sp}[role]
        return [sizes[ch] if ch in sizes else sp[int(ch)] for ch in self.part(role)]

    def type_of(self, role: str) -> str:
        return (self.out_et or self.et) if role == "y" else self.et

    def shape(self, role: str, et: str | None = None) -> str:
        layout = self.layouts.get(role)
        text = f"{et or self.type_of(role)}[{','.join(map(str, self.dims(role)))}]"
        return text + ("{" + ",".join(map(str, layout)) + "}" if layout else "")

    def window(self) -> str:
        parts = [f"size={'x'.join(map(str, self.k_sp))}"]
        if self.stride:
            parts.append(f"stride={'x'.join(map(str, self.stride))}")
        if self.pad:
            parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in self.pad))
        if self.dil:
            parts.append(f"rhs_dilate={'x'.join(map(str, self.dil))}")
        if self.reversed:
            parts.append("rhs_reversal=" + "x".join("1" for _ in self.k_sp))
        return "{" + " ".join(parts) + "}"

    def groups_attr(self, count: int | None = None, name: str = "feature_group_count") -> str:
        g = self.groups if count is None else count
        return f", {name}={g}" if g != 1 else ""

    def spatial_positions(self, role: str) -> list[int]:
        part = self.part(role)
        return [part.index(str(k)) for k in range(self.nsp)]


@dataclass(frozen=True)
class Epilogue:
    activation: str = "kNone"
    scale: float = 1.0
    side_scale: float = 0.0
    side: bool = False
    alpha: float = 0.0


def config(e: Epilogue = Epilogue()) -> str:
    inner = (f'"activation_mode":"{e.activation}","conv_result_scale":{e.scale:g},'
             f'"side_input_scale":{e.side_scale:g},"leakyrelu_alpha":{e.alpha:g}')
    return ('{"operation_queue_id":"0","wait_on_operation_queues":[],"cudnn_conv_backend_config":{'
            + inner + '},"force_earliest_schedule":false}')


def operand_roles(kind: str, e: Epilogue) -> list[str]:
    return {"fwd": ["x", "w"], "bias": ["x", "w", "bias"] + (["side"] if e.side else []),
            "bwd_input": ["y", "w"], "bwd_filter": ["x", "y"]}[kind]


def result_role(kind: str) -> str:
    return {"bwd_input": "x", "bwd_filter": "w"}.get(kind, "y")


def _param_shape(cv: Conv, role: str) -> str:
    if role == "bias":
        return f"{cv.out_et or cv.et}[{cv.o}]"
    if role == "side":
        return cv.shape("y")
    return cv.shape(role)


def _params(cv: Conv, roles: list[str]) -> tuple[str, list[str]]:
    sig = ", ".join(f"{r}: {_param_shape(cv, r)}" for r in roles)
    lines = [f"  %{r} = {_param_shape(cv, r)} parameter({i})" for i, r in enumerate(roles)]
    return sig, lines


def call_text(kind: str, cv: Conv, e: Epilogue = Epilogue(), scratch: int = 0, whole_tuple: bool = False,
              extra: str = "") -> str:
    """The module as XLA:GPU writes it."""
    roles = operand_roles(kind, e)
    res = cv.shape(result_role(kind))
    sig, lines = _params(cv, roles)
    ops = ", ".join(f"{_param_shape(cv, r)} %{r}" for r in roles)
    name = {"fwd": "cudnn-conv", "bias": "cudnn-conv-bias-activation", "bwd_input": "cudnn-conv-bw-input",
            "bwd_filter": "cudnn-conv-bw-filter"}[kind]
    tup = f"({res}, u8[{scratch}]{{0}})"
    lines.append(f"  %{name} = {tup} custom-call({ops}), window={cv.window()}, dim_labels={cv.labels}"
                 f"{cv.groups_attr()}, custom_call_target=\"{TARGETS[kind]}\"{extra}, backend_config={config(e)}")
    if whole_tuple:
        lines[-1] = lines[-1].replace(f"  %{name}", f"  ROOT %{name}", 1)
        ret = tup
    else:
        lines.append(f"  ROOT %get-tuple-element = {res} get-tuple-element({tup} %{name}), index=0")
        ret = res
    return f"HloModule {kind}\n\nENTRY %main ({sig}) -> {ret} {{\n" + "\n".join(lines) + "\n}\n"


def _swap(labels: str, a: str, b: str) -> str:
    return labels.translate(str.maketrans({a: b, b: a}))


def plain_text(kind: str, cv: Conv, e: Epilogue = Epilogue()) -> str:
    """The plain HLO the call stands for, written from the notes' formulas."""
    roles = operand_roles(kind, e)
    sig, lines = _params(cv, roles)
    res_role = result_role(kind)
    res = cv.shape(res_role)
    if kind in ("fwd", "bias"):
        et = cv.out_et or cv.et
        ct = "f64" if et == "f64" else "f32"
        conv_et = "s32" if cv.et == "s8" else (et if kind == "fwd" else ct)
        lines.append(f"  %conv = {cv.shape('y', conv_et)} convolution(%x, %w), window={cv.window()}, "
                     f"dim_labels={cv.labels}{cv.groups_attr()}")
        last = "conv"
        if conv_et != (ct if kind == "bias" else et):
            lines.append(f"  %conv_c = {cv.shape('y', ct if kind == 'bias' else et)} convert(%conv)")
            last = "conv_c"
        if kind == "bias":
            last = _plain_epilogue(lines, cv, e, last, ct, et)
        lines[-1] = lines[-1].replace(f"  %{last}", f"  ROOT %{last}", 1)
    elif kind == "bwd_input":
        _plain_backward_input(lines, cv, res)
    else:
        _plain_backward_filter(lines, cv, res)
    return f"HloModule plain_{kind}\n\nENTRY %main ({sig}) -> {res} {{\n" + "\n".join(lines) + "\n}\n"


def _plain_epilogue(lines: list[str], cv: Conv, e: Epilogue, t: str, ct: str, et: str) -> str:
    y = cv.shape("y", ct)
    yp = cv.shape("y", "pred")
    feat = cv.part("y").index("f")

    def splat(name: str, v: float) -> str:
        lines.append(f"  %{name}_s = {ct}[] constant({v!r})")
        lines.append(f"  %{name} = {y} broadcast(%{name}_s), dimensions={{}}")
        return name
    if e.scale != 1.0:
        lines.append(f"  %scaled = {y} multiply(%{t}, %{splat('alpha', e.scale)})")
        t = "scaled"
    if e.side and e.side_scale != 0.0:
        lines.append(f"  %side_c = {y} convert(%side)")
        lines.append(f"  %side_s = {y} multiply(%side_c, %{splat('beta', e.side_scale)})")
        lines.append(f"  %with_side = {y} add(%{t}, %side_s)")
        t = "with_side"
    lines.append(f"  %bias_c = {ct}[{cv.o}] convert(%bias)")
    lines.append(f"  %bias_b = {y} broadcast(%bias_c), dimensions={{{feat}}}")
    lines.append(f"  %biased = {y} add(%{t}, %bias_b)")
    t = "biased"
    if e.activation != "kNone":
        zero = splat("zero", 0.0)
        if e.activation == "kRelu":
            lines.append(f"  %act = {y} maximum(%{t}, %{zero})")
        elif e.activation == "kRelu6":
            six = splat("six", 6.0)
            lines.append(f"  %act = {y} clamp(%{zero}, %{t}, %{six})")
        else:
            lines.append(f"  %gt = {yp} compare(%{t}, %{zero}), direction=GT")
            if e.activation == "kElu":
                lines.append(f"  %neg = {y} exponential-minus-one(%{t})")
            else:
                lines.append(f"  %neg = {y} multiply(%{t}, %{splat('slope', e.alpha)})")
            lines.append(f"  %act = {y} select(%gt, %{t}, %neg)")
        t = "act"
    lines.append(f"  %out = {cv.shape('y', et)} convert(%{t})")
    return "out"


def _plain_backward_input(lines: list[str], cv: Conv, res: str) -> None:
    """dx = conv(dy, reverse(w)) with lhs dilation s, rhs dilation d, padding low d(k-1) - p and
    high X - (Y-1)s - 1 - low + d(k-1), kernel i/o swapped; one per group, concatenated."""
    win = []
    for k in range(cv.nsp):
        span = cv.d(k) * (cv.k_sp[k] - 1)
        lo = span - cv.p(k)[0]
        hi = cv.x_sp[k] - (cv.y_sp[k] - 1) * cv.s(k) - 1 - lo + span
        win.append((cv.k_sp[k], cv.s(k), cv.d(k), lo, hi))
    window = ("{size=" + "x".join(str(w[0]) for w in win) + " pad=" + "x".join(f"{w[3]}_{w[4]}" for w in win)
              + " lhs_dilate=" + "x".join(str(w[1]) for w in win) + " rhs_dilate=" + "x".join(str(w[2]) for w in win)
              + "}")
    labels = f"{cv.part('y')}_{_swap(cv.part('w'), 'i', 'o')}->{cv.part('x')}"
    rev = ",".join(map(str, cv.spatial_positions("w")))
    G = cv.groups
    if G == 1:
        w = "w"
        if not cv.reversed:
            lines.append(f"  %w_rev = {cv.shape('w')} reverse(%w), dimensions={{{rev}}}")
            w = "w_rev"
        lines.append(f"  ROOT %dx = {res} convolution(%y, %{w}), window={window}, dim_labels={labels}")
        return
    og, ci = cv.o // G, cv.c // G
    yf, wo, xf = cv.part("y").index("f"), cv.part("w").index("o"), cv.part("x").index("f")

    def sliced(name: str, src: str, dims: list[int], axis: int, lo: int, hi: int) -> str:
        d = list(dims)
        d[axis] = hi - lo
        sl = ",".join(f"[{lo}:{hi}]" if i == axis else f"[0:{n}]" for i, n in enumerate(dims))
        lines.append(f"  %{name} = {cv.et}[{','.join(map(str, d))}] slice(%{src}), slice={{{sl}}}")
        return name
    parts = []
    for g in range(G):
        dy = sliced(f"dy{g}", "y", cv.dims("y"), yf, g * og, (g + 1) * og)
        wg = sliced(f"w{g}", "w", cv.dims("w"), wo, g * og, (g + 1) * og)
        wdims = cv.dims("w")
        wdims[wo] = og
        lines.append(f"  %w{g}_rev = {cv.et}[{','.join(map(str, wdims))}] reverse(%{wg}), dimensions={{{rev}}}")
        xd = cv.dims("x")
        xd[xf] = ci
        lines.append(f"  %dx{g} = {cv.et}[{','.join(map(str, xd))}] convolution(%{dy}, %w{g}_rev), "
                     f"window={window}, dim_labels={labels}")
        parts.append(f"%dx{g}")
    lines.append(f"  ROOT %dx = {res} concatenate({', '.join(parts)}), dimensions={{{xf}}}")


def _plain_backward_filter(lines: list[str], cv: Conv, res: str) -> None:
    """The original dw = conv(x, dy): x batch/feature swapped, dy's batch contracted, window =
    dy's spatial size, stride = d, rhs dilation = s, padding (p, as needed for k outputs),
    batch_group_count = the groups."""
    win = []
    for k in range(cv.nsp):
        lo = cv.p(k)[0]
        hi = (cv.k_sp[k] - 1) * cv.d(k) + (cv.y_sp[k] - 1) * cv.s(k) + 1 - cv.x_sp[k] - lo
        win.append((cv.y_sp[k], cv.d(k), cv.s(k), lo, hi))
    window = ("{size=" + "x".join(str(w[0]) for w in win) + " stride=" + "x".join(str(w[1]) for w in win)
              + " pad=" + "x".join(f"{w[3]}_{w[4]}" for w in win) + " rhs_dilate=" + "x".join(str(w[2]) for w in win)
              + "}")
    lhs = _swap(cv.part("x"), "b", "f")
    rhs = cv.part("y").translate(str.maketrans({"b": "i", "f": "o"}))
    out = cv.part("w").translate(str.maketrans({"i": "b", "o": "f"}))
    lines.append(f"  ROOT %dw = {res} convolution(%x, %y), window={window}, dim_labels={lhs}_{rhs}->{out}"
                 f"{cv.groups_attr(name='batch_group_count')}")


# ---- inputs and running -------------------------------------------------------------------------------

def inputs(module, seed: int) -> list[np.ndarray]:
    """Values in [-1, 1] (signs mixed, so activations see both sides); small integers for s8."""
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dims, et = p.shape.dimensions, p.shape.element_type
        if et == "s8":
            out.append(rng.integers(-8, 8, dims).astype(np.int8))
        else:
            out.append(rng.uniform(-1, 1, dims).astype(NP_TYPES[et]))
    return out


def rel_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = max(float(np.max(np.abs(want))), 1e-30)
    return float(np.max(np.abs(got - want))) / scale


def _leaf(value):
    return value[0] if isinstance(value, tuple) else value


def check_case(kind: str, cv: Conv, e: Epilogue = Epilogue(), seed: int = 0, host: bool = True,
               live: bool = True) -> dict:
    """(a), (b) and (c) for one case; returns the errors measured."""
    call = parse_module(call_text(kind, cv, e, scratch=64), f"{kind}.hlo")
    plain = parse_module(plain_text(kind, cv, e), f"plain_{kind}.hlo")
    args = inputs(call, seed)
    want = _leaf(evaluate_module(call, args))
    res_et = (cv.out_et or cv.et) if result_role(kind) == "y" else cv.et
    tol = TOLERANCE[res_et]
    errors = {}
    assert np.asarray(want).dtype == np.dtype(NP_TYPES.get(res_et, np.int32))
    assert np.any(np.asarray(want, np.float64) != 0), "a case whose result is all zeros checks little"
    errors["plain"] = rel_error(evaluate_module(plain, args), want)
    assert errors["plain"] <= tol, f"interpreter: call vs plain HLO {errors['plain']:.3g}"
    if host:
        got = _leaf(compile_executable(call, "host").run(args))
        errors["host"] = rel_error(got, want)
        assert errors["host"] <= tol, f"host vs interpreter {errors['host']:.3g}"
    if live:
        ref = _xla_ref()
        if ref is not None:
            import jax
            with jax.enable_x64(cv.et == "f64"):
                (xla,) = ref.run_hlo_text(plain_text(kind, cv, e), args)
            if res_et == "bf16":
                xla = np.asarray(xla).view(ml_dtypes.bfloat16)
            errors["xla"] = rel_error(xla, want)
            assert errors["xla"] <= max(tol, 2e-5) * 2, f"XLA:CPU vs interpreter {errors['xla']:.3g}"
    return errors




# ---- the cases ----------------------------------------------------------------------------------------

NHWC = "b01f_01io->b01f"
NCHW = "bf01_oi01->bf01"
CONVS = {
    "nhwc_3x3_pad": Conv(NHWC, 2, 16, 24, (10, 10), (3, 3), pad=((1, 1), (1, 1))),
    "nchw_stride_pad": Conv(NCHW, 2, 12, 16, (11, 9), (3, 3), stride=(2, 2), pad=((1, 1), (1, 1))),
    "nhwc_dilated": Conv(NHWC, 2, 8, 16, (12, 12), (3, 3), pad=((2, 2), (2, 2)), dil=(2, 2)),
    "conv1d_nwc_stride": Conv("b0f_0io->b0f", 3, 12, 20, (50,), (5,), stride=(2,), pad=((2, 2),)),
    "conv1d_ncw": Conv("bf0_oi0->bf0", 2, 8, 16, (30,), (3,), pad=((1, 1),)),
    "conv3d_ndhwc": Conv("b012f_012io->b012f", 2, 8, 16, (6, 7, 5), (3, 3, 3), pad=((1, 1), (1, 1), (1, 1))),
    "grouped_nchw": Conv(NCHW, 2, 16, 32, (9, 9), (3, 3), pad=((1, 1), (1, 1)), groups=4),
    "grouped2_nhwc": Conv(NHWC, 2, 32, 64, (8, 8), (3, 3), stride=(2, 2), pad=((1, 1), (1, 1)), groups=2),
    "depthwise_nhwc": Conv(NHWC, 2, 16, 16, (10, 10), (3, 3), pad=((1, 1), (1, 1)), groups=16),
    "depthwise_mult2_stride": Conv(NHWC, 2, 8, 16, (9, 9), (3, 3), stride=(2, 2), pad=((1, 1), (1, 1)), groups=8),
    "odd_labels": Conv("f01b_i01o->01bf", 3, 8, 12, (7, 9), (3, 2), pad=((1, 1), (0, 1))),
    # XLA:GPU's physical NHWC for a logical NCHW convolution (layout assignment)
    "nchw_physically_nhwc": Conv(NCHW, 2, 16, 24, (8, 8), (3, 3), pad=((1, 1), (1, 1)),
                                 layouts={"x": (1, 3, 2, 0), "w": (1, 3, 2, 0), "y": (1, 3, 2, 0)}),
}
FORWARD_CASES = ["nhwc_3x3_pad", "nchw_stride_pad", "nhwc_dilated", "conv1d_nwc_stride", "conv1d_ncw",
                 "conv3d_ndhwc", "grouped_nchw", "depthwise_nhwc", "depthwise_mult2_stride", "odd_labels",
                 "nchw_physically_nhwc"]
BACKWARD_CASES = ["nhwc_3x3_pad", "nchw_stride_pad", "nhwc_dilated", "conv1d_nwc_stride", "conv3d_ndhwc",
                  "grouped_nchw", "grouped2_nhwc", "depthwise_mult2_stride", "odd_labels", "nchw_physically_nhwc"]

MEASURED: dict[str, dict] = {}


@pytest.mark.parametrize("name", FORWARD_CASES)
def test_forward(name):
    MEASURED[f"fwd/{name}"] = check_case("fwd", CONVS[name])


@pytest.mark.parametrize("name", BACKWARD_CASES)
def test_backward_input(name):
    MEASURED[f"bwd_input/{name}"] = check_case("bwd_input", CONVS[name])


@pytest.mark.parametrize("name", BACKWARD_CASES)
def test_backward_filter(name):
    MEASURED[f"bwd_filter/{name}"] = check_case("bwd_filter", CONVS[name])


EPILOGUES = {
    "bias": Epilogue(),
    "relu": Epilogue("kRelu"),
    "relu6_scaled": Epilogue("kRelu6", scale=4.0),
    "elu": Epilogue("kElu"),
    "leaky_relu": Epilogue("kLeakyRelu", alpha=0.125),
    "side_input_relu": Epilogue("kRelu", side=True, side_scale=0.5),
    "side_input_scaled": Epilogue("kNone", scale=0.75, side=True, side_scale=1.0),
    "side_input_unused": Epilogue("kRelu", side=True, side_scale=0.0),
}


@pytest.mark.parametrize("name", EPILOGUES)
def test_bias_activation(name):
    MEASURED[f"bias/{name}"] = check_case("bias", CONVS["nhwc_3x3_pad"], EPILOGUES[name])


@pytest.mark.parametrize("et", ["f16", "bf16", "f64"])
@pytest.mark.parametrize("kind", ["fwd", "bias", "bwd_input", "bwd_filter"])
def test_element_types(kind, et):
    cv = replace(CONVS["nchw_stride_pad"], et=et)
    e = Epilogue("kRelu6", scale=2.0, side=True, side_scale=0.5) if kind == "bias" else Epilogue()
    MEASURED[f"{kind}/{et}"] = check_case(kind, cv, e)


def test_s8_convolutions():
    """s8 x s8 accumulates exactly in s32 (an s32 or an f32 result, XLA's fused convert)."""
    cv = replace(CONVS["nhwc_3x3_pad"], et="s8", out_et="s32")
    MEASURED["fwd/s8_s32"] = check_case("fwd", cv)
    cv = replace(cv, out_et="f32")
    MEASURED["fwd/s8_f32"] = check_case("fwd", cv)
    MEASURED["bias/s8_f32"] = check_case("bias", cv, Epilogue("kRelu", scale=0.5))


def test_true_convolution():
    """A reversed window (all dimensions): a convolution rather than a cross-correlation."""
    cv = replace(CONVS["nhwc_3x3_pad"], reversed=True)
    for kind in ("fwd", "bwd_input"):
        MEASURED[f"{kind}/reversed"] = check_case(kind, cv)
    # the plain backward filter of a true convolution is the reversed cross-correlation one
    call = parse_module(call_text("bwd_filter", cv), "f.hlo")
    args = inputs(call, 3)
    flipped = parse_module(call_text("bwd_filter", replace(cv, reversed=False)), "g.hlo")
    want = np.flip(evaluate_module(flipped, args), axis=(0, 1))
    got = evaluate_module(call, args)
    assert rel_error(got, want) == 0.0
    assert rel_error(compile_executable(call, "host").run(args), want) <= TOLERANCE["f32"]


def test_padding_beyond_the_window():
    """A 1x1 kernel with padding 1 and stride 2: the backward convolutions' padding is negative."""
    cv = Conv(NHWC, 2, 16, 16, (9, 9), (1, 1), stride=(2, 2), pad=((1, 1), (1, 1)))
    for kind in ("fwd", "bwd_input", "bwd_filter"):
        MEASURED[f"{kind}/1x1_pad1_stride2"] = check_case(kind, cv)


def test_shapes_from_xla_tests():
    """The two examples of notes §2.2 (XLA's own tests): a 1-D backward input
    ``f32[1,20,257] dy, f32[31,257,136] w, size=31 stride=2 pad=23_23, b0f_0oi->b0f`` and an f16
    backward filter ``x f16[N,96,6,6], dy f16[N,64,4,4], size=3x3, bf01_oi01->bf01`` (N 7680
    there, 16 here)."""
    MEASURED["bwd_input/xla_1d"] = check_case(
        "bwd_input", Conv("b0f_0oi->b0f", 1, 136, 257, (24,), (31,), stride=(2,), pad=((23, 23),)))
    MEASURED["bwd_filter/xla_f16"] = check_case("bwd_filter", Conv(NCHW, 16, 96, 64, (6, 6), (3, 3), et="f16"))


# ResNet-50's 3x3 stage-2 convolution at batch 8, forward with bias+relu and both gradients
RESNET = Conv(NHWC, 8, 64, 64, (56, 56), (3, 3), pad=((1, 1), (1, 1)))


@pytest.mark.parametrize("kind", ["bias", "bwd_input", "bwd_filter"])
def test_resnet_block(kind):
    e = Epilogue("kRelu", side=True, side_scale=1.0) if kind == "bias" else Epilogue()
    MEASURED[f"resnet/{kind}"] = check_case(kind, RESNET, e)


def test_resnet_strided_projection_backward():
    """The stride-2 3x3 convolution entering stage 3 (56 -> 28), both gradients."""
    cv = Conv(NHWC, 4, 64, 128, (56, 56), (3, 3), stride=(2, 2), pad=((1, 1), (1, 1)))
    for kind in ("bwd_input", "bwd_filter"):
        MEASURED[f"resnet_s2/{kind}"] = check_case(kind, cv)


@pytest.mark.parametrize("kind,name,emitter", [
    ("bwd_input", "nchw_stride_pad", "convolution"),    # lhs dilation = the forward stride
    ("bwd_input", "grouped2_nhwc", "convolution"),      # the regrouped kernel as a fused prologue
    ("bwd_filter", "grouped2_nhwc", "convolution"),     # batch groups
    ("bwd_input", "depthwise_mult2_stride", "loop"),    # one feature per group: the emitter declines
    ("fwd", "depthwise_nhwc", "loop"),
])
def test_hlo_run_on_host(tmp_path, kind, name, emitter):
    """``hlo-run FILE --platform=host`` runs the lowered call (checked against the interpreter),
    on the implicit-GEMM convolution emitter or, where it declines, the loop emitter."""
    text = call_text(kind, CONVS[name], scratch=128)
    (k,) = plan_module(parse_module(text), CompileOptions(conv="generated")).kernels
    assert k.analysis.emitter == emitter, k.analysis.reason
    path = tmp_path / f"{kind}.hlo"
    path.write_text(text)
    r = CliRunner().invoke(hlo_run, [str(path), "--platform=host", "--seed=3"])
    assert r.exit_code == 0 and "match the interpreter" in r.output, r.output


# ---- the lowering's shape -------------------------------------------------------------------------

def _generated(text: str):
    return prepare_module(parse_module(text, "m.hlo"), CompileOptions(conv="generated"))


def test_lowering_fuses_the_epilogue_into_the_convolution_emitter():
    text = call_text("bias", CONVS["nhwc_3x3_pad"], Epilogue("kElu", scale=2.0, side=True, side_scale=0.5))
    lowered = _generated(text)
    entry = lowered.entry
    assert [i.opcode for i in entry.instructions if i.opcode not in ("parameter",)] == ["fusion"]
    fusion = entry.root
    assert fusion.name == "cudnn-conv-bias-activation" and fusion.shape == parse_conv_call(
        parse_module(text).entry.instruction("cudnn-conv-bias-activation")).result
    ops = [i.opcode for i in fusion.fused_computation.instructions]
    assert ops.count("convolution") == 1 and "exponential-minus-one" in ops and "select" in ops
    (k,) = plan_module(parse_module(text), CompileOptions(conv="generated")).kernels
    assert k.analysis.emitter == "convolution", k.analysis.reason


def test_ptxas_accepts_the_lowered_calls():
    """The lowered calls compile for sm_80 (the elu epilogue's expm1 through libdevice, the
    regrouped kernel prologue of a grouped backward input)."""
    from hlo_compile.driver.pipeline import run_pipeline
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    for text in (call_text("bias", CONVS["nhwc_3x3_pad"], Epilogue("kElu", scale=2.0, side=True, side_scale=0.5)),
                 call_text("bwd_input", CONVS["grouped2_nhwc"]), call_text("bwd_filter", CONVS["grouped2_nhwc"])):
        ptx = run_pipeline(parse_module(text), CompileOptions(arch="sm_80", conv="generated"),
                           emit="ptx").artifacts["ptx"]
        assert "ld.shared" in ptx            # the implicit-GEMM kernel, not the loop emitter
        out = run_ptxas(ptx, "sm_80")
        assert out.cubin and out.kernels


def test_scratch_is_materialised_only_for_the_whole_tuple():
    cv = CONVS["nhwc_3x3_pad"]
    lowered = _generated(call_text("fwd", cv, scratch=256))
    assert not any(i.shape.is_tuple or i.shape.element_type == "u8" for i in lowered.entry.instructions)
    text = call_text("fwd", cv, scratch=256, whole_tuple=True)
    lowered = _generated(text)
    assert lowered.entry.root.opcode == "tuple" and lowered.entry.root.name == "cudnn-conv"
    module = parse_module(text)
    args = inputs(module, 1)
    want = evaluate_module(module, args)
    got = compile_executable(module, "host").run(args)
    assert got[1].dtype == np.uint8 and got[1].shape == (256,) and not got[1].any()
    assert rel_error(got[0], want[0]) <= TOLERANCE["f32"]


def test_layouts_are_kept():
    text = call_text("fwd", CONVS["nchw_physically_nhwc"])
    lowered = _generated(text)
    assert lowered.entry.root.shape.minor_to_major == (1, 3, 2, 0)
    conv = next(i for i in lowered.entry.root.fused_computation.instructions if i.opcode == "convolution")
    assert conv.shape.minor_to_major == (1, 3, 2, 0)


def test_call_inside_a_while_body_and_two_readers():
    """A call in a loop body, its result read twice: lowered in every computation."""
    text = """HloModule loop

%body (s: (s32[], f32[2,6,6,8])) -> (s32[], f32[2,6,6,8]) {
  %s = (s32[], f32[2,6,6,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[2,6,6,8] get-tuple-element(%s), index=1
  %w = f32[3,3,8,8] constant({...})
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %cudnn-conv = (f32[2,6,6,8], u8[0]) custom-call(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convForward", backend_config=CONFIG
  %g0 = f32[2,6,6,8] get-tuple-element(%cudnn-conv), index=0
  %g1 = f32[2,6,6,8] get-tuple-element(%cudnn-conv), index=0
  %y = f32[2,6,6,8] subtract(%g0, %g1)
  %z = f32[2,6,6,8] add(%y, %g0)
  ROOT %t = (s32[], f32[2,6,6,8]) tuple(%i1, %z)
}

%cond (s: (s32[], f32[2,6,6,8])) -> pred[] {
  %s = (s32[], f32[2,6,6,8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (x: f32[2,6,6,8]) -> f32[2,6,6,8] {
  %x = f32[2,6,6,8] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[2,6,6,8]) tuple(%zero, %x)
  %loop = (s32[], f32[2,6,6,8]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[2,6,6,8] get-tuple-element(%loop), index=1
}
"""
    w = np.random.default_rng(4).uniform(-0.3, 0.3, (3, 3, 8, 8)).astype(np.float32)
    literal = np.array2string(w, separator=",", threshold=10**6, floatmode="unique").replace("[", "{").replace("]", "}")
    text = text.replace("{...}", literal).replace("CONFIG", config())
    module = parse_module(text)
    body = _generated(text).computation("body")
    assert not any(i.opcode in ("custom-call", "get-tuple-element") and i.operands[0].opcode == "custom-call"
                   for i in body.instructions)
    args = inputs(module, 5)
    want = evaluate_module(module, args)
    assert rel_error(compile_executable(module, "host").run(args), want) <= TOLERANCE["f32"]


# ---- refusals ----------------------------------------------------------------------------------------

def _refusal_module(line: str, params: str = "x: f32[2,8,8,16], w: f32[3,3,16,32]",
                    param_lines: str = "  %x = f32[2,8,8,16] parameter(0)\n  %w = f32[3,3,16,32] parameter(1)\n",
                    ret: str = "f32[2,8,8,32]") -> str:
    return (f"HloModule refused\n\nENTRY %main ({params}) -> {ret} {{\n{param_lines}{line}\n"
            f"  ROOT %get-tuple-element = {ret} get-tuple-element(%cudnn-conv), index=0\n}}\n")


_GOOD = ('  %cudnn-conv = (f32[2,8,8,32], u8[0]) custom-call(%x, %w), window={size=3x3 pad=1_1x1_1}, '
         'dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convForward", backend_config=CFG')
REFUSALS = {
    "sigmoid": (_GOOD.replace("convForward", "convBiasActivationForward").replace("(%x, %w)", "(%x, %w, %b)"),
                config(Epilogue("kSigmoid")), "activation_mode kSigmoid"),
    "scale_on_plain_forward": (_GOOD, config(Epilogue(scale=2.0)), "conv_result_scale is 2"),
    "absent_config": (_GOOD.replace(", backend_config=CFG", ""), "", "conv_result_scale is 0"),
    "int8x32_reordered": (_GOOD, ('{"cudnn_conv_backend_config":{"conv_result_scale":1,'
                                  '"reordered_int8_nchw_vect":true}}'), "reordered_int8_nchw_vect"),
    "bad_json": (_GOOD, "{conv_result_scale:1,,}", "not valid JSON"),
    "lhs_dilation": (_GOOD.replace("pad=1_1x1_1", "pad=1_1x1_1 lhs_dilate=1x2"), config(), "lhs_dilate"),
    "wrong_output_size": (_GOOD.replace("pad=1_1x1_1", "pad=0_0x0_0"), config(), "forward output of size 6"),
    "no_scratch": (_GOOD.replace("(f32[2,8,8,32], u8[0])", "(f32[2,8,8,32])"), config(), "u8[scratch]"),
    "s8_scratch": (_GOOD.replace("u8[0]", "s8[0]"), config(), "scratch buffer"),
    "three_operands": (_GOOD.replace("(%x, %w)", "(%x, %w, %x)"), config(), "expects 2 operands"),
    "mixed_reversal": (_GOOD.replace("pad=1_1x1_1", "pad=1_1x1_1 rhs_reversal=1x0"), config(), "all or none"),
    "side_scale_without_side": (_GOOD.replace("convForward", "convBiasActivationForward")
                                .replace("(%x, %w)", "(%x, %w, %b)"), config(Epilogue(side_scale=1.0)),
                                "no side input"),
    "activation_on_backward": (_GOOD.replace("convForward", "convBackwardFilter"), config(Epilogue("kRelu")),
                               "kRelu on a convolution without bias/activation"),
}


@pytest.mark.parametrize("name", REFUSALS)
@pytest.mark.parametrize("platform", ["interpreter", "host"])
def test_refusals_exit_2_naming_the_call(tmp_path, name, platform):
    line, cfg, why = REFUSALS[name]
    params, plines = "x: f32[2,8,8,16], w: f32[3,3,16,32]", ("  %x = f32[2,8,8,16] parameter(0)\n"
                                                             "  %w = f32[3,3,16,32] parameter(1)\n")
    if "%b)" in line:
        params += ", b: f32[32]"
        plines += "  %b = f32[32] parameter(2)\n"
    if name == "activation_on_backward":   # a well-shaped backward filter call
        line = line.replace("(f32[2,8,8,32], u8[0])", "(f32[3,3,16,32], u8[0])").replace("(%x, %w)", "(%x, %y)")
        params = "x: f32[2,8,8,16], y: f32[2,8,8,32]"
        plines = "  %x = f32[2,8,8,16] parameter(0)\n  %y = f32[2,8,8,32] parameter(1)\n"
        text = _refusal_module(line.replace("CFG", cfg), params, plines, "f32[3,3,16,32]")
    else:
        text = _refusal_module(line.replace("CFG", cfg), params, plines)
    path = tmp_path / f"{name}.hlo"
    path.write_text(text)
    r = CliRunner().invoke(hlo_run, [str(path), f"--platform={platform}", "--reference=none"])
    assert r.exit_code == 2, r.output
    line_no = text.splitlines().index(next(ln for ln in text.splitlines() if "%cudnn-conv =" in ln)) + 1
    assert f"{path}:{line_no}:" in r.output, r.output
    assert "%cudnn-conv" in r.output and "__cudnn$conv" in r.output and why in r.output, r.output
    assert "Traceback" not in r.output


def test_int8x32_vectorized_layout_is_refused(tmp_path):
    """An s8 NCHW_VECT_C convolution (feature dim split by 32, the vector dim unnamed by the
    dim_labels): refused by name, not misread."""
    line = ('  %cudnn-conv = (s8[2,1,8,8,32], u8[0]) custom-call(%x, %w), window={size=3x3 pad=1_1x1_1}, '
            'dim_labels=bf01_oi01->bf01, custom_call_target="__cudnn$convForward", backend_config=' + config())
    text = _refusal_module(line, "x: s8[2,1,8,8,32], w: s8[32,1,3,3,32]",
                           "  %x = s8[2,1,8,8,32] parameter(0)\n  %w = s8[32,1,3,3,32] parameter(1)\n",
                           "s8[2,1,8,8,32]")
    path = tmp_path / "vect.hlo"
    path.write_text(text)
    r = CliRunner().invoke(hlo_run, [str(path), "--platform=interpreter", "--reference=none"])
    assert r.exit_code == 2 and "vectorized" in r.output and "%cudnn-conv" in r.output, r.output


def test_parsed_call_roles():
    text = call_text("bias", CONVS["grouped_nchw"], Epilogue("kLeakyRelu", alpha=0.25, side=True, side_scale=0.5))
    inst = parse_module(text).entry.instruction("cudnn-conv-bias-activation")
    call = parse_conv_call(inst)
    assert call.kind is ConvKind.BIAS_ACTIVATION and call.operand_roles == ("x", "w", "bias", "side_input")
    assert (call.activation, call.leakyrelu_alpha, call.side_input_scale, call.feature_group_count) == (
        "kLeakyRelu", 0.25, 0.5, 4)
    assert call.scratch.dimensions == (0,) and call.result_role == "y" and call.compute_type == "f32"
    bw = parse_conv_call(parse_module(call_text("bwd_input", CONVS["grouped_nchw"])).entry.instruction(
        "cudnn-conv-bw-input"))
    assert bw.operand_roles == ("y", "w") and bw.result_role == "x" and bw.x.dimensions == (2, 16, 9, 9)


def test_report_measurements():
    """Prints the errors the cases above measured (run with -s to see them)."""
    if not MEASURED:
        pytest.skip("no case ran")
    for name, errs in sorted(MEASURED.items()):
        print(f"{name:40s} " + " ".join(f"{k}={v:.2e}" for k, v in errs.items()))


# ---- the cuDNN step (cuda platform; no GPU here: its plumbing against a stand-in frontend) ----------

class _FakeTensor:
    def __init__(self, log, what, **kw):
        self.log, self.what, self.kw = log, what, kw

    def __getattr__(self, name):          # set_output / set_dim / set_stride / set_data_type
        def setter(value):
            self.kw[name] = value
            return self
        return setter


class _FakeCudnn:
    """Records what the step asks of ``cudnn`` (names from notes/xla-gpu-calls.md §7.3)."""

    class data_type:
        HALF, BFLOAT16, FLOAT, DOUBLE, INT8, INT32 = "half", "bf16", "float", "double", "int8", "int32"

    class heur_mode:
        A, FALLBACK = "A", "FALLBACK"

    class numerical_note:
        TENSOR_CORE, DOWN_CONVERT_INPUTS, REDUCED_PRECISION_REDUCTION = "tc", "down", "reduced"

    def __init__(self):
        self.log = []

    def create_handle(self):
        return "handle"

    def pygraph(self, **kw):
        log = self.log
        log.append(("pygraph", kw))

        class G:
            def __getattr__(self, name):
                def op(*args, **kw):
                    log.append((name, dict(kw, args=args) if args else kw))
                    if name in ("tensor", "conv_fprop", "conv_dgrad", "conv_wgrad", "add", "relu"):
                        return _FakeTensor(log, name, **kw)
                    return 0
                return op
        return G()


class _FakeDevicePlatform:
    name = "cuda"
    device = object()

    class _Buf:
        def __init__(self, ptr):
            self.ptr = ptr

    def __init__(self):
        self.next = 0x1000

    def allocate(self, shape):
        self.next += 0x1000
        return self._Buf(self.next)

    def free(self, data):
        pass

    def synchronize(self):
        pass


def _step(text: str, name: str):
    from hlo_compile.runtime.cudnn_steps import CudnnConvolution
    inst = parse_module(text).entry.instruction(name)
    return CudnnConvolution(inst, None), inst


def test_cudnn_step_plumbing(monkeypatch):
    import sys

    from hlo_compile.runtime.steps import Frame, Resources
    from hlo_compile.runtime.values import Buffer
    fake = _FakeCudnn()
    monkeypatch.setitem(sys.modules, "cudnn", fake)
    cv = CONVS["nchw_physically_nhwc"]
    step, inst = _step(call_text("bwd_input", replace(cv, stride=(2, 2), x_sp=(9, 9))), "cudnn-conv-bw-input")
    frame = Frame(Resources({}, None), [])
    for k, op in enumerate(inst.operands):
        frame.values[op] = Buffer(op.shape, _FakeDevicePlatform._Buf(0x100 * (k + 1)))
    step.run(_FakeDevicePlatform(), frame)
    calls = {n: kw for n, kw in fake.log if n != "tensor"}
    tensors = [kw for n, kw in fake.log if n == "tensor"]
    # dims in cuDNN's order, strides of the physically NHWC buffers (layout {1,3,2,0})
    assert tensors[0] == {"name": "y", "dim": [2, 24, 5, 5], "stride": [600, 1, 120, 24], "data_type": "float"}
    assert tensors[1]["dim"] == [24, 16, 3, 3] and tensors[1]["stride"] == [144, 1, 48, 16]
    assert calls["conv_dgrad"]["stride"] == [2, 2] and calls["conv_dgrad"]["pre_padding"] == [1, 1]
    assert "check_support" in calls and "build_plans" in calls
    # f32: no TF32 tensor-core engines (the first GPU run measured 2.4e-4 with them)
    assert calls["deselect_numeric_notes"]["args"] == (["tc", "down", "reduced"],)
    order = [n for n, _ in fake.log]
    assert order.index("create_execution_plans") < order.index("deselect_numeric_notes") < order.index("check_support")
    pointers, _workspace = calls["execute"]["args"]
    by_name = {t.kw.get("name", t.what): ptr for t, ptr in pointers.items()}
    result = frame.values[inst][0]
    assert by_name == {"y": 0x100, "w": 0x200, "conv_dgrad": result.data.ptr}
    assert result.shape == parse_conv_call(inst).result and calls["execute"]["handle"] == "handle"
    dx = next(t for t in pointers if t.what == "conv_dgrad")
    assert dx.kw["set_dim"] == [2, 16, 9, 9] and dx.kw["set_stride"] == [1296, 1, 144, 16]


def test_cudnn_step_refusals(monkeypatch):
    import sys

    from hlo_compile.hlo.errors import HloUnsupportedError
    from hlo_compile.runtime.steps import Frame, Resources
    with pytest.raises(HloUnsupportedError, match=r"%cudnn-conv-bias-activation .*activation kElu"):
        _step(call_text("bias", CONVS["nhwc_3x3_pad"], Epilogue("kElu")), "cudnn-conv-bias-activation")
    # an HWIO filter never reaches cuDNN (it computed garbage on the first GPU run)
    with pytest.raises(HloUnsupportedError, match=r"%cudnn-conv .*filter f32\[3,3,16,24\].*KCRS/KRSC"):
        _step(call_text("fwd", CONVS["nhwc_3x3_pad"]), "cudnn-conv")
    step, _ = _step(call_text("fwd", CONVS["nchw_stride_pad"]), "cudnn-conv")
    monkeypatch.setitem(sys.modules, "cudnn", None)   # not installed
    with pytest.raises(HloUnsupportedError, match="nvidia-cudnn-frontend"):
        step.run(_FakeDevicePlatform(), Frame(Resources({}, None), []))


def test_convolutions_stay_on_cudnn_without_an_attention_step(monkeypatch):
    """cuDNN attention has no library step: that alone must not send convolutions to our
    emitters (the first GPU run found every cuDNN convolution generated for that reason)."""
    from hlo_compile.options import CompileOptions
    from hlo_compile.runtime import library_steps
    from hlo_compile.runtime.cuda_platform import cuda_compile_options
    monkeypatch.setattr(library_steps, "binding_missing", lambda name: None)
    notes: list[str] = []
    opts = cuda_compile_options(CompileOptions(), "sm_90", notes)
    assert (opts.gemm, opts.conv, opts.fmha) == ("library", "library", "generated") and not notes
    assert opts.generated_call_families() == {"fmha"}
    opts = cuda_compile_options(CompileOptions(conv="generated"), "sm_90", notes)
    assert opts.generated_call_families() == {"conv", "fmha"} and not notes
    monkeypatch.setattr(library_steps, "binding_missing", lambda name: f"no {name}")
    opts = cuda_compile_options(CompileOptions(), "sm_90", notes)
    assert opts.generated_call_families() == {"gemm", "conv", "fmha"}
    assert [n.split(" ")[0] for n in notes] == ["--gemm=library", "--conv=library"]


def test_calls_cudnn_does_not_take_are_lowered_even_as_library_calls():
    """With convolutions kept as cuDNN calls (no family generated), a call with an HWIO filter
    (the default layout of b01f_01io->b01f) is lowered to our kernels; a KRSC one stays a call."""
    from hlo_compile.hlo.calls.library_limits import library_refusal
    from hlo_compile.passes.library_calls import lower_library_calls
    hwio = parse_module(call_text("fwd", CONVS["nhwc_3x3_pad"]))
    krsc = parse_module(call_text("fwd", replace(CONVS["nhwc_3x3_pad"], labels="b01f_o01i->b01f")))
    (call,) = [i for i in krsc.entry.instructions if i.opcode == "custom-call"]
    assert library_refusal(call) is None
    lower_library_calls(hwio, frozenset())
    lower_library_calls(krsc, frozenset())
    assert not [i for i in hwio.entry.instructions if i.opcode == "custom-call"]
    assert [i.name for i in krsc.entry.instructions if i.opcode == "custom-call"] == [call.name]
