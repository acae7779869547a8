"""Split reductions that are not race-free into two, as XLA's ``TreeReductionRewriter``.

The reduction emitters only handle race-free reductions (notes/xla.md §b.1, ``is_race_free``):
a row reduction ``[z, y, x] -> [y]`` with ``x <= 16384`` and ``z <= 8``, a column reduction
``[a, b, c] -> [a, c]`` with ``b <= 4096``. Larger ones are rewritten before fusion wrapping:

- the operands are bitcast to the normalised shape (size-1 dims dropped), which is free for
  the default layouts this pass requires;
- row with ``z > 8``: reduce ``x`` first (``[z, y]``), then ``z`` (a column reduction);
- otherwise the split dim (row: ``x``, column: ``b``) of size ``n`` is padded with the init
  value to ``k1 · k2`` (``k2`` searched between ``√n / 2`` and ``√n``, capped at the race-free
  bound, for the least padding, ties to a power of two; then possibly swapped as XLA does),
  bitcast to ``[..., k1, k2, ...]``, reduced over ``k2`` (and ``z``) and then over ``k1``;
- the result is bitcast back to the original output shape under the original name.

Produced reduces that are still not race-free are split again (worklist). Variadic reduces
(argmax) are split the same way (every operand padded with its own init value; the
intermediate tuple is taken apart with get-tuple-element). Reduces whose operand or output
has a non-default layout, or that are not "from or to contiguous dimensions", are left
alone. Like XLA, this relies on the init value being an identity of the reducer.

What is race-free comes from ``gpu/reductions.py`` (shared with the code generator's fusion analysis,
XLA's ``is_race_free``), for the device the module is compiled for.
"""
from __future__ import annotations

import math

from hlo_compile.gpu.device_info import DeviceInfo
from hlo_compile.gpu.reductions import (is_race_free, is_reduction_from_or_to_contiguous_dimensions,
                                       reduction_dimensions)
from hlo_compile.hlo.attributes import Attribute, decode
from hlo_compile.hlo.ir import HloComputation, HloInstruction
from hlo_compile.hlo.rewrite import (NameScope, Target, computation_of, insert_instructions, module_of,
                                     new_instruction, replace_instructions, take_name)
from hlo_compile.hlo.shape import Shape

BATCH_RACE_FREE_BOUND = 8          # row z
ROW_RACE_FREE_BOUND = 1024 * 16    # row x


def rewrite_tree_reductions(target: Target, device: DeviceInfo | None) -> Target:
    """Rewrite every non-race-free ``reduce`` of ``target`` (a computation, or a module's
    ENTRY) in place; returns ``target``."""
    comp = computation_of(target)
    names = NameScope.of_instructions(module_of(comp).computations)
    work = [i for i in comp.instructions if i.opcode == "reduce"]
    while work:
        inst = work.pop(0)
        new = split_reduce(comp, inst, device, names)
        work.extend(new)
    comp.rebuild_users()
    return target


# ---- one reduce ------------------------------------------------------------------------------

def _column_bound(device: DeviceInfo | None) -> int:
    return (device.threads_per_warp if device else 32) * 128


