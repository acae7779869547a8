"""The state of one reduction kernel, shared by the row, multi-row, column and small-column paths.

``ReductionEmitter`` holds per-thread accumulators (one per reducer leaf per hero), the
accumulate step (prologue fused through ``FusedEmitter.value``; side outputs written at the
same point), the warp shuffle tree (wide values as 32-bit pieces) and the epilogue write
(heroes injected into the fused computation). ``emit_groups`` emits one path body per
disjoint reduction group under ``if bl_z == g`` (uniform per block, so the barriers inside are
reached by every thread of the block) with the active heroes/roots set to that group's.
Positions are normalised (``spec.py``): a physical linear position, delinearised over the
shape read or written.
"""
from __future__ import annotations

from typing import Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....hlo.opcodes import ELEMENTWISE
from ...elemental.scalar_ops import emit_call_computation
from ...analysis.fusion_analysis import ReductionDimensions
from ...elemental.index_op_table import INDEX_OPS
from ...kernel import open_kernel
from ...kernel_builder import NO_WRAP, KernelBuilder
from ...llvm_types import I8, I32, from_storage, storage_bytes, storage_type, to_storage
from ...target import Target
from .spec import ReductionKernelSpec, array_shape, hero_of, output_slots

WARP = 32


def _delinearize(kb: KernelBuilder, linear: ir.Value, shape) -> list[ir.Value]:
    """Logical index of physical (minor-to-major, untiled) position ``linear`` in ``shape``."""
    return kb.delinearize(linear, shape.dimensions, shape.minor_to_major)


def normalized_linear(kb: KernelBuilder, rd: ReductionDimensions, i0, i1, i2) -> ir.Value:
    b = kb.b
    _, d1, d2 = rd.dimensions
    return b.add(b.mul(b.add(b.mul(i0, kb.index(d1)), i1), kb.index(d2)), i2)


def kept_index(kb: KernelBuilder, hero: HloInstruction, linear: ir.Value) -> list[ir.Value]:
    """The hero's output index for the operand position ``linear`` (reduced coordinates 0)."""
    full = _delinearize(kb, linear, hero.operands[0].shape)
    reduced = set(hero.dimensions)
    return [v for d, v in enumerate(full) if d not in reduced]


# ---- shuffles ------------------------------------------------------------------------------

def shuffle_down(b: ir.IRBuilder, target: Target, v: ir.Value, delta: int) -> ir.Value:
    """``shfl.down`` of any scalar: 32-bit values directly, narrower ones widened, wider ones
    as several 32-bit pieces."""
    t = v.type
    if t == I32 or str(t) == "float":
        return target.shfl_down(b, v, delta)
    if str(t) in ("half", "bfloat"):
        w = b.zext(b.bitcast(v, ir.IntType(16)), I32)
        return b.bitcast(b.trunc(target.shfl_down(b, w, delta), ir.IntType(16)), t)
    if str(t) == "double":
        return b.bitcast(shuffle_down(b, target, b.bitcast(v, ir.IntType(64)), delta), t)
    if isinstance(t, ir.IntType):
        if t.width < 32:
            return b.trunc(target.shfl_down(b, b.zext(v, I32), delta), t)
        out = ir.Constant(t, 0)
        for k in range(0, t.width, 32):
            piece = b.trunc(b.lshr(v, ir.Constant(t, k)) if k else v, I32)
            got = b.zext(target.shfl_down(b, piece, delta), t)
            out = b.or_(out, b.shl(got, ir.Constant(t, k)) if k else got)
        return out
    raise ValueError(f"cannot shuffle values of type {t}")


def shared_type(t: ir.Type) -> ir.Type:
    return ir.IntType(8) if t == ir.IntType(1) else t


