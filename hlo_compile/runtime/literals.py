"""Literals on disk and generated inputs (DESIGN.md §5).

npz convention: inputs ``arg0, arg1, ...`` in ENTRY parameter order, a tuple parameter
flattened depth-first as ``arg0.0, arg0.1, ...``; outputs ``out0, out1, ...``, the result's
leaves depth-first. ml_dtypes arrays (bf16, f8...) are stored as ``np.savez`` writes them
(raw ``|V2``/``|V1``) and re-viewed by the parameter's element type on input.

SPMD (R x P participants): participant k (flattened id, replica-major) reads ``p{k}.arg{i}``
when present, else the shared ``arg{i}``, and writes ``p{k}.out{j}``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..hlo.dtypes import numpy_dtype
from ..hlo.element_types import element_type
from ..hlo.errors import HloError
from ..hlo.ir import HloComputation, HloModule
from ..hlo.shape import Shape

FLOAT_RANGE = (-0.1, 0.2)  # run_hlo_module's default range for random float inputs


def flatten(value: Any) -> list[np.ndarray]:
    """The leaves of a (nested tuple) value, depth first."""
    if isinstance(value, (tuple, list)):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [np.asarray(value)]


def view_as(arr: np.ndarray, shape: Shape, key: str) -> np.ndarray:
    """``arr`` as the numpy dtype of ``shape``'s element type (raw bytes re-viewed)."""
    dt = numpy_dtype(shape.element_type)
    arr = np.asarray(arr)
    if arr.dtype != dt:
        if arr.dtype.kind == "V" or (dt.kind == "V" or dt.kind not in "biufc" or arr.dtype.kind not in "biufc"):
            if arr.dtype.itemsize != dt.itemsize:
                raise HloError(f"input '{key}' has dtype {arr.dtype} ({arr.dtype.itemsize} bytes), "
                               f"parameter is {shape.element_type} ({dt.itemsize} bytes)")
            arr = arr.view(dt)
        else:
            raise HloError(f"input '{key}' has dtype {arr.dtype}, parameter is {shape.element_type}")
    if tuple(arr.shape) != tuple(shape.dimensions):
        raise HloError(f"input '{key}' has shape {list(arr.shape)}, parameter is {shape.to_text(False)}")
    return arr


def _unflatten(files, key: str, shape: Shape, prefix: str = "") -> Any:
    if shape.is_tuple:
        return tuple(_unflatten(files, f"{key}.{i}", s, prefix) for i, s in enumerate(shape.tuple_shapes))
    if shape.is_token:
        return None
    if prefix and prefix + key in files:
        return view_as(files[prefix + key], shape, prefix + key)
    if key not in files:
        raise HloError(f"input literals have no '{key}' (have: {', '.join(sorted(files)) or 'nothing'})")
    return view_as(files[key], shape, key)


def load_inputs(path: str | Path, module: HloModule, participant: int | None = None) -> list[Any]:
    """Arguments for ``module``'s ENTRY from an npz file (``participant`` k: ``p{k}.arg{i}``
    where present, else ``arg{i}``)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            files = {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise HloError(f"cannot read input literals {path}: {e}") from None
    prefix = "" if participant is None else f"p{participant}."
    return [_unflatten(files, f"arg{p.parameter_number}", p.shape, prefix) for p in module.entry.parameters]


def output_arrays(value: Any) -> dict[str, np.ndarray]:
    return {f"out{i}": a for i, a in enumerate(flatten(value))}


def save_outputs(path: str | Path, value: Any) -> None:
    np.savez(path, **output_arrays(value))


def save_participant_outputs(path: str | Path, values: list[Any]) -> None:
    """Each participant's result: ``p{k}.out{j}``."""
    np.savez(path, **{f"p{k}.{key}": a for k, v in enumerate(values) for key, a in output_arrays(v).items()})


def input_arrays(args: list[Any], prefix: str = "") -> dict[str, np.ndarray]:
    """``{prefix}arg{i}`` (tuple elements ``{prefix}arg{i}.{j}``) for each argument."""
    arrays: dict[str, np.ndarray] = {}

    def put(key: str, v: Any) -> None:
        if isinstance(v, (tuple, list)):
            for i, x in enumerate(v):
                put(f"{key}.{i}", x)
        elif v is not None:
            arrays[key] = np.asarray(v)
    for i, a in enumerate(args):
        put(f"{prefix}arg{i}", a)
    return arrays


