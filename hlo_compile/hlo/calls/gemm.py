"""A cuBLAS GEMM custom-call read once: which operand is which, what the epilogue does, which
result leaf is which (notes/xla-gpu-calls.md §1).

XLA:GPU writes ``__cublas$gemm`` (legacy cuBLAS), ``__cublas$lt$matmul`` (cuBLASLt) and
``__cublas$lt$matmul$f8`` (cuBLASLt with FP8 per-tensor scales). Their operands and results
are positional and depend on the backend config (``beta`` decides whether a matrix C is
passed, the epilogue whether a bias vector is and whether an aux output exists), and the FP8
call has had two operand orders. ``parse_gemm_call`` reads all of that into a ``GemmCall``
that the interpreter, the lowering to plain HLO and the cuBLAS runtime step share, and refuses
anything it cannot place, naming the instruction, the target and the line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..attributes import DotDimensionNumbers
from ..backend_config import backend_config, config_float, config_int
from ..element_types import is_complex, is_float, is_integral
from ..errors import HloUnsupportedError, SourceLocation
from ..ir import HloInstruction
from .library_targets import GEMM_TARGETS
from ..shape import Shape

LEGACY_GEMM = "__cublas$gemm"
LT_MATMUL = "__cublas$lt$matmul"
LT_MATMUL_F8 = "__cublas$lt$matmul$f8"

F8_TYPES = frozenset({"f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"})


class Epilogue(Enum):
    """``GemmBackendConfig.Epilogue`` (proto numbers); SILU kinds exist (ROCm) but are refused."""

    DEFAULT = 0
    BIAS = 1
    RELU = 2
    BIAS_RELU = 3
    GELU = 4
    GELU_AUX = 5
    BIAS_GELU = 6
    BIAS_GELU_AUX = 7

    @property
    def has_bias(self) -> bool:
        return self in (Epilogue.BIAS, Epilogue.BIAS_RELU, Epilogue.BIAS_GELU, Epilogue.BIAS_GELU_AUX)

    @property
    def has_aux(self) -> bool:
        return self in (Epilogue.GELU_AUX, Epilogue.BIAS_GELU_AUX)

    @property
    def activation(self) -> str:
        """'identity', 'relu' or 'gelu' (XLA's tanh approximation)."""
        if self in (Epilogue.RELU, Epilogue.BIAS_RELU):
            return "relu"
        if self in (Epilogue.GELU, Epilogue.GELU_AUX, Epilogue.BIAS_GELU, Epilogue.BIAS_GELU_AUX):
            return "gelu"
        return "identity"


_REFUSED_EPILOGUES = {8: "SILU", 9: "BIAS_SILU"}


@dataclass(frozen=True)
class GemmCall:
    """One GEMM call. Operand fields are operand numbers of the call (None: not passed);
    result fields are tuple indices of the result (None: absent; all None when the result is
    a bare array, which is D). ``f8_order`` is ``"head"`` (a, b, [c], a_scale, b_scale,
    [bias], [d_scale]) or ``"pre-2024-09-27"`` (a, b, [c], a_scale, b_scale, c_scale,
    d_scale, [bias]) for the FP8 target, None otherwise."""

    name: str
    target: str
    epilogue: Epilogue
    alpha: tuple[float, float]
    beta: float
    dot_dims: DotDimensionNumbers
    operand_precision: tuple[str, ...]
    algorithm: str
    damax_output: bool
    output: Shape                       # D
    selected_algorithm: int = 0         # cuBLASLt: entry of the heuristic list (legacy: -1 = default)
    a: int = 0
    b: int = 1
    c: int | None = None
    bias: int | None = None
    a_scale: int | None = None
    b_scale: int | None = None
    c_scale: int | None = None
    d_scale: int | None = None
    f8_order: str | None = None
    result_is_tuple: bool = False
    d_index: int | None = None
    aux_index: int | None = None
    amax_index: int | None = None
    workspace_index: int | None = None
    location: SourceLocation | None = field(default=None, compare=False)

    @property
    def is_f8(self) -> bool:
        return self.target == LT_MATMUL_F8

    @property
    def output_is_f8(self) -> bool:
        return self.output.element_type in F8_TYPES

    @property
    def bias_dimension(self) -> int:
        """The output dimension the bias vector runs along: D's physically most-minor one."""
        return self.output.minor_to_major[0]

    @property
    def alpha_is_zero(self) -> bool:
        """BLAS reads neither A nor B when alpha is 0: the product term is exactly zero."""
        return self.alpha == (0.0, 0.0)

    def roles(self) -> dict[str, int]:
        """Operand role -> operand number, for the operands the call passes."""
        names = ("a", "b", "c", "bias", "a_scale", "b_scale", "c_scale", "d_scale")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def result_leaves(self) -> dict[str, int]:
        """Result role ('d', 'aux', 'amax', 'workspace') -> tuple index (tuple results only)."""
        names = {"d": self.d_index, "aux": self.aux_index, "amax": self.amax_index,
                 "workspace": self.workspace_index}
        return {n: i for n, i in names.items() if i is not None}


# ---- reading ---------------------------------------------------------------------------------------

class _Refuse:
    """Builds the refusals of one call: ``%name`` (target) and its location."""

    def __init__(self, inst: HloInstruction, target: str):
        self.inst, self.target = inst, target

    def __call__(self, why: str) -> HloUnsupportedError:
        return HloUnsupportedError(f"custom-call '%{self.inst.name}' ({self.target}): {why}", self.inst.location)


def parse_gemm_call(inst: HloInstruction) -> GemmCall:
    """The ``GemmCall`` of ``inst``; ``HloUnsupportedError`` for anything malformed or not
    supported (SILU epilogues, an operand count the config does not explain, shapes that do
    not follow from the dot dimension numbers...)."""
    target = inst.attr("custom_call_target", None) if inst.opcode == "custom-call" else None
    refuse = _Refuse(inst, str(target))
    if target not in GEMM_TARGETS:
        raise refuse("not a cuBLAS GEMM call")
    cfg = _gemm_config(inst, refuse)
    epilogue = _epilogue(cfg.get("epilogue", 0), refuse)
    if target == LEGACY_GEMM and epilogue is not Epilogue.DEFAULT:
        raise refuse(f"legacy cuBLAS has no epilogue, the config says {epilogue.name}")
    try:
        alpha = (config_float(cfg.get("alpha_real"), 0.0), config_float(cfg.get("alpha_imag"), 0.0))
        beta = config_float(cfg.get("beta"), 0.0)
    except (TypeError, ValueError):
        raise refuse("alpha_real, alpha_imag and beta must be numbers") from None
    damax = cfg.get("damax_output", False)
    if not isinstance(damax, bool):
        raise refuse(f"damax_output must be true or false, got {damax!r}")
    if damax and target != LT_MATMUL_F8:
        raise refuse("damax_output is only defined for the FP8 call")
    dims = _dot_dims(cfg.get("dot_dimension_numbers"), refuse)
    precision = cfg.get("precision_config") or {}
    if not isinstance(precision, dict):
        raise refuse("precision_config must be an object")
    operand_precision = tuple(str(p) for p in precision.get("operand_precision", ()) or ())
    algorithm = str(precision.get("algorithm", "ALG_UNSET"))

    try:
        selected = config_int(cfg.get("selected_algorithm"), 0 if target != LEGACY_GEMM else -1)
    except (TypeError, ValueError):
        raise refuse(f"selected_algorithm {cfg.get('selected_algorithm')!r} is not an integer") from None
    roles = _operand_roles(inst, target, beta != 0, epilogue, refuse)
    out, leaves = _result_leaves(inst, target, epilogue, damax, refuse)
    call = GemmCall(name=inst.name, target=target, epilogue=epilogue, alpha=alpha, beta=beta, dot_dims=dims,
                    operand_precision=operand_precision, algorithm=algorithm, damax_output=damax, output=out,
                    selected_algorithm=selected, location=inst.location, **roles, **leaves)
    _check_shapes(inst, call, refuse)
    return call


def _gemm_config(inst: HloInstruction, refuse: _Refuse) -> dict[str, Any]:
    try:
        cfg = backend_config(inst)
    except HloUnsupportedError:
        raise refuse("its backend_config is not valid JSON") from None
    gemm = cfg.get("gemm_backend_config")
    if gemm is None and "dot_dimension_numbers" in cfg:
        gemm = cfg  # dumps from before GpuBackendConfig wrapped it (2023)
    if not isinstance(gemm, dict):
        raise refuse("no gemm_backend_config in its backend_config")
    return gemm


def _epilogue(raw: Any, refuse: _Refuse) -> Epilogue:
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise refuse(f"epilogue {raw!r} is neither a name nor a number")
    if isinstance(raw, int) or raw.isdigit():
        number = int(raw)
        if number in _REFUSED_EPILOGUES:
            raise refuse(f"epilogue {_REFUSED_EPILOGUES[number]} is not supported (hipBLASLt only; CUDA refuses it)")
        try:
            return Epilogue(number)
        except ValueError:
            raise refuse(f"unknown epilogue number {number}") from None
    if raw in _REFUSED_EPILOGUES.values():
        raise refuse(f"epilogue {raw} is not supported (hipBLASLt only; CUDA refuses it)")
    try:
        return Epilogue[raw]
    except KeyError:
        raise refuse(f"unknown epilogue '{raw}'") from None


def _dot_dims(raw: Any, refuse: _Refuse) -> DotDimensionNumbers:
    if not isinstance(raw, dict):
        raise refuse("no dot_dimension_numbers in its gemm_backend_config")

    def dims(key: str) -> tuple[int, ...]:
        value = raw.get(key, [])
        if not isinstance(value, list):
            raise refuse(f"dot_dimension_numbers.{key} must be a list")
        try:
            return tuple(config_int(v) for v in value)
        except (TypeError, ValueError):
            raise refuse(f"dot_dimension_numbers.{key} must list integers, got {value!r}") from None
    return DotDimensionNumbers(dims("lhs_batch_dimensions"), dims("rhs_batch_dimensions"),
                               dims("lhs_contracting_dimensions"), dims("rhs_contracting_dimensions"))


def _operand_roles(inst: HloInstruction, target: str, has_c: bool, epilogue: Epilogue,
                   refuse: _Refuse) -> dict[str, Any]:
    n = len(inst.operands)
    roles: dict[str, Any] = {}
    if target != LT_MATMUL_F8:
        want = 2 + has_c + epilogue.has_bias
        if n != want:
            raise refuse(f"{n} operands, the config asks for {want} (a, b{', c' if has_c else ''}"
                         f"{', bias' if epilogue.has_bias else ''})")
        if has_c:
            roles["c"] = 2
        if epilogue.has_bias:
            roles["bias"] = 2 + has_c
        return roles
    if epilogue.has_aux:
        raise refuse(f"epilogue {epilogue.name} has an aux output, which the FP8 call never has")
    if has_c and epilogue.has_bias:
        raise refuse("beta != 0 with a vector bias: XLA never fuses both into an FP8 call")
    base = 4 + has_c + epilogue.has_bias
    first_scale = 2 + has_c
    roles.update(a_scale=first_scale, b_scale=first_scale + 1)
    if has_c:
        roles["c"] = 2
    if n in (base, base + 1):              # HEAD: a, b, [c], a_scale, b_scale, [bias], [d_scale]
        roles["f8_order"] = "head"
        if epilogue.has_bias:
            roles["bias"] = first_scale + 2
        if n == base + 1:
            roles["d_scale"] = n - 1
    elif n == base + 2:                    # before 2024-09-27: a, b, [c], a/b/c/d scales, [bias]
        roles["f8_order"] = "pre-2024-09-27"
        roles.update(c_scale=first_scale + 2, d_scale=first_scale + 3)
        if epilogue.has_bias:
            roles["bias"] = first_scale + 4
    else:
        raise refuse(f"{n} operands: the FP8 call takes {base} or {base + 1} (a, b, {'c, ' if has_c else ''}"
                     f"a_scale, b_scale{', bias' if epilogue.has_bias else ''}, [d_scale]) or {base + 2} "
                     "(the order before 2024-09-27, with c_scale and d_scale)")
    return roles


def _result_leaves(inst: HloInstruction, target: str, epilogue: Epilogue, damax: bool,
                   refuse: _Refuse) -> tuple[Shape, dict[str, Any]]:
    shape = inst.shape
    if not shape.is_tuple:
        if epilogue.has_aux or damax or target == LT_MATMUL_F8:
            raise refuse("a bare array result, but the call has more than one output (aux, amax or FP8)")
        if not shape.is_array:
            raise refuse(f"result {shape.to_text()} is not an array")
        return shape, {}
    leaves = list(shape.tuple_shapes)
    named = ["d"] + (["aux"] if epilogue.has_aux else []) + (["amax"] if damax else [])
    if len(leaves) == len(named) + 1:
        named.append("workspace")
    elif len(leaves) != len(named):
        raise refuse(f"a result tuple of {len(leaves)} elements; expected ({', '.join(named)}, workspace)")
    out = {f"{n}_index": i for i, n in enumerate(named)}
    for i, leaf in enumerate(leaves):
        if not leaf.is_array:
            raise refuse(f"result element {i} ({leaf.to_text()}) is not an array")
    if "workspace" in named:
        ws = leaves[-1]
        if ws.rank != 1 or not is_integral(ws.element_type):
            raise refuse(f"the last result element {ws.to_text()} is not a byte workspace (s8[N] or u8[N])")
    if damax and (leaves[out["amax_index"]].rank != 0 or leaves[out["amax_index"]].element_type != "f32"):
        raise refuse(f"the amax result {leaves[out['amax_index']].to_text()} is not f32[]")
    return leaves[0], {"result_is_tuple": True, **out}


def _check_shapes(inst: HloInstruction, call: GemmCall, refuse: _Refuse) -> None:
    a, b = (inst.operands[i].shape for i in (call.a, call.b))
    for what, s in (("a", a), ("b", b)):
        if not s.is_array:
            raise refuse(f"operand {what} ({s.to_text()}) is not an array")
    dn = call.dot_dims
    out = call.output
    for what, s, batch, contract in (("lhs", a, dn.lhs_batch_dimensions, dn.lhs_contracting_dimensions),
                                     ("rhs", b, dn.rhs_batch_dimensions, dn.rhs_contracting_dimensions)):
        used = batch + contract
        if any(d < 0 or d >= s.rank for d in used) or len(set(used)) != len(used):
            raise refuse(f"{what} batch {list(batch)} and contracting {list(contract)} dims do not name "
                         f"distinct dims of {s.to_text()}")
    lb, rb = dn.lhs_batch_dimensions, dn.rhs_batch_dimensions
    lc, rc = dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions
    if lb and rb and len(lb) != len(rb):
        raise refuse(f"{len(lb)} lhs batch dims but {len(rb)} rhs batch dims")
    if len(lc) != len(rc) or any(a.dimensions[x] != b.dimensions[y] for x, y in zip(lc, rc)):
        raise refuse(f"contracting dims {list(lc)} of {a.to_text()} and {list(rc)} of {b.to_text()} differ")
    if lb and rb and any(a.dimensions[x] != b.dimensions[y] for x, y in zip(lb, rb)):
        raise refuse(f"batch dims {list(lb)} of {a.to_text()} and {list(rb)} of {b.to_text()} differ")
    # one side may have lost its batch dims (a broadcast folded into the call): reused per batch
    batch = [a.dimensions[d] for d in lb] if lb else [b.dimensions[d] for d in rb]
    free_a = [a.dimensions[d] for d in range(a.rank) if d not in lb + lc]
    free_b = [b.dimensions[d] for d in range(b.rank) if d not in rb + rc]
    want = tuple(batch + free_a + free_b)
    if tuple(out.dimensions) != want:
        raise refuse(f"output {out.to_text()} is not the dot's shape [{','.join(map(str, want))}]")
    _check_types(inst, call, a, b, refuse)
    if call.c is not None:
        c = inst.operands[call.c].shape
        if not c.is_array or tuple(c.dimensions) != tuple(out.dimensions):
            raise refuse(f"matrix C {c.to_text()} does not have the output's dims {out.dims_text()}")
    if call.bias is not None:
        bias = inst.operands[call.bias].shape
        n = out.dimensions[call.bias_dimension] if out.rank else 0
        if not bias.is_array or bias.rank != 1 or bias.dimensions[0] != n:
            raise refuse(f"bias {bias.to_text()} is not a vector of the output's most-minor dim "
                         f"(dim {call.bias_dimension if out.rank else '-'}, size {n})")
    for role in ("a_scale", "b_scale", "c_scale", "d_scale"):
        i = getattr(call, role)
        if i is not None:
            s = inst.operands[i].shape
            if not s.is_array or s.rank != 0 or not is_float(s.element_type):
                raise refuse(f"{role} (operand {i}, {s.to_text()}) is not a float scalar")
    if call.aux_index is not None:
        aux = inst.shape.tuple_shapes[call.aux_index]
        if tuple(aux.dimensions) != tuple(out.dimensions):
            raise refuse(f"aux output {aux.to_text()} does not have the output's dims {out.dims_text()}")


def _check_types(inst: HloInstruction, call: GemmCall, a: Shape, b: Shape, refuse: _Refuse) -> None:
    out_et = call.output.element_type
    if call.is_f8:
        if a.element_type not in F8_TYPES or b.element_type not in F8_TYPES:
            raise refuse(f"FP8 call on {a.element_type} x {b.element_type} operands")
        if not is_float(out_et):
            raise refuse(f"FP8 call with a {out_et} output")
        return
    types = (a.element_type, b.element_type, out_et)
    if all(is_float(t) or is_complex(t) for t in types):
        if is_complex(out_et) != is_complex(a.element_type):
            raise refuse(f"{a.element_type} x {b.element_type} -> {out_et} mixes complex and real")
    elif all(is_integral(t) for t in types) and out_et in ("s32", "s64", "u32", "u64"):
        pass
    else:
        raise refuse(f"{a.element_type} x {b.element_type} -> {out_et} is not a GEMM cuBLAS computes")
    if call.alpha[1] != 0 and not is_complex(out_et):
        raise refuse(f"a complex alpha ({call.alpha[0]} + {call.alpha[1]}i) with a real {out_et} output")
    if is_integral(out_et) and (call.alpha[0] != int(call.alpha[0]) or call.beta != int(call.beta)):
        raise refuse(f"alpha {call.alpha[0]} and beta {call.beta} must be integers with an {out_et} output")
    if is_integral(out_et) and call.epilogue is not Epilogue.DEFAULT:
        raise refuse(f"epilogue {call.epilogue.name} with an integer output")
