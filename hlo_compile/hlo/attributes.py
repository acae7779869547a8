"""Typed values of HLO instruction attributes, and decoders from their text.

Every attribute keeps its source text verbatim (``Attribute.raw``) for printing; the
decoded ``value`` is what analyses use. Decoders raise ``ValueError`` with a message in
words; the parser turns it into an ``HloParseError`` at the attribute's location.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .attribute_checks import CHECKERS


@dataclass
class Attribute:
    name: str
    raw: str
    value: Any = None


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class PaddingDim:
    low: int
    high: int
    interior: int = 0


@dataclass(frozen=True)
class WindowDim:
    size: int
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1  # rhs_dilate
    base_dilation: int = 1  # lhs_dilate
    window_reversal: bool = False


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """``dim_labels=b01f_01io->b01f``: positions of batch/feature/spatial dims."""
    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]


@dataclass(frozen=True)
class DotDimensionNumbers:
    lhs_batch_dimensions: tuple[int, ...] = ()
    rhs_batch_dimensions: tuple[int, ...] = ()
    lhs_contracting_dimensions: tuple[int, ...] = ()
    rhs_contracting_dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class GatherDimensionNumbers:
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScatterDimensionNumbers:
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int
    input_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()


# ---- decoders ---------------------------------------------------------------------------

_INT = re.compile(r"-?\d+")


def decode_int(raw: str) -> int:
    if not _INT.fullmatch(raw.strip()):
        raise ValueError(f"expects an integer, got '{raw}'")
    return int(raw)


def decode_int_list(raw: str) -> tuple[int, ...]:
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"expects a list of integers in braces, e.g. {{0,1}}, got '{raw}'")
    body = text[1:-1].strip()
    if body.startswith("{"):  # a list of lists (collective-permute's in-place slice sizes)
        return tuple(decode_int_list(part + "}") for part in re.split(r"\}\s*,\s*", body[:-1]))
    if not body:
        return ()
    items = [x.strip() for x in body.split(",")]
    for x in items:
        if not _INT.fullmatch(x):
            raise ValueError(f"expects integers in the list, got '{x}'")
    return tuple(int(x) for x in items)


def decode_bool(raw: str) -> bool:
    if raw == "true":
        return True
    if raw == "false":
        return False
    raise ValueError(f"expects true or false, got '{raw}'")


def decode_float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"expects a number, got '{raw}'") from None


def decode_string(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return bytes(raw[1:-1], "utf-8").decode("unicode_escape") if "\\" in raw else raw[1:-1]
    raise ValueError(f"expects a quoted string, got '{raw}'")


def decode_string_or_json(raw: str) -> str:
    if raw.startswith("{"):
        return raw
    return decode_string(raw)


def enum_decoder(*values: str, case_insensitive: bool = False) -> Callable[[str], str]:
    allowed = {v.lower() if case_insensitive else v for v in values}

    def decode(raw: str) -> str:
        key = raw.lower() if case_insensitive else raw
        if key not in allowed:
            raise ValueError(f"expects one of {', '.join(values)}, got '{raw}'")
        return raw
    return decode


_SLICE_DIM = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def decode_slice(raw: str) -> tuple[SliceDim, ...]:
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("expects slice ranges like {[0:10:2], [3:7]}")
    body = text[1:-1].strip()
    out = []
    pos = 0
    while pos < len(body):
        m = _SLICE_DIM.match(body, pos)
        if not m:
            raise ValueError(f"expects a slice range [start:limit(:stride)] at '{body[pos:pos + 20]}'")
        out.append(SliceDim(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)))
        pos = m.end()
        rest = body[pos:].lstrip()
        if rest.startswith(","):
            pos = len(body) - len(rest) + 1
            while pos < len(body) and body[pos].isspace():
                pos += 1
        elif rest:
            raise ValueError(f"expects ',' between slice ranges at '{rest[:20]}'")
    return tuple(out)


def decode_padding(raw: str) -> tuple[PaddingDim, ...]:
    out = []
    for part in raw.split("x"):
        fields = part.split("_")
        if len(fields) not in (2, 3) or not all(_INT.fullmatch(f) for f in fields):
            raise ValueError("expects padding_low and padding_high separated by '_' "
                             f"(and optional interior padding), got '{part}'")
        out.append(PaddingDim(*(int(f) for f in fields)))
    return tuple(out)


def _dxd(value: str, key: str) -> list[int]:
    parts = value.split("x")
    if not all(_INT.fullmatch(p) for p in parts):
        raise ValueError(f"window {key} expects sizes like 3x3, got '{value}'")
    return [int(p) for p in parts]


def decode_window(raw: str) -> tuple[WindowDim, ...]:
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("expects a window like {size=3x3 stride=2x2 pad=1_1x1_1}")
    fields: dict[str, str] = {}
    for item in text[1:-1].replace(",", " ").split():
        if "=" not in item:
            raise ValueError(f"expects key=value in window, got '{item}'")
        k, v = item.split("=", 1)
        if k in fields:
            raise ValueError(f"window has '{k}' twice")
        fields[k] = v
    if not fields:
        return ()  # window={}: no spatial dimensions (XLA prints and parses it so)
    known = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"}
    for k in fields:
        if k not in known:
            raise ValueError(f"unknown window attribute '{k}'")
    if "size" not in fields:
        raise ValueError("window requires size=")
    size = _dxd(fields["size"], "size")
    n = len(size)

    def per_dim(key: str, default: int) -> list[int]:
        if key not in fields:
            return [default] * n
        vals = _dxd(fields[key], key)
        if len(vals) != n:
            raise ValueError(f"window {key} has {len(vals)} dimensions but size has {n}")
        return vals

    if "pad" in fields:
        pads = []
        for part in fields["pad"].split("x"):
            lo_hi = part.split("_")
            if len(lo_hi) != 2 or not all(_INT.fullmatch(f) for f in lo_hi):
                raise ValueError(f"window pad expects low_high per dimension, got '{part}'")
            pads.append((int(lo_hi[0]), int(lo_hi[1])))
        if len(pads) != n:
            raise ValueError(f"window pad has {len(pads)} dimensions but size has {n}")
    else:
        pads = [(0, 0)] * n
    stride = per_dim("stride", 1)
    lhs = per_dim("lhs_dilate", 1)
    rhs = per_dim("rhs_dilate", 1)
    rev = per_dim("rhs_reversal", 0)
    return tuple(WindowDim(size[i], stride[i], pads[i][0], pads[i][1], rhs[i], lhs[i], bool(rev[i]))
                 for i in range(n))


_DIM_LABELS = re.compile(r"([0-9bf?]{2,})_([0-9io?]{2,})->([0-9bf?]{2,})")


def decode_dim_labels(raw: str) -> ConvDimensionNumbers:
    m = _DIM_LABELS.fullmatch(raw.strip())
    if m and "?" in raw:  # don't-care labels (custom-call only); kept as text
        lhs = m.group(1)
        nspatial = len(lhs) - 2
        for part in m.groups():
            for ch in part:
                if ch.isdigit() and int(ch) >= nspatial:
                    raise ValueError(f"invalid convolution dimension numbers '{raw}': spatial dimension {ch} "
                                     f"exceeds the {nspatial} spatial dimensions")
        return raw
    if not m:
        raise ValueError(f"expects convolution dimension numbers like b01f_01io->b01f, got '{raw}'")
    lhs, rhs, out = m.groups()
    if not (len(lhs) == len(rhs) == len(out)):
        raise ValueError(f"convolution dimension numbers '{raw}' have parts of different rank")
    nspatial = len(lhs) - 2

    def spatial(labels: str, what: str) -> tuple[int, ...]:
        pos = {}
        for i, ch in enumerate(labels):
            if ch.isdigit():
                d = int(ch)
                if d >= nspatial or d in pos:
                    raise ValueError(f"invalid dimension numbers '{raw}': spatial dim {ch} in {what}")
                pos[d] = i
        if len(pos) != nspatial:
            raise ValueError(f"invalid dimension numbers '{raw}': {what} lacks spatial dims")
        return tuple(pos[i] for i in range(nspatial))

    def find(labels: str, ch: str, what: str) -> int:
        if labels.count(ch) != 1:
            raise ValueError(f"invalid dimension numbers '{raw}': {what} needs one '{ch}'")
        return labels.index(ch)

    return ConvDimensionNumbers(
        find(lhs, "b", "input"), find(lhs, "f", "input"), spatial(lhs, "input"),
        find(rhs, "i", "kernel"), find(rhs, "o", "kernel"), spatial(rhs, "kernel"),
        find(out, "b", "output"), find(out, "f", "output"), spatial(out, "output"))


def decode_name_list(raw: str) -> tuple[str, ...]:
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"expects a list of names in braces, got '{raw}'")
    body = text[1:-1].strip()
    if not body:
        return ()
    if body.startswith("{"):
        return ("{inline}",)  # inline computations; the parser splits and parses them
    return tuple(x.strip().lstrip("%") for x in body.split(","))


def decode_name(raw: str) -> str:
    if raw.startswith("{"):
        return raw  # an inline computation; the parser handles it
    if not re.fullmatch(r"%?[A-Za-z_][A-Za-z0-9_.\-]*", raw):
        raise ValueError(f"expects a computation name, got '{raw}'")
    return raw.lstrip("%")


def decode_raw(raw: str) -> str:
    return raw


_CMP_DIRECTIONS = ("EQ", "NE", "GE", "GT", "LE", "LT")

COMPUTATION_ATTRS = frozenset({"to_apply", "calls", "condition", "body", "select", "scatter",
                               "true_computation", "false_computation"})
COMPUTATION_LIST_ATTRS = frozenset({"branch_computations", "called_computations"})

DECODERS: dict[str, Callable[[str], Any]] = {
    **{k: decode_int_list for k in (
        "dimensions", "slice_sizes", "dynamic_slice_sizes", "offset_dims", "collapsed_slice_dims",
        "start_index_map", "operand_batching_dims", "start_indices_batching_dims",
        "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
        "input_batching_dims", "scatter_indices_batching_dims", "lhs_batch_dims", "rhs_batch_dims",
        "lhs_contracting_dims", "rhs_contracting_dims", "fft_length", "lhs_ragged_dims",
        "rhs_group_dims", "lhs_batch_dims", "rhs_batch_dims")},
    **{k: decode_int for k in (
        "index", "iota_dimension", "index_vector_dim", "feature_group_count", "batch_group_count",
        "exponent_bits", "mantissa_bits", "k", "feature_index", "channel_id", "inferred_dimension",
        "num_carries", "cross_program_prefetch_index", "split_count", "replica_count",
        "num_partitions")},
    **{k: decode_bool for k in (
        "is_stable", "largest", "indices_are_sorted", "unique_indices", "constrain_layout",
        "use_global_device_ids", "custom_call_has_side_effect", "is_host_transfer", "left_side",
        "lower", "unit_diagonal", "is_reverse", "is_associative", "is_scheduled",
        "alias_passthrough_params", "is_cross_program_prefetch")},
    "epsilon": decode_float,
    **{k: decode_string for k in (
        "custom_call_target", "infeed_config", "outfeed_config", "async_execution_thread",
        "execution_thread", "async_group_id")},
    "backend_config": decode_string_or_json,
    "direction": enum_decoder(*_CMP_DIRECTIONS),
    "type": enum_decoder("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED", "PARTIALORDER"),
    "kind": enum_decoder("kLoop", "kInput", "kOutput", "kCustom"),
    "distribution": enum_decoder("rng_uniform", "rng_normal"),
    "fft_type": enum_decoder("FFT", "IFFT", "RFFT", "IRFFT"),
    "transpose_a": enum_decoder("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT", "TRANSPOSE_INVALID"),
    "padding_type": enum_decoder("PADDING_VALID", "PADDING_SAME", "PADDING_INVALID"),
    "schedule": enum_decoder("SCHEDULE_NONE", "SCHEDULE_LATEST", "SCHEDULE_EARLIEST"),
    "slice": decode_slice,
    "padding": decode_padding,
    "window": decode_window,
    "dim_labels": decode_dim_labels,
    "control-predecessors": decode_name_list,
    **{k: decode_name for k in COMPUTATION_ATTRS},
    **{k: decode_name_list for k in COMPUTATION_LIST_ATTRS},
}


def _checked(name: str):
    return CHECKERS.get(name, decode_raw)


def decode(name: str, raw: str) -> Any:
    decoder = DECODERS.get(name)
    return decoder(raw) if decoder is not None else _checked(name)(raw)