def save_inputs(path: str | Path, args: list[Any]) -> None:
    np.savez(path, **input_arrays(args))


def save_participant_inputs(path: str | Path, args: list[list[Any]]) -> None:
    """Each participant's arguments: ``p{k}.arg{i}``."""
    np.savez(path, **{key: a for k, mine in enumerate(args) for key, a in input_arrays(mine, f"p{k}.").items()})


def load_outputs(path: str | Path) -> list[np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        n = len([k for k in f.files if k.startswith("out")])
        return [f[f"out{i}"] for i in range(n)]


# ---- generated inputs -------------------------------------------------------------------------

_PASS_THROUGH = {"convert", "reshape", "bitcast", "copy", "broadcast", "slice", "transpose",
                 "get-tuple-element", "bitcast-convert", "concatenate"}


def _trace_parameter(inst):
    """The parameter that ``inst`` is (through shape-only ops), or None."""
    seen = 0
    while inst.opcode in _PASS_THROUGH and inst.operands and seen < 64:
        inst = inst.operands[0]
        seen += 1
    return inst if inst.opcode == "parameter" else None


def _index_uses(inst) -> list[tuple[int, int]]:
    """(operand number, largest valid start) for each index operand of ``inst``."""
    if inst.opcode not in ("dynamic-slice", "dynamic-update-slice", "gather", "scatter") or not inst.operands:
        return []
    op0 = inst.operands[0].shape
    if inst.opcode == "dynamic-slice":
        sizes = inst.attr("dynamic_slice_sizes")
        return [(1 + k, op0.dimensions[k] - sizes[k]) for k in range(len(sizes)) if 1 + k < len(inst.operands)]
    if inst.opcode == "dynamic-update-slice":
        upd = inst.operands[1].shape.dimensions
        return [(2 + k, op0.dimensions[k] - upd[k]) for k in range(len(upd)) if 2 + k < len(inst.operands)]
    if inst.opcode == "gather":
        dn = inst.gather_dimension_numbers
        sizes = inst.attr("slice_sizes")
        bound = min((op0.dimensions[d] - sizes[d] for d in dn.start_index_map), default=0)
        return [(1, bound)]
    if inst.opcode == "scatter":
        n = (len(inst.operands) - 1) // 2
        dn = inst.scatter_dimension_numbers
        upd = inst.operands[n + 1].shape.dimensions
        window_operand = [d for d in range(op0.rank)
                          if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
        bounds = []
        for od in dn.scatter_dims_to_operand_dims:
            size = upd[dn.update_window_dims[window_operand.index(od)]] if od in window_operand else 1
            bounds.append(op0.dimensions[od] - size)
        return [(n, min(bounds, default=0))]
    return []


def index_bounds(comp: HloComputation, _depth: int = 0) -> dict[int, int]:
    """For parameters of ``comp`` used as gather/scatter/dynamic-slice indices: the largest
    start index valid for every such use."""
    bounds: dict[int, int] = {}

    def note(operand, bound):
        p = _trace_parameter(operand)
        if p is not None and p.parent is comp:
            bounds[p.parameter_number] = min(bounds.get(p.parameter_number, bound), max(bound, 0))
    for inst in comp.instructions:
        for i, b in _index_uses(inst):
            note(inst.operands[i], b)
        if inst.opcode in ("call", "fusion") and _depth < 32:
            called = inst.attr("to_apply", None) or inst.attr("calls", None)
            if called is not None:
                for pn, b in index_bounds(called, _depth + 1).items():
                    if pn < len(inst.operands):
                        note(inst.operands[pn], b)
    return bounds


_SPECIAL_FLOATS = (0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan)
_SPECIAL_PROBABILITY = 1e-6  # per special value, as run_hlo_module's large range


def _large_range_floats(dt: np.dtype, dims: tuple[int, ...] | int, rng: np.random.Generator) -> np.ndarray:
    """``--use-large-float-range``: log-uniform magnitudes over the whole exponent range of
    ``dt``, random signs, and now and then ±0, ±1, ±inf or NaN (run_hlo_module's large range).
    ``dims`` is a shape or (chunked generation) a count."""
    import ml_dtypes
    info = ml_dtypes.finfo(dt)
    exponents = rng.uniform(info.minexp, info.maxexp - 1, size=dims)
    signs = np.where(rng.integers(0, 2, size=dims) == 0, 1.0, -1.0)
    values = np.exp2(exponents) * signs
    special = rng.random(size=dims) < _SPECIAL_PROBABILITY * len(_SPECIAL_FLOATS)
    if np.any(special):
        picks = rng.integers(0, len(_SPECIAL_FLOATS), size=int(np.count_nonzero(special)))
        values[special] = np.asarray(_SPECIAL_FLOATS)[picks]
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(dt)


# Generated inputs are drawn this many elements at a time, straight into an array of the
# parameter's own element type: the f64 (or int64) draws of one chunk are the only temporary
# (16 MiB at most), never an f64 copy of the whole input. An array of at most one chunk gets
# exactly the values one whole draw gave before (the same stream); a larger one the same
# distribution, its integers and large-range floats drawn chunk by chunk.
CHUNK_ELEMENTS = 1 << 20
GENERATION_TEMPORARY_BYTES = CHUNK_ELEMENTS * 16  # an upper bound of the per-chunk draws


def _fill(out: np.ndarray, draw) -> np.ndarray:
    """``out`` filled chunk by chunk with ``draw(count)`` (cast to ``out``'s dtype)."""
    flat = out.reshape(-1)  # a view: ``out`` is new and C-contiguous
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, flat.size, CHUNK_ELEMENTS):
            stop = min(start + CHUNK_ELEMENTS, flat.size)
            flat[start:stop] = draw(stop - start)
    return out


def _random_leaf(shape: Shape, rng: np.random.Generator, index_bound: int | None,
                 large_float_range: bool = False) -> np.ndarray:
    dt = numpy_dtype(shape.element_type)
    dims = tuple(shape.dimensions)
    kind = element_type(shape.element_type).kind
    out = np.empty(dims, dtype=bool if kind == "pred" else dt)
    if index_bound is not None and kind in ("signed", "unsigned"):
        return _fill(out, lambda n: rng.integers(0, index_bound + 1, size=n))
    if kind == "pred":
        return _fill(out, lambda n: rng.integers(0, 2, size=n).astype(bool))
    if kind == "signed":
        return _fill(out, lambda n: rng.integers(-5, 6, size=n))
    if kind == "unsigned":
        return _fill(out, lambda n: rng.integers(0, 11, size=n))
    if kind == "complex":
        # real parts first, then imaginary parts: the stream one whole draw of each gave
        part = np.dtype(np.float32 if dt == np.complex64 else np.float64)
        if large_float_range:
            draw = lambda n: _large_range_floats(part, n, rng)  # noqa: E731
        else:
            draw = lambda n: rng.uniform(*FLOAT_RANGE, size=n)  # noqa: E731
        flat = out.reshape(-1)
        _fill(flat.real, draw)
        _fill(flat.imag, draw)
        return out
    if large_float_range:
        return _fill(out, lambda n: _large_range_floats(dt, n, rng))
    return _fill(out, lambda n: rng.uniform(*FLOAT_RANGE, size=n))


def random_inputs(module: HloModule, seed: int = 0, *, iteration: int = 0,
                  large_float_range: bool = False) -> list[Any]:
    """Arguments like run_hlo_module's: floats uniform in [-0.1, 0.2] (or, with
    ``large_float_range``, log-uniform over the type's whole range); integers that index a
    gather/scatter/dynamic-slice in range; other integers small. Each ``iteration`` draws new
    values (iteration 0 is what ``seed`` alone always gave), as run_hlo_module's iterations do."""
    rng = np.random.default_rng(seed if iteration == 0 else [seed, iteration])
    bounds = index_bounds(module.entry)

    def make(shape: Shape, bound):
        if shape.is_tuple:
            return tuple(make(s, None) for s in shape.tuple_shapes)
        if shape.is_token:
            return None
        return _random_leaf(shape, rng, bound, large_float_range)
    return [make(p.shape, bounds.get(p.parameter_number)) for p in module.entry.parameters]


def zero_inputs(module: HloModule) -> list[Any]:
    """All-zero arguments (run_hlo_module's ``--random_init_input_literals=false`` leaves them
    uninitialised; zeros are the reproducible stand-in)."""
    def make(shape: Shape):
        if shape.is_tuple:
            return tuple(make(s) for s in shape.tuple_shapes)
        if shape.is_token:
            return None
        return np.zeros(tuple(shape.dimensions), dtype=numpy_dtype(shape.element_type))
    return [make(p.shape) for p in module.entry.parameters]


