"""The plan of a reduction kernel (notes/xla.md §b.5) and the paths that emit it.

A reduction fusion is viewed through its hero's normalised shape ``[d0, d1, d2]`` in the
operand's *physical* order (``reduction_dimensions``): row ``[z reduced, y kept, x reduced]``,
column ``[a kept, b reduced, c kept]``. A point of that shape has the linear index
``L = (i0·d1 + i1)·d2 + i2`` in the operand's minor-to-major order; delinearising ``L`` over
any array of the same element count (each hero's operand, each side output) gives that
array's logical index. The same trick maps a reduced (kept-coordinates) point to the
hero's output index.

Disjoint reduction groups (XLA's ``GroupDisjointReductions``): roots whose computations share
no operand (broadcast constants and scalars aside) are reduced by different blocks, the
group being ``blockIdx.z`` (``ReductionEmitter.emit_groups``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from llvmlite import ir

from ....hlo import HloInstruction
from ....indexing import affine as A
from ....indexing.indexing_map import IndexingMap
from ...emitter_kind import ReductionVariant
from ...fusion_analysis import FusionAnalysis, ReductionDimensions, find_hero
from ...kernel import KernelSpec, output_leaves
from ...target import Target
from ...thread_maps import expr_delinearize, expr_linearize, work_item_map


VectorSizeFn = Callable[[int, int], int]   # XLA's GetVectorSizeForMlir(minor dim, threads)


@dataclass(frozen=True)
class ReductionPath:
    """One of the reduction kernels (XLA's ``ReductionVariant``s): its launch geometry
    (``geometry(rd, vector size, analysis)``: the parameters reports print; ``grid(geometry)``:
    grid x and y), its kernel emitter, and its thread -> normalised-position description
    (``walks``, for the indexing maps): ``(input linear position, symbol ranges,
    constraints)`` and ``(output linear position with the reduced coordinates 0, symbol
    ranges, constraints selecting the writing thread)``."""

    name: ReductionVariant
    geometry: Callable[[ReductionDimensions, VectorSizeFn, FusionAnalysis], dict]
    grid: Callable[[dict], tuple[int, int]]
    emit: Callable[[Target, ReductionKernelSpec], ir.Module]
    walks: Callable[[ReductionKernelSpec], tuple[tuple, tuple]]


@dataclass(frozen=True, kw_only=True)
class ReductionKernelSpec(KernelSpec):
    """One reduction kernel: the fusion, its heroes and the launch geometry."""

    path: ReductionPath                # the kernel that emits it
    xla_variant: ReductionVariant      # what XLA would run
    rd: ReductionDimensions
    heroes: list[HloInstruction]       # distinct reduce heroes, in root order
    reduce_roots: list[HloInstruction]  # roots whose hero is a reduce (written after the reduce)
    side_roots: list[HloInstruction]   # roots written during the input loop
    geometry: dict = field(default_factory=dict)  # variant parameters (threads, tile, vector size)
    notes: list[str] = field(default_factory=list)
    # disjoint reduction groups, one per blockIdx.z: (heroes, reduce roots, side roots) each
    groups: list[tuple[list, list, list]] = field(default_factory=list)

    @property
    def variant(self) -> ReductionVariant:
        """The code path that emits it: row, multi-row, column or small-column."""
        return self.path.name

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def group_of(self, inst: HloInstruction) -> int:
        """The reduction group (``blockIdx.z``) of a hero, reduce root or side root."""
        for g, (heroes, roots, sides) in enumerate(self.groups):
            if any(x is inst for x in (*heroes, *roots, *sides)):
                return g
        raise KeyError(inst.name)

    # ---- thread -> data maps (XLA's reduction indexing, notes §b.5) -----------------------------
    def _group_constraint(self, inst: HloInstruction) -> list[tuple]:
        """``bl_z in [g, g]`` for ``inst``'s group when there are several (XLA's
        ``AddGroupIdConstraint``)."""
        if self.num_groups == 1:
            return []
        g = self.group_of(inst)
        return [(A.dim(5), g, g)]

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap:
        """``(th_x, th_y, th_z, bl_x, bl_y, bl_z)[loops..., vector] -> index`` of the hero's
        ``operand`` that the thread folds (row symbols: z, tile, vector; column: row loop,
        vector); the normalised position is delinearised in the operand's physical order."""
        (linear, ranges, cons), _ = self.path.walks(self)
        shape = self.heroes[hero].operands[operand or 0].shape
        cons = list(cons) + self._group_constraint(self.heroes[hero])
        return work_item_map(expr_delinearize(linear, shape.dimensions, shape.minor_to_major), self.launch, ranges,
                             cons)

    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[symbols] -> index`` of output ``leaf`` (default: the first reduce
        root) written by the thread: a reduce root's after the reduction (the constraints
        select the writing thread), a side output's where the input loop reads."""
        if leaf is None:
            return self.reduce_root_map(0)
        root, _, shape = output_slots(self.fusion)[leaf]
        if any(root is r for r in self.reduce_roots):
            return self.reduce_root_map(next(i for i, r in enumerate(self.reduce_roots) if r is root))
        (linear, ranges, cons), _ = self.path.walks(self)
        cons = list(cons) + self._group_constraint(root)
        return work_item_map(expr_delinearize(linear, shape.dimensions, shape.minor_to_major), self.launch, ranges,
                             cons)

    def reduce_root_map(self, root: int) -> IndexingMap:
        """``(th_x, ..., bl_z)[vector?] -> index`` of reduce root ``root`` (first leaf of a
        tuple) written by the thread; the constraints select the writing thread."""
        _, (linear, ranges, cons) = self.path.walks(self)
        r = self.reduce_roots[root]
        hero = hero_of(r, self.heroes)
        op = hero.operands[0].shape
        full = expr_delinearize(linear, op.dimensions, op.minor_to_major)
        index = [e for d, e in enumerate(full) if d not in set(hero.dimensions)]
        if r is not hero:
            hs, rs = array_shape(hero), array_shape(r)
            index = expr_delinearize(expr_linearize(index, hs.dimensions, hs.minor_to_major), rs.dimensions,
                                     rs.minor_to_major)
        return work_item_map(index, self.launch, ranges, list(cons) + self._group_constraint(r))

    def report_lines(self) -> list[str]:
        geo = ", ".join(f"{k} {v}" for k, v in self.geometry.items())
        lines = [f"reduction {self.variant} (XLA: {self.xla_variant}) over [{', '.join(map(str, self.rd.dimensions))}]"
                 f": {geo}, index type {self.index_type}",
                 f"heroes: {', '.join('%' + h.name for h in self.heroes)}"
                 + (f"; side outputs: {', '.join('%' + r.name for r in self.side_roots)}" if self.side_roots else ""),
                 f"launch: grid {tuple(self.launch.grid)}, block {tuple(self.launch.block)}; "
                 f"{self.num_groups} reduction group{'s' if self.num_groups > 1 else ''} (blockIdx.z)"
                 + "".join(f"; group {g}: {', '.join('%' + r.name for r in (*roots, *sides))}"
                           for g, (_, roots, sides) in enumerate(self.groups)) * (self.num_groups > 1)]
        lines.append(f"thread -> input (%{self.heroes[0].operands[0].name}): {self.thread_to_input_map()}")
        lines += [f"thread -> output (%{r.name}): {self.reduce_root_map(i)}" for i, r in enumerate(self.reduce_roots)]
        return lines + self.notes + self.partitioned.to_text().splitlines()

    def summary_fields(self) -> dict:
        return {"reduction_path": self.variant, **{k: v for k, v in self.geometry.items()},
                "reduction_groups": self.num_groups, "index_type": str(self.index_type)}


def output_slots(fusion: HloInstruction) -> list[tuple[HloInstruction, int | None, object]]:
    """(root, element, array shape) for each output buffer, in order: the root as XLA's
    ``GetFusionRoots`` names it (a ``get-tuple-element`` of a variadic reduce is the reduce,
    element its tuple index; XLA writes a multi-output fusion's variadic reduce that way),
    ``element`` None for an array root."""
    out = []
    for leaf_root, shape in output_leaves(fusion):
        if leaf_root.opcode == "get-tuple-element" and leaf_root.operands[0].opcode != "tuple":
            out.append((leaf_root.operands[0], leaf_root.tuple_index, shape))
        elif leaf_root.shape.is_tuple:
            k = sum(1 for r, _, _ in out if r is leaf_root)
            out.append((leaf_root, k, shape))
        else:
            out.append((leaf_root, None, shape))
    return out


def array_shape(inst: HloInstruction):
    """The (first) array shape of ``inst``'s result."""
    return inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape


def hero_of(root: HloInstruction, heroes: list[HloInstruction]) -> HloInstruction:
    """``root``'s reduce hero, one of ``heroes``."""
    h = find_hero(root)
    assert h in heroes, (root.name, h.name)
    return h
