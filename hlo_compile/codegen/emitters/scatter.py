"""The scatter emitter: one thread per update element, combining into the output in place.

XLA (notes/xla.md §b.3, ``scatter.cc``): the output buffer starts as the scatter operand (XLA
aliases them, and so do we when ``plan_module`` can donate the operand's buffer, ``donated``;
otherwise the runtime copies the operand into the output first, ``in_place``)
and the launch covers the updates tensor (loop launch dims, one element per thread: the
"distributed updates" variant; XLA's "distributed indices" variant for large sorted inputs
is not implemented). A thread at update index ``u``:

- reads the scatter index vector at ``u``'s scatter (non-window) dims, maps its components to
  operand dims (``scatter_dims_to_operand_dims``), adds the window offset (``u`` at
  ``update_window_dims``, skipping ``inserted_window_dims`` and ``input_batching_dims``) and,
  for batching dims, the batch position itself;
- skips the element unless the *whole* window lies in bounds (``0 <= start <= dim - window``
  for every indexed dim, as XLA checks; so a partially out-of-bounds window writes nothing);
- combines ``to_apply(current, update)`` into the output: a plain load/combine/store when
  ``unique_indices``; otherwise an ``atomicrmw`` when the combiner is an add (integers, f32,
  f64), max or min (integers) of its two parameters; otherwise a compare-and-swap loop on the
  32- or 64-bit word holding the element, running the emitted combiner (elements narrower
  than 32 bits are updated inside their enclosing aligned 32-bit word).

Complex elements: an add combiner is two float ``atomicrmw fadd``, one per part (a sum's parts
are independent, so no update is lost); any other c64 combiner runs in the CAS loop on the
64-bit word holding the whole (real, imag) pair; c128 would need a 128-bit CAS and is refused.

Float max/min go through the CAS loop because LLVM's ``fmax``/``fmin`` atomics ignore NaNs
while XLA's maximum/minimum propagate them. The word of a narrow element may extend up to 3
bytes past the end of the buffer (never past an allocation granule on either platform).

Variadic scatter (several operands and updates) is emitted only with ``unique_indices``
(the combiner's tuple result is stored element by element); with possibly repeated indices
it would need a lock per output position, and the loop emitter cannot emit a scatter at all,
so it is refused (``HloUnsupportedError`` naming the instruction). ``indices_are_sorted``
only selects XLA's other variant; it does not change the results here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.errors import HloUnsupportedError
from ...indexing.indexing_map import IndexingMap
from ..elemental.affine import AffineEmitter
from ...gpu.device_info import DeviceInfo
from ..elemental.scalar_ops import emit_call_computation
from ..elemental.fused_emitter import FusedEmitter
from ..analysis.fusion_analysis import FusionAnalysis
from ..kernel import KernelSpec, kernel_index_type, open_kernel
from ..kernel_builder import KernelBuilder
from ..launch import LoopConfig, loop_launch_dims, thread_to_output_map
from ..llvm_types import I32, I64, from_storage, storage_type, to_storage
from ..elemental.partitioner import partition
from ..target import LaunchDims, Target

_RMW_OPS = {"add": ("fadd", "add", "add"), "maximum": (None, "max", "umax"), "minimum": (None, "min", "umin")}


@dataclass(frozen=True, kw_only=True)
class ScatterKernelSpec(KernelSpec):
    scatter: HloInstruction
    thread_map: IndexingMap     # work item -> update index
    combine: str                # "store" | "atomicrmw <op>" | "cas"

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap | None:
        """The updates (operand ``n + 1 + k`` of a scatter of ``n`` operands; the first by
        default): the thread map. The scatter indices are read where the update's scatter
        dims say, and where the thread writes depends on them (data): no thread -> output map."""
        n = len(self.scatter.operands) // 2
        return self.thread_map if operand is None or n < operand <= 2 * n else None

    def report_lines(self) -> list[str]:
        n = len(self.scatter.operands) // 2
        upd = self.scatter.operands[n + 1].shape.to_text(print_layout=False)
        return [f"scatter %{self.scatter.name}: one thread per update element of {upd}, combine by "
                f"{self.combine}, index type {self.index_type}",
                f"outputs start as operands: {dict(self.in_place)}"
                + (f", donated (in place): {dict(self.donated)}" if self.donated else ", copied"),
                f"thread -> update: {self.thread_map.to_text()}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        return {"unroll": 1, "index_type": str(self.index_type), "combine": self.combine}


def _where(inst: HloInstruction) -> str:
    loc = getattr(inst, "location", None)
    return f" (line {loc.line})" if loc is not None else ""


def _refuse(scatter: HloInstruction, why: str) -> HloUnsupportedError:
    return HloUnsupportedError(f"scatter '%{scatter.name}'{_where(scatter)}: {why}; the loop emitter cannot "
                               "emit a scatter")


def rmw_op(scatter: HloInstruction) -> str | None:
    """The ``atomicrmw`` operation equivalent to the combiner, if there is one."""
    comp = scatter.to_apply
    root, params = comp.root, comp.parameters
    if scatter.shape.is_tuple or len(params) != 2 or root.opcode not in _RMW_OPS:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params} or len(root.operands) != 2:
        return None
    et = scatter.shape.element_type
    fop, sop, uop = _RMW_OPS[root.opcode]
    if et in ("c64", "c128"):
        return "fadd parts" if root.opcode == "add" else None
    if et in ("f32", "f64"):
        return fop
    if et in ("s32", "s64"):
        return sop
    if et in ("u32", "u64"):
        return uop
    return None


def plan_scatter_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                        kernel_name: str) -> ScatterKernelSpec:
    scatter = analysis.roots[0]
    if scatter.opcode != "scatter":
        raise _refuse(scatter, "the fusion root is not the scatter")
    n = len(scatter.operands) // 2
    for k in range(n):
        if scatter.operands[k].opcode != "parameter":
            raise _refuse(scatter, f"operand {k} is not a fusion parameter (it must start the output buffer)")
    out_shapes = scatter.shape.tuple_shapes if scatter.shape.is_tuple else (scatter.shape,)
    for k in range(n):
        if scatter.operands[k].shape.layout != out_shapes[k].layout:
            # the output starts as a byte copy of the operand: both must order elements alike
            raise _refuse(scatter, f"operand {k} has layout {scatter.operands[k].shape.to_text()} but the output "
                          f"{out_shapes[k].to_text()} (the output starts as a copy of the operand's bytes)")
    if n > 1 and not scatter.attr("unique_indices", False):
        raise _refuse(scatter, f"variadic scatter ({n} operands) without unique_indices needs a lock per element")
    updates = scatter.operands[n + 1].shape
    unique = bool(scatter.attr("unique_indices", False))
    op = None if unique else rmw_op(scatter)
    if not unique and op is None and scatter.operands[0].shape.element_type == "c128":
        raise _refuse(scatter, "combining c128 elements with a combiner other than add needs a 128-bit "
                      "compare-and-swap of the (real, imag) pair, which is not implemented")
    combine = "store" if unique else (f"atomicrmw {op}" if op else "cas")
    num = max(updates.element_count(), 1)
    loop = loop_launch_dims(num, 1, device)
    # XLA's ScatterWithDistributedUpdates: the loop launch's threads rounded up to whole warps
    # (num_warps = ceil(threads / 32)); the work-item map's bound check idles the extra lanes
    warp = device.threads_per_warp
    block = (-(-loop.block[0] // warp) * warp, *loop.block[1:])
    config = LoopConfig(1, LaunchDims(loop.grid, block), updates)
    thread_map = thread_to_output_map(updates, config)
    init = {k: scatter.operands[k].parameter_number for k in range(n)}
    return ScatterKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                             scatter=scatter, thread_map=thread_map, launch=config.launch,
                             index_type=kernel_index_type(fusion, config.launch), combine=combine, in_place=init)


def _operand_index(kb: KernelBuilder, fe: FusedEmitter, scatter: HloInstruction, u: list[ir.Value]):
    """(operand index, [in-bounds conditions]) of update element ``u``."""
    b = kb.b
    n = len(scatter.operands) // 2
    operand_shape = scatter.operands[0].shape
    indices = scatter.operands[n]
    udims = scatter.operands[n + 1].shape.dimensions
    dn = scatter.scatter_dimension_numbers
    uwd = list(dn.update_window_dims)
    scatter_dims = [d for d in range(len(udims)) if d not in uwd]
    window_operand = [d for d in range(operand_shape.rank)
                      if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    ivd = dn.index_vector_dim
    batch = [u[d] for d in scatter_dims]
    full: list[ir.Value] = [kb.index(0)] * operand_shape.rank
    conds: list[ir.Value] = []
    for k, od in enumerate(dn.scatter_dims_to_operand_dims):
        idx = list(batch)
        if ivd < indices.shape.rank:
            idx.insert(ivd, kb.index(k))
        raw = fe.value(indices, idx)
        et = indices.shape.element_type
        wide = raw if raw.type.width == 64 else (b.zext(raw, I64) if et.startswith("u") else b.sext(raw, I64))
        size = udims[uwd[window_operand.index(od)]] if od in window_operand else 1
        limit = operand_shape.dimensions[od] - size
        # one unsigned compare: negative starts wrap to huge values
        conds.append(b.icmp_unsigned("<=", wide, ir.Constant(I64, limit)) if limit >= 0
                     else ir.Constant(ir.IntType(1), 0))
        full[od] = b.add(full[od], kb.as_index(wide))
    for ob, sb in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
        full[ob] = b.add(full[ob], batch[sb if sb < ivd else sb - 1])
    for i, od in enumerate(window_operand):
        full[od] = b.add(full[od], u[uwd[i]])
    return full, conds


def emit_scatter_kernel(target: Target, spec: ScatterKernelSpec) -> ir.Module:
    kernel = open_kernel(target, spec)
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    scatter = spec.scatter
    n = len(scatter.operands) // 2
    out_ptrs = kernel.outputs
    m = spec.thread_map
    ids = kb.work_item_ids()
    ae = AffineEmitter(kb, ids, [kb.index(lo) for lo, _ in m.ranges], bounds=lambda v: m.bound(v))
    if scatter.operands[n + 1].shape.element_count() == 0:
        return kernel.finish()
    guards = list(ae.in_bounds(m.constraints))
    count = scatter.operands[n + 1].shape.element_count()
    if spec.launch.num_threads * spec.launch.num_blocks > count:
        # the lanes past the updates (whole warps, as XLA launches): the map's simplified
        # domain may have dropped their bound, so check the work item's number itself
        block = spec.launch.block[0]
        linear = b.add(kb.thread_id(0), b.mul(kb.linear_block_id(spec.launch.grid), kb.index(block)))
        guards.append(b.icmp_unsigned("<", linear, kb.index(count)))
    with kb.if_all(guards):
        u = ae.emit_all(m.exprs)
        full, conds = _operand_index(kb, fe, scatter, u)
        with kb.if_all(conds), fe.scope():
            values = [fe.value(scatter.operands[n + 1 + k], u) for k in range(n)]
            shapes = scatter.shape.tuple_shapes if scatter.shape.is_tuple else [scatter.shape]
            ptrs = []
            for k, shape in enumerate(shapes):
                et = shape.element_type
                ptrs.append(b.gep(out_ptrs[k], [fe.offset(shape, full)], inbounds=True,
                                  source_etype=storage_type(et)))
            if spec.combine == "store":
                _combine_store(b, target, scatter, shapes, ptrs, values)
            elif spec.combine == "atomicrmw fadd parts":
                _combine_complex_add(b, shapes[0].element_type, ptrs[0], values[0])
            elif spec.combine.startswith("atomicrmw"):
                et = shapes[0].element_type
                b.atomic_rmw(spec.combine.split()[1], ptrs[0], to_storage(b, values[0], et), "monotonic")
            else:
                _combine_cas(b, target, scatter, shapes[0], ptrs[0], values[0])
    return kernel.finish()


def _combine_store(b: ir.IRBuilder, target: Target, scatter, shapes, ptrs, values) -> None:
    current = [from_storage(b, b.load(p, typ=storage_type(s.element_type)), s.element_type)
               for s, p in zip(shapes, ptrs)]
    new = emit_call_computation(b, target, scatter.to_apply, [*current, *values])
    for s, p, v in zip(shapes, ptrs, new):
        b.store(to_storage(b, v, s.element_type), p)


def _combine_complex_add(b: ir.IRBuilder, et: str, ptr: ir.Value, value: ir.Value) -> None:
    """A complex add as two float atomic adds, one per part: the parts of a sum are independent,
    so each lands whole (the order of the additions varies, as for any float atomic add)."""
    st = storage_type(et)
    for k in range(2):
        part_ptr = b.gep(ptr, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True, source_etype=st)
        b.atomic_rmw("fadd", part_ptr, b.extract_value(value, k), "monotonic")


def _c64_from_bits(b: ir.IRBuilder, raw: ir.Value) -> ir.Value:
    """The c64 struct whose storage (real part at the lower address, little-endian) is ``raw``: i64."""
    f32 = ir.FloatType()
    re = b.bitcast(b.trunc(raw, I32), f32)
    im = b.bitcast(b.trunc(b.lshr(raw, ir.Constant(I64, 32)), I32), f32)
    z = b.insert_value(ir.Constant(storage_type("c64"), None), re, 0)
    return b.insert_value(z, im, 1)


def _c64_to_bits(b: ir.IRBuilder, z: ir.Value) -> ir.Value:
    lo = b.zext(b.bitcast(b.extract_value(z, 0), I32), I64)
    hi = b.zext(b.bitcast(b.extract_value(z, 1), I32), I64)
    return b.or_(lo, b.shl(hi, ir.Constant(I64, 32)))


def _combine_cas(b: ir.IRBuilder, target: Target, scatter, shape, ptr: ir.Value, value: ir.Value) -> None:
    """``*ptr = to_apply(*ptr, value)`` atomically, by compare-and-swap on the enclosing word
    (a c64 element is one 64-bit word: its (real, imag) pair is swapped whole)."""
    et = shape.element_type
    if et == "c64":   # opaque pointers: the 64-bit word is the element itself
        _cas_loop(b, ptr, I64, lambda cur: _c64_to_bits(
            b, emit_call_computation(b, target, scatter.to_apply, [_c64_from_bits(b, cur), value])[0]))
        return
    st = storage_type(et)
    bits = st.width if isinstance(st, ir.IntType) else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(st)]
    elem_int = ir.IntType(bits)
    if bits >= 32:
        word_t, word_ptr, shift = elem_int, ptr, None
    else:
        # the aligned 32-bit word holding the element; little-endian on both targets
        addr = b.ptrtoint(ptr, I64)
        word_ptr = b.inttoptr(b.and_(addr, ir.Constant(I64, ~3)), ptr.type)
        shift = b.trunc(b.shl(b.and_(addr, ir.Constant(I64, 3)), ir.Constant(I64, 3)), I32)
        word_t = I32

    def next_word(cur: ir.Value) -> ir.Value:
        raw = cur if shift is None else b.trunc(b.lshr(cur, shift), elem_int)
        old = from_storage(b, raw if isinstance(st, ir.IntType) else b.bitcast(raw, st), et)
        new, = emit_call_computation(b, target, scatter.to_apply, [old, value])
        new_raw = to_storage(b, new, et)
        if not isinstance(st, ir.IntType):
            new_raw = b.bitcast(new_raw, elem_int)
        if shift is None:
            return new_raw
        mask = b.shl(ir.Constant(I32, (1 << bits) - 1), shift)
        return b.or_(b.and_(cur, b.not_(mask)), b.shl(b.zext(new_raw, I32), shift))
    _cas_loop(b, word_ptr, word_t, next_word)


def _cas_loop(b: ir.IRBuilder, word_ptr: ir.Value, word_t: ir.IntType,
              next_word: Callable[[ir.Value], ir.Value]) -> None:
    """The compare-and-swap loop: read the word, compute ``next_word(current)``, swap it in
    if the word is unchanged, else retry with what was seen."""
    start = b.load_atomic(word_ptr, "monotonic", word_t.width // 8, typ=word_t)
    pre = b.block
    loop = b.append_basic_block("cas.loop")
    done = b.append_basic_block("cas.done")
    b.branch(loop)
    b.position_at_end(loop)
    cur = b.phi(word_t, name="cas.cur")
    cur.add_incoming(start, pre)
    pair = b.cmpxchg(word_ptr, cur, next_word(cur), "monotonic", "monotonic")
    seen, ok = b.extract_value(pair, 0), b.extract_value(pair, 1)
    cur.add_incoming(seen, b.block)
    b.cbranch(ok, done, loop)
    b.position_at_end(done)
