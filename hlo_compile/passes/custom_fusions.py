"""XLA:GPU's ``kind=kCustom`` fusions made into what our emitters compile.

A Triton, cuDNN or custom-kernel fusion (``fusion_backend_config.kind`` = ``__triton_gemm``,
``__triton_nested_gemm_fusion``, ``__triton``, ``__triton_softmax``, ``__triton_collective``,
``__cudnn$fusion``, ``__custom_fusion``) computes exactly its called computation; the config
only says how XLA generates code (notes/xla-gpu-calls.md §4-5). So:

- a fusion our emitters compile as one kernel stays a fusion (a GEMM with its prologue and
  epilogue, an elementwise or reduction fusion): ``codegen/analysis/fusion_analysis.py`` reports XLA's
  kind and config beside the emitter we use;
- Triton's block-level fusions of a normalization "diamond" (``__triton``: a reduction whose
  result is broadcast back and combined with its input; softmax, layer norm) stay a fusion
  when ``block_level_tiling`` can tile them as XLA does (``output_tiles``, ``num_warps``): the
  block-level emitter (``codegen/emitters/block_level.py``) runs them as one kernel with XLA's
  launch. One it cannot tile is made a call (below): our loop emitter would recompute the
  reduction for every element;
- a fusion that would not be one good kernel for us becomes a ``call`` of its computation,
  which call inlining flattens and our fusion pass re-fuses: the block-level diamonds above
  that ``block_level_tiling`` refuses, computations
  with more than one dot or convolution, ``__custom_fusion`` (address computations around a
  library call, CUTLASS GEMMs) and ``__triton_collective``;
- nested ``kCustom`` fusions (the older ``__triton_nested_gemm_fusion`` form outlines each dot
  operand's producers into a nested ``block_fusion``) are inlined into their parent first;
- operand-less scratch custom-calls (``__nop``, ``__custom_kernel_fusion$workspace``:
  uninitialised workspace buffers) become zeros of their shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.attributes import Attribute
from ..hlo.backend_config import fusion_backend_config
from ..hlo.calls.library_targets import SCRATCH_TARGETS
from ..hlo.rewrite import NameScope, insert_instructions, new_instruction
from ..hlo.shape import Shape
from ..indexing import affine as A
from ..indexing.affine import Expr
from ..indexing.indexing_map import IndexingMap, compose
from ..indexing.op_maps import output_to_input
from ..indexing.simplifier import simplify
from .inline_calls import inline_calls

CUSTOM_FUSION_KINDS = frozenset({"__triton_gemm", "__triton_nested_gemm_fusion", "__triton", "__triton_softmax",
                                 "__triton_collective", "__cudnn$fusion", "__custom_fusion"})
# kinds whose computation we always flatten and re-fuse
_ALWAYS_INLINED = frozenset({"__custom_fusion", "__triton_collective"})
# ops a value passes through on its way to a root without changing which kernel computes it
_PASS_THROUGH = frozenset({"bitcast", "reshape", "convert", "copy", "negate", "abs", "tuple", "get-tuple-element"})
_KEPT_ATTRIBUTES = ("metadata", "frontend_attributes")


def custom_fusion_kind(inst: HloInstruction) -> str:
    """The ``fusion_backend_config.kind`` of a ``kCustom`` fusion ("" for any other instruction)."""
    if inst.opcode != "fusion" or inst.attr("kind", None) != "kCustom":
        return ""
    return str(fusion_backend_config(inst).get("kind", ""))


def lower_custom_fusions(module: HloModule) -> HloModule:
    """Rewrite the ``kCustom`` fusions of every computation as the module docstring says; in place."""
    for comp in list(module.computations):
        _replace_scratch_calls(comp)
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            kind = custom_fusion_kind(inst)
            if kind not in CUSTOM_FUSION_KINDS:
                continue
            body = inst.attr("calls")
            _inline_nested_fusions(body)
            if kind in _ALWAYS_INLINED or not _one_kernel(body):
                if kind in BLOCK_LEVEL_KINDS and isinstance(block_level_tiling(inst), BlockLevelTiling):
                    continue
                _as_call(inst)
    return module


def _replace_scratch_calls(comp: HloComputation) -> None:
    scratch = [i for i in comp.instructions
               if i.opcode == "custom-call" and not i.operands and i.shape.is_array
               and i.attr("custom_call_target", None) in SCRATCH_TARGETS]
    if not scratch:
        return
    names = NameScope.of_instructions([comp])
    for inst in scratch:
        zero = new_instruction(names.fresh(f"{inst.name}.zero"), "constant", Shape(inst.shape.element_type, ()),
                               like=inst, literal_text="0")
        insert_instructions(comp, [zero], before=inst)
        inst.opcode = "broadcast"
        inst.operands = [zero]
        inst.declared_operand_shapes = [zero.shape]
        inst.attributes = {"dimensions": Attribute("dimensions", "{}", ())}
    comp.rebuild_users()


def _inline_nested_fusions(body: HloComputation) -> None:
    nested = [i for i in body.instructions if custom_fusion_kind(i) in CUSTOM_FUSION_KINDS]
    for inst in nested:
        _inline_nested_fusions(inst.attr("calls"))
        _as_call(inst)
    if nested:
        inline_calls(body)


def _as_call(fusion: HloInstruction) -> None:
    body = fusion.attr("calls")
    kept = {n: a for n, a in fusion.attributes.items() if n in _KEPT_ATTRIBUTES}
    fusion.opcode = "call"
    fusion.attributes = {"to_apply": Attribute("to_apply", f"%{body.name}", body), **kept}


def _one_kernel(body: HloComputation) -> bool:
    """Whether our emitters compute ``body`` well as one kernel: at most one dot or
    convolution, and every reduction feeds a root directly (a reduction hero), none is
    broadcast back into the rest of the computation."""
    if sum(i.opcode in ("dot", "convolution") for i in body.instructions) > 1:
        return False
    if any(i.opcode in ("custom-call", "fusion", "call") for i in body.instructions):
        return False
    near_roots = _near_roots(body.root)
    return all(i in near_roots for i in body.instructions if i.opcode in ("reduce", "reduce-window", "sort"))


def _near_roots(root: HloInstruction) -> set[HloInstruction]:
    """``root`` and what reaches it only through ops that do not change the kernel (tuple,
    bitcast, convert...)."""
    seen, todo = set(), [root]
    while todo:
        inst = todo.pop()
        if inst in seen:
            continue
        seen.add(inst)
        if inst.opcode in _PASS_THROUGH:
            todo.extend(inst.operands)
    return seen


# ---- block-level (Triton softmax / normalization) fusions ---------------------------------------

BLOCK_LEVEL_KINDS = frozenset({"__triton", "__triton_softmax"})
# ops a block-level kernel does not compute element by element inside a tile
_NOT_TILED = frozenset({"dot", "convolution", "custom-call", "fusion", "call", "while", "conditional", "sort",
                        "reduce-window", "select-and-scatter", "scatter", "rng", "rng-bit-generator",
                        "rng-get-and-update-state", "infeed", "outfeed", "send", "recv", "all-reduce", "all-gather",
                        "reduce-scatter", "all-to-all", "collective-permute", "dynamic-update-slice", "topk"})
MAX_THREADS = 1024
# values one thread holds per reduction or output phase (Triton keeps a tile in registers)
MAX_PER_THREAD = 256


@dataclass(frozen=True)
class TiledReduce:
    """A reduction of a block-level fusion as each block computes it: for the block's output
    tile, the reduce's elements over a box of ``rows`` (per reduce output dim, the box's size).
    Per reduce output dim ``d``: ``exprs[d]`` is its index as an affine expression of the root
    index; it follows root dim ``row_dims[d]`` with stride ``strides[d]`` (``exprs[d]`` is
    ``strides[d]`` times that dim plus terms constant over the tile), or is constant over the
    tile (``row_dims[d]`` None, size 1), or the box spans the whole dim (``full[d]``: another
    reduce reads it along its reduced dims). ``level``: reduces of one level depend on none of
    the same level (they exchange through one barrier)."""

    inst: HloInstruction
    level: int
    row_dims: tuple[int | None, ...]
    rows: tuple[int, ...]
    exprs: tuple[Expr, ...]
    strides: tuple[int, ...]
    full: tuple[bool, ...]

    @property
    def num_rows(self) -> int:
        return math.prod(self.rows)

    @property
    def reduced_elements(self) -> int:
        dims = self.inst.operands[0].shape.dimensions
        return math.prod(dims[d] for d in self.inst.dimensions)


@dataclass(frozen=True)
class BlockLevelTiling:
    """How XLA's block-level Triton emitter tiles a fusion (``block_level_fusion_config``): one
    block of ``num_warps`` warps per output tile of sizes ``tile`` over the roots' dims
    ``dims`` (every root has them), a 1-D grid of ``num_tiles`` blocks; the reduces each block
    computes for its tile, in dependency order."""

    tile: tuple[int, ...]
    dims: tuple[int, ...]
    num_warps: int
    reduces: tuple[TiledReduce, ...]

    @property
    def tile_counts(self) -> tuple[int, ...]:
        return tuple(-(-d // t) for d, t in zip(self.dims, self.tile))

    @property
    def num_tiles(self) -> int:
        return math.prod(self.tile_counts)

    @property
    def num_threads(self) -> int:
        return self.num_warps * 32

    @property
    def levels(self) -> list[list[TiledReduce]]:
        out: list[list[TiledReduce]] = []
        for r in self.reduces:
            while len(out) <= r.level:
                out.append([])
            out[r.level].append(r)
        return out


def block_level_config(fusion: HloInstruction) -> tuple[list[list[int]], int] | None:
    """(output tile sizes per output, num_warps) of a fusion's ``block_level_fusion_config``."""
    cfg = fusion_backend_config(fusion).get("block_level_fusion_config")
    if not isinstance(cfg, dict):
        return None
    tiles = cfg.get("output_tiles") or ([{"sizes": cfg["output_tile_sizes"]}] if "output_tile_sizes" in cfg else [])
    try:
        sizes = [[int(v) for v in t.get("sizes", [])] for t in tiles]
        warps = int(cfg.get("num_warps", 4))
    except (TypeError, ValueError, AttributeError):
        return None
    return (sizes, warps) if sizes else None