def needs_split(red: HloInstruction, device: DeviceInfo | None) -> bool:
    """Whether ``split_reduce`` rewrites ``red``: a contiguous reduce that is not race-free,
    with default layouts."""
    if not is_reduction_from_or_to_contiguous_dimensions(red, device):
        return False
    if is_race_free(reduction_dimensions(red), device):
        return False
    outs = red.shape.tuple_shapes if red.shape.is_tuple else [red.shape]
    inputs = red.operands[:len(red.operands) // 2]
    return all(s.has_default_layout() for s in [x.shape for x in inputs] + list(outs))


def split_reduce(comp: HloComputation, red: HloInstruction, device: DeviceInfo | None,
                 names: NameScope) -> list[HloInstruction]:
    """Replace ``red`` (an instruction of ``comp``) if it is not race-free; returns the new
    reduces ``[inner, outer]`` (to be checked again; the outer one computes ``red``'s value),
    or ``[]`` when ``red`` stays."""
    n_in = len(red.operands) // 2
    inputs, inits = red.operands[:n_in], red.operands[n_in:]
    outs = red.shape.tuple_shapes if red.shape.is_tuple else [red.shape]
    if not needs_split(red, device):
        return []
    rd = reduction_dimensions(red)
    if rd.is_row:
        z, y, x = rd.dimensions
        norm = [(z, True), (y, False), (x, True)]
        split = 2
    else:
        a, b, c = rd.dimensions
        norm = [(a, False), (b, True), (c, False)]
        split = 1
    keep = [i for i, (n, _) in enumerate(norm) if n > 1 or i == split]
    dims = [norm[i][0] for i in keep]
    reduced = [norm[i][1] for i in keep]
    split = keep.index(split)
    b = _Builder(comp, red, names)
    xs = [x if tuple(x.shape.dimensions) == tuple(dims) else
          b.add(_name(red, "normalized"), "bitcast", _shape(x, dims), [x]) for x in inputs]
    if rd.is_row and rd.dimensions[0] > BATCH_RACE_FREE_BOUND:
        # Case (1) of XLA: the batch does not fit: reduce x, then z.
        inner = b.reduce(_name(red, "inner"), xs, inits, [split])
        kept = [d for i, d in enumerate(dims) if i != split]
        outer_in = b.leaves(inner, [_shape(x, kept) for x in inputs])
        outer = b.reduce(_name(red, "outer"), outer_in, inits, [0])   # z (> 8) is the first dim
        b.finish(outer, outs)
        return [inner, outer]
    n = dims[split]
    bound = ROW_RACE_FREE_BOUND if rd.is_row else _column_bound(device)
    k1, k2 = split_factors(n, bound, rd.is_row)
    padded_n = k1 * k2
    if padded_n != n:
        pdims = list(dims)
        pdims[split] = padded_n
        cfg = "x".join(f"0_{padded_n - n}" if i == split else "0_0" for i in range(len(dims)))
        xs = [b.add(_name(red, "padded"), "pad", _shape(x, pdims), [x, init],
                    {"padding": Attribute("padding", cfg, decode("padding", cfg))})
              for x, init in zip(xs, inits)]
    rdims = dims[:split] + [k1, k2] + dims[split + 1:]
    rreduced = reduced[:split] + [True, True] + reduced[split + 1:]
    xs = [b.add(_name(red, "reshaped"), "bitcast", _shape(x, rdims), [v]) for x, v in zip(inputs, xs)]
    inner_dims = [i for i, r in enumerate(rreduced) if r and i != split]     # k2 and the batch z
    inner = b.reduce(_name(red, "inner"), xs, inits, inner_dims)
    kept = [d for i, d in enumerate(rdims) if i not in inner_dims]
    outer_in = b.leaves(inner, [_shape(x, kept) for x in inputs])
    outer = b.reduce(_name(red, "outer"), outer_in, inits, [split - sum(1 for i in inner_dims if i < split)])
    b.finish(outer, outs)
    return [inner, outer]


def split_factors(n: int, race_free_bound: int, is_row: bool) -> tuple[int, int]:
    """``(k1, k2)`` with ``k1 · k2 >= n``: the outer and the inner (reduced first) sizes.

    XLA's search: ``k2`` from ``floor(√n)`` (capped at the race-free bound) down to just above
    half of it, least padding first, a power of two on ties; then the swap rule of
    ``ShouldSwapInnerAndOuterReducedMinorDimension``."""
    n_div_k = min(math.isqrt(n), race_free_bound)
    min_pad = (n_div_k - n % n_div_k) % n_div_k
    best_k = (n + min_pad) // n_div_k
    i = n_div_k - 1
    while i > n_div_k // 2:
        pad = (i - n % i) % i
        if pad < min_pad or (pad == min_pad and i & (i - 1) == 0):
            min_pad, best_k = pad, (n + pad) // i
        i -= 1
    padded = n + min_pad
    if _should_swap(best_k, padded // best_k, n, race_free_bound, is_row):
        best_k = padded // best_k
    return best_k, padded // best_k


def _should_swap(k: int, n_div_k: int, n: int, bound: int, is_row: bool) -> bool:
    if k > bound:
        return False
    if is_row:
        if n_div_k % 2 == 0 and n % 2 == 0:
            return n_div_k * 2 < k or k % 2 == 0
        return n % 2 == 0 or k % 2 != 0
    return True


# ---- building instructions -------------------------------------------------------------------

def _shape(x: HloInstruction, dims) -> Shape:
    return Shape.array(x.shape.element_type, dims)


def _name(red: HloInstruction, what: str) -> str:
    return f"{red.name}.{what}"


class _Builder:
    """Inserts new instructions before ``red`` and finally replaces ``red``."""

    def __init__(self, comp: HloComputation, red: HloInstruction, names: NameScope):
        self.comp, self.red, self.names = comp, red, names
        self.inits = red.operands[len(red.operands) // 2:]

    def add(self, name: str, opcode: str, shape: Shape, operands, attrs=None) -> HloInstruction:
        inst = new_instruction(self.names.fresh(name), opcode, shape, operands, attrs, like=self.red)
        insert_instructions(self.comp, [inst], before=self.red)
        return inst

    def reduce(self, name: str, inputs, inits, dims) -> HloInstruction:
        shapes = []
        for x in inputs:
            kept = [d for i, d in enumerate(x.shape.dimensions) if i not in dims]
            shapes.append(Shape.array(x.shape.element_type, kept))
        shape = shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)
        raw = "{" + ",".join(map(str, dims)) + "}"
        attrs = {"dimensions": Attribute("dimensions", raw, tuple(dims)),
                 "to_apply": self.red.attributes["to_apply"]}
        return self.add(name, "reduce", shape, list(inputs) + list(inits), attrs)

    def leaves(self, inst: HloInstruction, shapes) -> list[HloInstruction]:
        if not inst.shape.is_tuple:
            return [inst]
        return [self.add(f"{inst.name}.{k}", "get-tuple-element", s, [inst],
                         {"index": Attribute("index", str(k), k)}) for k, s in enumerate(shapes)]

    def finish(self, outer: HloInstruction, outs) -> None:
        """Bitcast ``outer`` to the original result shapes; the original name goes to the
        instruction that replaces ``red``."""
        red = self.red
        leaves = self.leaves(outer, [Shape.array(s.element_type, [d for d in _kept(outer, k)])
                                     for k, s in enumerate(outs)])
        results = []
        for leaf, s in zip(leaves, outs):
            if tuple(leaf.shape.dimensions) == tuple(s.dimensions):
                results.append(leaf)
            else:
                results.append(self.add(_name(red, "result"), "bitcast", s, [leaf]))
        if red.shape.is_tuple:
            final = self.add(red.name + ".tree", "tuple", red.shape, results)
        else:
            final = results[0]
        # the replacement takes the original name (users, ROOT and dumps keep naming it)
        take_name(final, red, self.names)
        replace_instructions(self.comp, {red: final})


def _kept(reduce: HloInstruction, k: int):
    shape = reduce.shape.tuple_shapes[k] if reduce.shape.is_tuple else reduce.shape
    return shape.dimensions