def storage_bytes_of(t: ir.Type) -> int:
    """Bytes one value of LLVM type ``t`` takes in a shared tile."""
    t = shared_type(t)
    if isinstance(t, ir.IntType):
        return max(1, -(-t.width // 8))
    return {"half": 2, "bfloat": 2, "float": 4, "double": 8}[str(t)]


# ---- the kernel state ------------------------------------------------------------------------

class ReductionEmitter:
    """Accumulators, accumulate step, warp reduction and output writes of one kernel."""

    def __init__(self, target: Target, spec: ReductionKernelSpec):
        self.target, self.spec = target, spec
        self.kernel = open_kernel(target, spec, inline=True)
        self.kb, self.fe = self.kernel.kb, self.kernel.fe
        self.b = self.kb.b
        # per root (as ``output_slots`` names it): (element or None, shape, pointer) per buffer
        self.out_ptrs: dict[int, list] = {}
        for (root, element, shape), ptr in zip(output_slots(spec.fusion), self.kernel.outputs):
            self.out_ptrs.setdefault(id(root), []).append((element, shape, ptr))
        # reducer leaves per hero: (inputs, inits, types)
        self.n_inputs = {id(h): len(h.operands) // 2 for h in spec.heroes}
        self.inits = {id(h): [self.fe.value(i, ()) for i in h.operands[self.n_inputs[id(h)]:]] for h in spec.heroes}
        # the active group's heroes and roots (every one until ``emit_groups`` picks a group)
        self.heroes, self.reduce_roots, self.side_roots = spec.heroes, spec.reduce_roots, spec.side_roots
        self._tiles: list | None = None   # the shared tiles, declared at the first ``exchange``

    def emit_groups(self, body) -> ir.Module:
        """``body(self)`` once per reduction group; with several groups each body runs under
        ``if blockIdx.z == g`` with that group's heroes and roots active."""
        groups = self.spec.groups
        if len(groups) == 1:
            self.heroes, self.reduce_roots, self.side_roots = groups[0]
            body(self)
            return self.finish()
        bz = self.kb.block_id(2)
        for g, (heroes, roots, sides) in enumerate(groups):
            self.heroes, self.reduce_roots, self.side_roots = heroes, roots, sides
            with self.kb.if_(self.b.icmp_unsigned("==", bz, self.kb.index(g))), self.fe.scope():
                body(self)
        return self.finish()

    # accumulators: one alloca per (hero, leaf, slot)
    def new_accumulators(self, slots: int = 1) -> dict:
        accs = {}
        for h in self.heroes:
            per_slot = []
            for _ in range(slots):
                with self.b.goto_entry_block():
                    allocas = [self.b.alloca(v.type) for v in self.inits[id(h)]]
                for a, v in zip(allocas, self.inits[id(h)]):
                    self.b.store(v, a)
                per_slot.append(allocas)
            accs[id(h)] = per_slot
        return accs

    def accumulate(self, accs: dict, slot: int, linear: ir.Value) -> None:
        """Fold the operand element at ``linear`` into every hero's accumulator ``slot`` and
        write the side outputs at that point (call inside a guarded scope)."""
        self._accumulate_lanes(accs, [slot], lambda shape: [_delinearize(self.kb, linear, shape)])

    def accumulate_vector(self, accs: dict, slots: Sequence[int], first: ir.Value) -> None:
        """Fold one thread's vector, the ``len(slots)`` adjacent normalised positions from
        ``first`` (a multiple of the vector size), lane ``j`` into accumulator ``slots[j]``;
        call inside a guarded scope (every lane in range). As XLA's vectorised loop body
        (``vector.transfer_read``): each fusion parameter read at the lanes' own index is
        loaded once as an aligned ``<v x T>`` vector (``ld.global.nc.v2``/``.v4``) before any
        arithmetic, also under a same-type ``bitcast`` of a computed value (``bitcast(mul(p,
        p))``: XLA's indexing maps see through it, so ``p`` is read as a vector at the
        bitcast operand's own lanes); the other reads are scalar loads. Then the reducer
        calls, then the side output stores: one aligned ``<v x T>`` store per side output
        whose lanes are adjacent (``st.global.v2``/``.v4``, XLA's ``vector.transfer_write``)."""
        v = len(slots)
        if v == 1:
            return self.accumulate(accs, slots[0], first)
        b, kb = self.b, self.kb
        lanes: dict[tuple, tuple[list, bool]] = {}

        def lane_indices(shape) -> list:
            key = _shape_key(shape)
            if key not in lanes:
                minor = next((d for d in shape.minor_to_major if shape.dimensions[d] != 1), None)
                if minor is not None and shape.dimensions[minor] % v == 0 and not (shape.layout and shape.layout.tiles):
                    # the vector stays in one minor row: lanes differ in the minor coordinate only
                    idx0 = _delinearize(kb, first, shape)
                    out = [idx0] + [[b.add(x, kb.index(j), flags=NO_WRAP) if d == minor else x
                                     for d, x in enumerate(idx0)] for j in range(1, v)]
                    lanes[key] = (out, True)
                else:
                    lanes[key] = ([_delinearize(kb, b.add(first, kb.index(j)) if j else first, shape)
                                   for j in range(v)], False)
            return lanes[key][0]

        def adjacent(shape) -> bool:
            """Whether the lanes' physical offsets in ``shape`` are ``first + j``: any untiled
            layout (the lanes are the positions ``first + j`` delinearised in physical order,
            whether they stay in one minor row or not: XLA's flattened buffers vectorise
            ``f32[8,3,3,3]`` read as ``f32[216]``)."""
            return not (shape.layout and shape.layout.tiles)

        starts = [x for h in self.heroes for x in h.operands[:self.n_inputs[id(h)]]] + list(self.side_roots)
        for inst in starts:
            if adjacent(array_shape(inst)):
                self._vector_loads(inst, lane_indices, adjacent)
        self._accumulate_lanes(accs, slots, lane_indices, adjacent)

    def _vector_loads(self, inst: HloInstruction, lane_indices, adjacent) -> None:
        """The vector loads of the parameters ``inst`` reads at its own lanes
        (``lane_indices(inst's shape)``, adjacent): directly or through bitcasts of
        parameters (``same_index_parameters``), and under bitcasts of computed values
        (``computed_bitcasts``) whose operand's lanes are adjacent too (the same physical
        offsets: a bitcast keeps the bytes); such a bitcast is
        seeded with its operand's lane values, so the reads below it use the vectors."""
        fe = self.fe
        lanes = lane_indices(array_shape(inst))
        for leaf, param in same_index_parameters(inst):
            self._vector_load(leaf, param, lanes)
        for cast in computed_bitcasts(inst):
            src = cast.operands[0]
            if not adjacent(src.shape) or fe.known(cast, lanes[0]):
                continue
            self._vector_loads(src, lane_indices, adjacent)
            src_lanes = lane_indices(src.shape)
            values = [fe.value(src, i) for i in src_lanes]
            for idx, val in zip(lanes, values):
                fe.seed(cast, idx, val)

    def _vector_load(self, leaf: HloInstruction, param: HloInstruction, lanes: list) -> None:
        """One ``<v x T>`` load of ``param`` at ``leaf``'s index ``lanes[0]`` (``leaf`` is the
        parameter or a chain of bitcasts of it: the same bytes, so ``leaf``'s physical offset
        is the parameter's); lane ``j``'s element is what ``FusedEmitter.value(leaf,
        lanes[j])`` returns in this scope."""
        fe, b = self.fe, self.b
        if fe.known(leaf, lanes[0]):
            return
        et = param.shape.element_type
        st = storage_type(et)
        v = len(lanes)
        ptr = b.gep(fe.parameter_pointer(param), [fe.offset(leaf.shape, lanes[0])], inbounds=True,
                    source_etype=st)
        vec = b.load(ptr, typ=ir.VectorType(st, v))
        vec.align = min(16, v * storage_bytes(et))   # offset is a multiple of v, buffers 16-byte aligned
        self.target.mark_invariant(vec)
        for j, idx in enumerate(lanes):
            fe.seed(leaf, idx, from_storage(b, b.extract_element(vec, ir.Constant(I32, j)), et))

    def _accumulate_lanes(self, accs: dict, slots: Sequence[int], lane_indices, adjacent=None) -> None:
        """Fold lane ``j`` (index ``lane_indices(shape)[j]``) into accumulator ``slots[j]``,
        then write the side outputs: as one vector store where ``adjacent(shape)`` says the
        lanes are at adjacent physical offsets of the output."""
        b = self.b
        values = []
        for j, slot in enumerate(slots):
            per_hero = {}
            for h in self.heroes:
                n = self.n_inputs[id(h)]
                idx = lane_indices(h.operands[0].shape)[j]
                per_hero[id(h)] = [self.fe.value(x, idx) for x in h.operands[:n]]
            sides = []
            for r in self.side_roots:
                for _, shape, _ in self.out_ptrs[id(r)][:1]:
                    idx = lane_indices(shape)[j]
                    sides.append((r, idx, self.fe.value(r, idx)))
            values.append((slot, per_hero, sides))
        for slot, per_hero, _ in values:
            for h in self.heroes:
                cur = [b.load(a) for a in accs[id(h)][slot]]
                new = emit_call_computation(b, self.target, h.to_apply, cur + per_hero[id(h)])
                for a, v in zip(accs[id(h)][slot], new):
                    b.store(v, a)
        vector = [len(slots) > 1 and adjacent is not None and self._vector_storable(r, adjacent)
                  for r in self.side_roots]
        for k, r in enumerate(self.side_roots):
            if vector[k]:
                self._vector_store(r, [sides[k][1] for _, _, sides in values], [sides[k][2] for _, _, sides in values])
        for _, _, sides in values:
            for k, (r, idx, _) in enumerate(sides):
                if not vector[k]:
                    self.store_root(r, idx)

    def _vector_storable(self, root: HloInstruction, adjacent) -> bool:
        """Whether side output ``root`` is one untiled array buffer whose lanes are adjacent."""
        ptrs = self.out_ptrs[id(root)]
        if len(ptrs) != 1 or ptrs[0][0] is not None:
            return False
        shape = ptrs[0][1]
        return not (shape.layout and shape.layout.tiles) and adjacent(shape)

    def _vector_store(self, root: HloInstruction, lanes: list, values: list) -> None:
        """One aligned ``<v x T>`` store of side output ``root``'s lane values at ``lanes[0]``
        (its physical offset is a multiple of v: the lanes are a vector of the normalised
        shape, whose linear positions are the output's physical offsets)."""
        b = self.b
        _, shape, ptr = self.out_ptrs[id(root)][0]
        et = shape.element_type
        st = storage_type(et)
        v = len(lanes)
        vec: ir.Value = ir.Constant(ir.VectorType(st, v), None)
        for j, val in enumerate(values):
            vec = b.insert_element(vec, to_storage(b, val, et), ir.Constant(I32, j))
        dst = b.gep(ptr, [self.fe.offset(shape, lanes[0])], inbounds=True, source_etype=st)
        store = b.store(vec, dst)
        store.align = min(16, v * storage_bytes(et))

    def load(self, accs: dict, slot: int) -> dict:
        return {k: [self.b.load(a) for a in v[slot]] for k, v in accs.items()}

    def warp_reduce(self, vals: dict, max_distance: int = 16) -> dict:
        """Shuffle tree with distances ``max_distance .. 1``; lane 0 of each group ends with
        the group's reduction."""
        b = self.b
        d = max_distance
        while d >= 1:
            new = {}
            for h in self.heroes:
                mine = vals[id(h)]
                theirs = [shuffle_down(b, self.target, v, d) for v in mine]
                new[id(h)] = emit_call_computation(b, self.target, h.to_apply, mine + theirs)
            vals = new
            d //= 2
        return vals

    def exchange(self, name: str, store, load) -> list[dict]:
        """Pass the active group's reduced values through the kernel's shared tiles
        (``spec.shared_tiles``): ``store(arrays)`` writes each thread's partials and
        ``load(arrays)`` reads them back after a barrier as a list of value dicts (one per
        read, ``{id(hero): [leaf values]}``); ``arrays`` maps each hero to one tile pointer per
        reducer leaf, ``None`` for the leaves of another round. With fewer tiles than values
        the values go through in rounds, a barrier before each round's stores (every thread
        has read the previous round). Returns the merged reads. Call at a point every thread
        of the block reaches."""
        tiles = self.spec.shared_tiles
        if self._tiles is None:   # declared in the entry block: every group's body reuses them
            with self.b.goto_entry_block():
                self._tiles = [self.target.shared_array(self.b, f"{name}.{s}", I8, tiles.tile_bytes)
                               for s in range(tiles.slots)]
        leaves = [(h, i) for h in self.heroes for i in range(len(self.inits[id(h)]))]
        assert len(leaves) <= tiles.values and all(
            storage_bytes_of(self.inits[id(h)][i].type) <= tiles.element_bytes for h, i in leaves), name
        merged: list[dict] | None = None
        for r in range(0, len(leaves), len(self._tiles)):
            arrays = {id(h): [None] * len(self.inits[id(h)]) for h in self.heroes}
            for tile, (h, i) in zip(self._tiles, leaves[r:r + len(self._tiles)]):
                arrays[id(h)][i] = tile
            if r:
                self.target.barrier(self.b)
            store(arrays)
            self.target.barrier(self.b)
            got = load(arrays)
            if merged is None:
                merged = got
            else:
                for m, g in zip(merged, got):
                    for key, ptrs in arrays.items():
                        m[key] = [gv if p is not None else mv for p, gv, mv in zip(ptrs, g[key], m[key])]
        return merged or []

    def store_shared(self, arrays: dict, index: ir.Value, vals: dict) -> None:
        for key, ptrs in arrays.items():
            for p, v in zip(ptrs, vals[key]):
                if p is None:
                    continue
                st = shared_type(v.type)
                vv = self.b.zext(v, st) if st != v.type else v
                self.b.store(vv, self.b.gep(p, [index], inbounds=True, source_etype=st))

    def load_shared(self, arrays: dict, index: ir.Value, valid: ir.Value | None) -> dict:
        """Shared values at ``index`` (the init value where ``valid`` is false; the index is
        clamped by the caller)."""
        out = {}
        for h in self.heroes:
            vs = []
            for p, init in zip(arrays[id(h)], self.inits[id(h)]):
                if p is None:       # a value of another round
                    vs.append(None)
                    continue
                st = shared_type(init.type)
                v = self.b.load(self.b.gep(p, [index], inbounds=True, source_etype=st), typ=st)
                if st != init.type:
                    v = self.b.trunc(v, init.type)
                vs.append(v if valid is None else self.b.select(valid, v, init))
            out[id(h)] = vs
        return out

    # ---- outputs -----------------------------------------------------------------------------
    def store_root(self, root: HloInstruction, index: Sequence[ir.Value]) -> None:
        v = self.fe.value(root, index)
        for element, shape, ptr in self.out_ptrs[id(root)]:
            self.fe.store(shape, ptr, index, v if element is None else v[element])

    def write_results(self, vals: dict, linear: ir.Value) -> None:
        """Write every reduce root (epilogue included) for the kept point at operand position
        ``linear`` (reduced coordinates 0); the heroes are injected with ``vals``."""
        fe = self.fe
        with fe.scope():
            for h in self.heroes:
                v = vals[id(h)]
                fe.injected[h] = (lambda _idx, v=v: list(v) if len(v) > 1 else v[0])
            for r in self.reduce_roots:
                hero = hero_of(r, self.heroes)
                hidx = kept_index(self.kb, hero, linear)
                if r is hero:
                    idx = hidx
                else:
                    hs = hero.shape
                    linear_r = self.kb.linearize(hidx, hs.dimensions, hs.minor_to_major)
                    idx = _delinearize(self.kb, linear_r, array_shape(r))
                self.store_root(r, idx)
            for h in self.heroes:
                fe.injected.pop(h, None)

    def finish(self) -> ir.Module:
        return self.kernel.finish()


def _shape_key(shape) -> tuple:
    return tuple(shape.dimensions), tuple(shape.minor_to_major)


def same_index_parameters(inst: HloInstruction,
                          match_layout: bool = True) -> list[tuple[HloInstruction, HloInstruction]]:
    """``(leaf, parameter)`` for the fusion parameters that ``FusedEmitter.value(inst, idx)``
    reads at ``idx`` itself: reached through elementwise ops (not the index-changing ones)
    with operands of ``inst``'s dimensions and (``match_layout``) layout. ``leaf`` is the parameter, or a
    ``bitcast`` of ``inst``'s shape over a chain of bitcasts of it of the same element type
    (the same bytes: its physical offsets are the parameter's), as XLA's indexing maps see
    through bitcasts and vectorise the load (``ld.global.v2`` of a bitcast parameter)."""
    def key(shape) -> tuple:
        return _shape_key(shape) if match_layout else tuple(shape.dimensions)
    want = key(array_shape(inst))
    out, seen, stack = [], set(), [inst]
    while stack:
        x = stack.pop()
        if id(x) in seen or not x.shape.is_array or key(x.shape) != want:
            continue
        seen.add(id(x))
        if x.opcode == "parameter":
            out.append((x, x))
        elif x.opcode == "bitcast":
            param = _bitcast_source(x)
            if param is not None:
                out.append((x, param))
        elif x.opcode in ELEMENTWISE and x.opcode not in INDEX_OPS:
            stack.extend(x.operands)
    return out


def computed_bitcasts(inst: HloInstruction) -> list[HloInstruction]:
    """The ``bitcast``s that ``FusedEmitter.value(inst, idx)`` reads at ``idx`` itself (through
    elementwise ops, as ``same_index_parameters``) whose operand is not a chain of bitcasts of
    a parameter but a computed array of the same element type, both untiled (``bitcast(mul(p,
    p))`` of a reduction over a flattened product); ``inst`` itself included."""
    want = _shape_key(array_shape(inst))
    out, seen, stack = [], set(), [inst]
    while stack:
        x = stack.pop()
        if id(x) in seen or not x.shape.is_array or _shape_key(x.shape) != want:
            continue
        seen.add(id(x))
        if x.opcode == "bitcast":
            src = x.operands[0]
            if (_bitcast_source(x) is None and src.shape.is_array and src.opcode != "parameter"
                    and src.shape.element_type == x.shape.element_type
                    and not (x.shape.layout and x.shape.layout.tiles)
                    and not (src.shape.layout and src.shape.layout.tiles)):
                out.append(x)
        elif x.opcode in ELEMENTWISE and x.opcode not in INDEX_OPS:
            stack.extend(x.operands)
    return out


def _bitcast_source(x: HloInstruction) -> HloInstruction | None:
    """The parameter under a chain of untiled bitcasts of one element type, or None."""
    et = x.shape.element_type
    while x.opcode == "bitcast":
        if x.shape.element_type != et or (x.shape.layout and x.shape.layout.tiles):
            return None
        x = x.operands[0]
    if x.opcode != "parameter" or not x.shape.is_array or x.shape.element_type != et:
        return None
    if x.shape.layout and x.shape.layout.tiles:
        return None
    return x