def is_normalization_diamond(body: HloComputation) -> bool:
    """Whether a reduce of ``body`` is read by more than the ops that pass it to a root (its
    result is broadcast back into the computation)."""
    near = _near_roots(body.root)
    return any(i.opcode == "reduce" and i not in near for i in body.instructions)


def block_level_tiling(fusion: HloInstruction) -> BlockLevelTiling | str:
    """The tiling of a block-level fusion the block-level emitter computes as one kernel, or
    why it cannot (a string)."""
    config = block_level_config(fusion)
    if config is None:
        return "no block_level_fusion_config"
    tiles, warps = config
    body = fusion.attr("calls")
    root = body.root
    roots = list(root.operands) if root.opcode == "tuple" else [root]
    if not roots or any(not r.shape.is_array or r.shape.rank == 0 for r in roots):
        return "tuple-shaped or scalar outputs"
    dims = tuple(roots[0].shape.dimensions)
    if any(tuple(r.shape.dimensions) != dims for r in roots):
        return "outputs of different dimensions"
    if any(t != tiles[0] for t in tiles) or len(tiles[0]) != len(dims) or any(t <= 0 for t in tiles[0]):
        return f"output tiles {tiles} do not tile the outputs {list(dims)} alike"
    if not 1 <= warps or warps * 32 > MAX_THREADS:
        return f"{warps} warps"
    for inst in body.instructions:
        if inst.opcode in _NOT_TILED:
            return f"{inst.opcode} %{inst.name}"
        if inst.opcode == "parameter" and not inst.shape.is_array:
            return "tuple-shaped parameters"
        if inst.shape.is_tuple and inst.opcode not in ("tuple",):
            return f"tuple-shaped {inst.opcode} %{inst.name}"
        if inst.opcode == "tuple" and inst is not root:
            return "tuples inside the computation"
    tile = tuple(tiles[0])
    maps = _maps_from_roots(body, roots)
    if maps is None:
        return "an op without an indexing map"
    reduces: list[TiledReduce] = []
    level: dict[HloInstruction, int] = {}
    for inst in body.post_order():
        lv = max((level.get(o, -1) for o in inst.operands), default=-1)
        if inst.opcode != "reduce":
            level[inst] = lv
            continue
        level[inst] = lv + 1
        got = _tiled_reduce(inst, lv + 1, maps.get(inst), tile, dims)
        if isinstance(got, str):
            return got
        if got is not None:
            reduces.append(got)
    if not reduces:
        return "no reduce"
    tiling = BlockLevelTiling(tile, dims, warps, tuple(reduces))
    per_thread = max([math.prod(tile) // tiling.num_threads]
                     + [r.num_rows * r.reduced_elements // tiling.num_threads for r in reduces])
    if per_thread > MAX_PER_THREAD:
        return f"{per_thread} values per thread"
    return tiling


def _maps_from_roots(body: HloComputation, roots: list[HloInstruction]) -> dict[HloInstruction, list] | None:
    """Per instruction, the distinct maps from the root index to its index (None if an op on
    the way has no map)."""
    maps: dict[HloInstruction, dict] = {}
    for r in roots:
        m = IndexingMap.identity(r.shape.dimensions)
        maps.setdefault(r, {})[m.key()] = m
    for inst in reversed(body.instructions):
        if inst not in maps or inst.opcode in ("parameter", "constant"):
            continue
        for op, entry in zip(inst.operands, output_to_input(inst, 0)):
            if entry is None:
                return None
            for c in list(maps[inst].values()):
                for p in entry:
                    n = simplify(compose(c, p)).remove_unused_symbols()
                    maps.setdefault(op, {})[n.key()] = n
    return {i: list(v.values()) for i, v in maps.items()}


def _tiled_reduce(inst: HloInstruction, level: int, maps: list | None, tile: tuple[int, ...],
                  dims: tuple[int, ...]) -> TiledReduce | str | None:
    if maps is None:
        return None  # no root reads it
    if len(inst.operands) != 2 or not inst.shape.is_array:
        return f"variadic reduce %{inst.name}"
    if any(m.undefined or m.rts or m.constraints for m in maps):
        return f"reduce %{inst.name} is read through a runtime index or a constrained map"
    out_dims = inst.shape.dimensions
    row_dims: list[int | None] = []
    rows: list[int] = []
    exprs: list[Expr] = []
    strides: list[int] = []
    full: list[bool] = []
    for d, size in enumerate(out_dims):
        per_map = {m.exprs[d] for m in maps}
        # read along another reduce's reduced dim (a symbol over the whole dim): the whole dim
        if any(_whole_dim(m, m.exprs[d], size) for m in maps):
            if any(A.variables(e) - {A.dim(i) for i in range(len(dims))} and not _whole_dim(m, m.exprs[d], size)
                   for m in maps for e in [m.exprs[d]]):
                return f"reduce %{inst.name} is read inside another reduction"
            row_dims.append(None)
            rows.append(size)
            exprs.append(A.const(0))
            strides.append(1)
            full.append(True)
            continue
        if len(per_map) != 1:
            return f"reduce %{inst.name} is read at different indices"
        e = next(iter(per_map))
        if any(v.kind != A.dim(0).kind for v in A.variables(e)):
            return f"reduce %{inst.name} is read inside another reduction"
        terms, _ = A.linear_parts(e)
        varying = [v for v in A.variables(e) if tile[v.index] > 1 and dims[v.index] > 1]
        full.append(False)
        exprs.append(e)
        if not varying:
            row_dims.append(None)
            rows.append(1)
            strides.append(1)
            continue
        v = varying[0]
        k = terms.get(v)
        if (len(varying) > 1 or k is None or k <= 0 or v.index in row_dims
                or any(v in A.variables(atom) for atom in terms if atom != v)):
            return f"reduce %{inst.name} is not a box of the tile ({A.to_text(e)})"
        row_dims.append(v.index)
        rows.append(min(tile[v.index], dims[v.index]))
        strides.append(k)
    return TiledReduce(inst, level, tuple(row_dims), tuple(rows), tuple(exprs), tuple(strides), tuple(full))


def _whole_dim(m: IndexingMap, e: Expr, size: int) -> bool:
    """Whether ``e`` is a symbol of ``m`` ranging over the whole of a dim of ``size``."""
    return isinstance(e, A.Var) and e.kind == A.sym(0).kind and tuple(m.bound(e)) == (0, size - 1)
