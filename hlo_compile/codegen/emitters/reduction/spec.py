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

Shared tiles (``SharedTiles``): the row, column and small-column paths pass each thread's
partials through a shared tile of ``ReductionPath.shared_elements(rd, geometry)`` elements, one
per reduced value (hero x reducer leaf). XLA allocates one tile per reduced value too and
keeps fusions whose tiles exceed the block's shared memory from forming
(``SharedMemoryUsage``/``FusionFitsInBudget`` in its ``gpu_fusible.cc``); a module written
elsewhere may still hold one (TF BERT's 4-output column reductions: 4 x 16896 B). Here the
kernel owns only as many tiles as fit the static shared memory limit (48 KiB,
``launch_limits.STATIC_SHARED_LIMIT``), each sized for the widest value, shared by the
disjoint groups (one group runs per block) and reused in rounds (barrier between rounds)
when a group has more reduced values than tiles. The reduction order is unchanged, so the
results are bit-identical to the one-tile-per-value kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from llvmlite import ir

from ....hlo import HloInstruction
from ....indexing import affine as A
from ... import launch_limits
from ....indexing.indexing_map import IndexingMap
from ...analysis.emitter_kind import ReductionVariant
from ...analysis.fusion_analysis import FusionAnalysis, ReductionDimensions, find_hero
from ...kernel import KernelSpec, output_leaves
from ...llvm_types import storage_bytes
from ...target import Target
from ...model.thread_maps import expr_delinearize, expr_linearize, work_item_map


VectorSizeFn = Callable[[int, int], int]   # XLA's GetVectorSizeForMlir(minor dim, threads)
SHARED_ALIGN = 16                          # every shared array is 16-byte aligned (both targets)


def _no_shared(rd: ReductionDimensions, geometry: dict) -> int:
    return 0


@dataclass(frozen=True)
class SharedTiles:
    """The kernel's shared tiles: ``slots`` arrays of ``elements`` x ``element_bytes`` (the
    widest reduced value's storage size), reused over the ``values`` reduced values of the
    largest group in ``rounds`` rounds."""

    elements: int
    element_bytes: int
    slots: int
    values: int

    @property
    def tile_bytes(self) -> int:
        return self.elements * self.element_bytes

    @property
    def rounds(self) -> int:
        return -(-self.values // self.slots) if self.slots else 0

    @property
    def static_bytes(self) -> int:
        """The static shared memory of the kernel: each tile rounded up to its alignment (as
        ptxas and the host target place them)."""
        return self.slots * (-(-self.tile_bytes // SHARED_ALIGN) * SHARED_ALIGN)

    def describe(self) -> str:
        if not self.slots:
            return "shared memory: none"
        return (f"shared memory: {self.static_bytes} B static, {self.slots} tile(s) of {self.elements} x "
                f"{self.element_bytes} B for {self.values} reduced value(s) per group"
                + (f", reused in {self.rounds} rounds" if self.rounds > 1 else ""))


def plan_shared_tiles(elements: int, value_bytes: list[list[int]]) -> SharedTiles:
    """Tiles of ``elements`` for groups of reduced values of ``value_bytes`` (per group, the
    storage bytes of each value): one per value of the largest group while they all fit the
    static shared memory limit, else as many as fit (at least one: a single tile beyond the
    limit is left to the launch check, which refuses it)."""
    values = max((len(g) for g in value_bytes), default=0)
    if elements <= 0 or values == 0:
        return SharedTiles(max(elements, 0), 0, 0, values)
    width = max(b for g in value_bytes for b in g)
    tile = -(-elements * width // SHARED_ALIGN) * SHARED_ALIGN
    fit = launch_limits.STATIC_SHARED_LIMIT // tile
    return SharedTiles(elements, width, max(1, min(values, fit)), values)


@dataclass(frozen=True)
class ReductionPath:
    """One of the reduction kernels (XLA's ``ReductionVariant``s): its launch geometry
    (``geometry(rd, vector size, analysis)``: the parameters reports print; ``grid(geometry)``:
    grid x), its kernel emitter, and its thread -> normalised-position description
    (``walks``, for the indexing maps): ``(input linear position, symbol ranges,
    constraints)`` and ``(output linear position with the reduced coordinates 0, symbol
    ranges, constraints selecting the writing thread)``."""

    name: ReductionVariant
    geometry: Callable[[ReductionDimensions, VectorSizeFn, FusionAnalysis], dict]
    grid: Callable[[dict], int]
    emit: Callable[[Target, ReductionKernelSpec], ir.Module]
    walks: Callable[[ReductionKernelSpec], tuple[tuple, tuple]]
    shared_elements: Callable[[ReductionDimensions, dict], int] = _no_shared   # elements of one shared tile


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

    @property
    def shared_tiles(self) -> SharedTiles:
        """The shared tiles the kernel declares (``plan_shared_tiles``)."""
        per_group = [[storage_bytes(x.shape.element_type) for h in heroes for x in h.operands[len(h.operands) // 2:]]
                     for heroes, _, _ in (self.groups or [(self.heroes, [], [])])]
        return plan_shared_tiles(self.path.shared_elements(self.rd, self.geometry), per_group)

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
        lines.append(self.shared_tiles.describe())
        lines.append(f"thread -> input (%{self.heroes[0].operands[0].name}): {self.thread_to_input_map()}")
        lines += [f"thread -> output (%{r.name}): {self.reduce_root_map(i)}" for i, r in enumerate(self.reduce_roots)]
        return lines + self.notes + self.partitioned.to_text().splitlines()

    def summary_fields(self) -> dict:
        return {"reduction_path": self.variant, **{k: v for k, v in self.geometry.items()},
                "reduction_groups": self.num_groups, "static_shared_bytes": self.shared_tiles.static_bytes,
                "index_type": str(self.index_type)}


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
