"""Elemental emission of a fused computation: the value of any instruction at an index.

``FusedEmitter.value(inst, index)`` returns the LLVM value of ``inst`` at the output index
``index`` (one ``ir.Value`` per dimension, in the kernel's index type). Elementwise ops go to
the scalar op table (``elemental_ops``); index-only ops (broadcast, reshape, transpose, slice,
pad, concatenate, dynamic-slice, gather, ...) compute their operand's index (``index_ops``,
mostly through the indexing analysis' maps) and recurse. Parameters are loads at the
physical offset their layout gives (tiled layouts included); constants are immediates or
module-level arrays.

Subgraphs found by the partitioner become functions ``<kernel>_<root>(params..., index...)``
that readers call; within one function body, values are cached per (instruction, index)
inside the current scope (a loop body or a branch arm opens a scope, so nothing defined
inside one is used outside it).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.opcodes import ELEMENTWISE
from ...indexing.layout_maps import linear_index_map
from . import contraction, select_scatter, index_ops  # noqa: F401  (fill INDEX_OPS)
from .affine import AffineEmitter
from .scalar_ops import emit_constant_scalar, emit_scalar_op
from ..errors import unsupported
from .index_op_table import INDEX_OPS
from .index_ops import mapped_operand_index
from ..kernel_builder import KernelBuilder
from ..llvm_types import PTR, compute_type, from_storage, storage_type, to_storage, to_storage_constant
from .partitioner import PartitionedComputation, Subgraph
from ..target import Target
from .value_numbering import index_key

Value = "ir.Value | list[ir.Value]"

# The subgraph functions are ``alwaysinline``: LLVM's always-inliner copies every call's body,
# and the bodies of the functions it calls, before any CSE can merge equal copies. Where
# subgraphs call each other along many paths (XLA's inlined threefry: each round's two values
# both read both of the round before) that is exponential in the depth: a 134-instruction key
# split came to 3e9 instructions and LLVM's O3 grew by 50 MB/s without end. Such fusions are
# emitted inline instead: one body, each (instruction, index) emitted once, linear.
_FLATTEN_FACTOR = 8
_FLATTEN_LIMIT = 4096


def flattening_explodes(part: PartitionedComputation) -> bool:
    """Whether inlining ``part``'s subgraph functions gives over ``_FLATTEN_FACTOR`` times the
    fusion's instructions (and over ``_FLATTEN_LIMIT``)."""
    if len(part.subgraphs) < 3:  # a DAG of one or two functions cannot multiply much
        return False
    total = sum(len(sg.instructions) for sg in part.subgraphs)
    flat = part.flattened_size()
    return flat > _FLATTEN_LIMIT and flat > _FLATTEN_FACTOR * total


# Pad, concatenate and dynamic-update-slice read their operands inside branch arms (an arm may
# read memory only valid under its condition), and nothing emitted in one arm is visible in
# another. Where the same values are reached through many arms, each arm emits its own copy:
# in an associative scan (lax.associative_scan, each level ``add(pad(x), pad(mul(y, x)))``
# with interior padding) every level doubles the copies, so a 24-element scan came to 14,000
# emitted instructions for 90 (and minutes of LLVM). Such fusions select instead of branching
# (``speculate``): each operand is read at its index clamped into its bounds, which every
# arm reaching it computes the same way, so one copy serves all.
_ARM_OPERANDS = {"pad": (0, 1), "dynamic-update-slice": (0, 1)}
_ARM_FACTOR = 8
_ARM_LIMIT = 256


def branch_arms_explode(computation) -> bool:
    """Whether emitting ``computation`` with branch arms copies its instructions over
    ``_ARM_FACTOR`` times (and over ``_ARM_LIMIT`` instructions per output element): the
    number of arms each instruction is emitted in, counted from the root (a read inside an
    arm is one more copy for each arm of its reader; plain reads are counted as sharing the
    reader's, so this is a lower bound: readers at different indices copy more)."""
    insts = computation.post_order()
    if len(insts) < 8:
        return False
    arm: dict[int, int] = {}
    plain: dict[int, int] = {}
    total = 0
    cap = _ARM_LIMIT + _ARM_FACTOR * len(insts)
    for inst in reversed(insts):
        c = arm.get(id(inst), 0) + plain.get(id(inst), 0)
        if inst is computation.root:
            c = max(c, 1)
        if c == 0:
            continue
        c = min(c, cap)
        total += c
        arms = _ARM_OPERANDS.get(inst.opcode, range(len(inst.operands)) if inst.opcode == "concatenate" else ())
        for i, op in enumerate(inst.operands):
            if i in arms:
                arm[id(op)] = arm.get(id(op), 0) + c
            else:
                plain[id(op)] = max(plain.get(id(op), 0), c)
    return total > _ARM_LIMIT and total > _ARM_FACTOR * len(insts)


_MAPPED = frozenset({"copy", "reshape", "bitcast", "transpose", "slice", "reverse", "convert", "bitcast-convert"})
_MOVES = frozenset({"parameter", "bitcast", "reshape", "transpose", "slice", "broadcast", "copy", "convert",
                    "bitcast-convert"})
# elementwise ops whose operands ``prefetch`` does not read early: a select's arms may be
# read out of their condition's range only as values, but keeping them lazy keeps registers
_NOT_PREFETCHED_THROUGH = frozenset({"select", "clamp"})


_PREFETCH_VISITS = 256   # (instruction, index) pairs one ``prefetch`` visits at most


def _unit_dims_only(inst: HloInstruction) -> bool:
    """A bitcast or reshape whose operand has the same non-unit dims in the same order, both
    in the default layout (its operand index is its index with unit dims added or dropped)."""
    if inst.opcode not in ("bitcast", "reshape") or not inst.shape.is_array:
        return False
    src, dst = inst.operands[0].shape, inst.shape
    if src.element_type != dst.element_type:
        return False
    if [n for n in src.dimensions if n != 1] != [n for n in dst.dimensions if n != 1]:
        return False
    return all(tuple(s.minor_to_major) == tuple(range(s.rank - 1, -1, -1)) for s in (src, dst))


def _moves_parameter_data(inst: HloInstruction, memo: dict[int, bool]) -> bool:
    """Whether ``inst`` only moves (and converts) the data of fusion parameters: every node
    below it is a parameter or one of ``_MOVES`` (``memo``: by instruction id)."""
    cached = memo.get(id(inst))
    if cached is not None:
        return cached
    ok = inst.opcode in _MOVES and (inst.opcode == "parameter" or (
        bool(inst.operands) and all(_moves_parameter_data(o, memo) for o in inst.operands)))
    memo[id(inst)] = ok
    return ok


_FOLDED = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "udiv": lambda a, b: a // b if b else None, "urem": lambda a, b: a % b if b else None,
           "shl": lambda a, b: a << b, "lshr": lambda a, b: a >> b, "and": lambda a, b: a & b,
           "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}


def _constant_value(x: ir.Value, depth: int = 8) -> int | None:
    """The unsigned value of an integer index that is a constant or unsigned arithmetic on
    constants (index maps add a slice's start to a constant 0 as an instruction)."""
    if not isinstance(x.type, ir.IntType):
        return None
    if isinstance(x, ir.Constant):
        return x.constant % (1 << x.type.width) if isinstance(x.constant, int) else None
    fold = _FOLDED.get(getattr(x, "opname", ""))
    if fold is None or depth == 0 or len(x.operands) != 2:
        return None
    a = _constant_value(x.operands[0], depth - 1)
    if a is None:  # (the other operand's value would not matter)
        return None
    b = _constant_value(x.operands[1], depth - 1)
    if b is None:
        return None
    v = fold(a, b)
    if v is None or v < 0 or v >= 1 << x.type.width:   # wrapped: leave it to the load
        return None
    return v


def _constant_index(index: Sequence[ir.Value], dims: Sequence[int]) -> tuple[int, ...] | None:
    """``index`` as integers where every component is a constant within ``dims``."""
    out = []
    for x, n in zip(index, dims):
        v = _constant_value(x)
        if v is None or not 0 <= v < n:
            return None
        out.append(v)
    return tuple(out) if len(out) == len(dims) else None


class FusedEmitter:
    """Emits the instructions of one fused computation for one kernel."""

    def __init__(self, target: Target, module: ir.Module, kernel_name: str, part: PartitionedComputation,
                 index_type: ir.IntType, *, inline: bool = False):
        self.target = target
        self.module = module
        self.kernel_name = kernel_name
        self.part = part
        self.index_type = index_type
        self.params = part.computation.parameters
        self.kb: KernelBuilder | None = None
        self.param_ptrs: list[ir.Value] = []
        self.current: Subgraph | None = None
        self.scopes: list[dict] = []
        self.functions: dict[str, ir.Function] = {}
        self.constants: dict[str, ir.GlobalVariable] = {}
        # inline: every subgraph is emitted in the kernel body (emitters that inject values
        # living in the kernel, e.g. a shared-memory tile, cannot call functions for them);
        # also when the subgraph functions, inlined, would come to far more than the fusion
        # (see _FLATTEN_LIMIT)
        self.inline = inline or flattening_explodes(part)
        self._arms_explode: bool | None = None
        self.injected: dict[HloInstruction, Callable[[Sequence[ir.Value]], object]] = {}
        self._entry_loads: dict[tuple, ir.Value] = {}
        # read every element a root needs through data movement first (see ``prefetch``)
        self.prefetch_moves = False
        self._moves_memo: dict[int, bool] = {}

    def inject(self, inst: HloInstruction, value_at: Callable[[Sequence[ir.Value]], object]) -> None:
        """Make ``value_at(index)`` the value of ``inst`` (e.g. a hero read back from shared
        memory); implies inline emission."""
        self.injected[inst] = value_at
        self.inline = True

    @property
    def speculate(self) -> bool:
        """Whether pad and concatenate select between operands read at clamped indices instead
        of branching (see ``_ARM_LIMIT``). Inline emission only: with subgraph functions each
        arm's copy is one call, and what LLVM's inliner makes of the calls is the values the
        fusion really computes at different indices (a scan fused into a loop kernel
        recomputes its prefix per element), which selects would only merge into one huge
        block."""
        if not self.inline:
            return False
        if self._arms_explode is None:
            self._arms_explode = branch_arms_explode(self.part.computation)
        return self._arms_explode

    # ---- entry points ------------------------------------------------------------------------
    def bind(self, kb: KernelBuilder, param_ptrs: Sequence[ir.Value]) -> None:
        """Emit into the kernel body at ``kb`` with the kernel's parameter pointers."""
        self.kb, self.param_ptrs, self.scopes = kb, list(param_ptrs), [{}]

    def root_value(self, root: HloInstruction, index: Sequence[ir.Value]):
        """Fusion output ``root`` at its output index (a list for a tuple-shaped root)."""
        return self.value(root, index)

    # ---- scopes ---------------------------------------------------------------------------------
    @contextmanager
    def scope(self) -> Iterator[None]:
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()

    def seed(self, inst: HloInstruction, index: Sequence[ir.Value], value) -> None:
        """Record ``value`` as ``inst`` at ``index`` in the current scope (an emitter that
        loaded it itself, e.g. one lane of a vector load)."""
        self.scopes[-1][self._key(inst, index)] = value

    def known(self, inst: HloInstruction, index: Sequence[ir.Value]) -> bool:
        """Whether ``inst`` at ``index`` is already computed in a visible scope."""
        return self._lookup(self._key(inst, index)) is not None

    def parameter_pointer(self, param: HloInstruction) -> ir.Value:
        """The buffer pointer of fusion parameter ``param`` in the current function."""
        return self.param_ptrs[param.parameter_number]

    @staticmethod
    def _key(inst: HloInstruction, index: Sequence[ir.Value]) -> tuple:
        return (id(inst), index_key(index))

    # ---- values ---------------------------------------------------------------------------------
    def value(self, inst: HloInstruction, index: Sequence[ir.Value]):
        """``inst`` at ``index`` (a list of values for tuple-shaped instructions)."""
        if inst.shape.is_array and len(index) != inst.shape.rank:
            raise AssertionError(f"{inst.name}: index of rank {len(index)} for {inst.shape}")
        key = self._key(inst, index)
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        sg = self.part.subgraph_of.get(inst)
        if inst in self.injected:
            v = self.injected[inst](index)
        elif not self.inline and sg is not None and sg is not self.current and inst in sg.roots:
            v = self._call_subgraph(sg, index)[sg.roots.index(inst)]
        else:
            v = self._emit(inst, index)
        self.scopes[-1][key] = v
        return v

    def operand_value(self, inst: HloInstruction, i: int, index: Sequence[ir.Value]):
        """Operand ``i`` of an elementwise ``inst``: scalar operands are read at ``()``, and a
        same-rank operand's size-1 dims that stretch over the result's (degenerate broadcast,
        which the verifier accepts) at 0."""
        op = inst.operands[i]
        if op.shape.rank != len(index):
            return self.value(op, ())
        dims = op.shape.dimensions
        if any(d == 1 and o != 1 for d, o in zip(dims, inst.shape.dimensions)):
            zero = ir.Constant(index[0].type, 0)
            index = [zero if d == 1 and o != 1 else x for x, d, o in zip(index, dims, inst.shape.dimensions)]
        return self.value(op, index)

    def _emit(self, inst: HloInstruction, index: Sequence[ir.Value]):
        if inst.opcode == "parameter":
            return self.load_parameter(inst, index)
        if inst.opcode == "constant":
            return self._constant(inst, index)
        handler = INDEX_OPS.get(inst.opcode)
        if handler is not None:
            return handler(self, inst, index)
        if inst.opcode in ELEMENTWISE:
            ops = [self.operand_value(inst, i, index) for i in range(len(inst.operands))]
            return emit_scalar_op(self.kb.b, self.target, inst, ops)
        raise unsupported(inst, "the loop emitter cannot emit this operation inside a fusion")

    # ---- leaves -----------------------------------------------------------------------------------
    def offset(self, shape, index: Sequence[ir.Value]) -> ir.Value:
        """Physical element offset of ``index`` in a buffer of ``shape`` (layout and tiles)."""
        m = linear_index_map(shape)
        ae = AffineEmitter(self.kb, index, bounds=lambda v: m.bound(v))
        return ae.emit(m.exprs[0])

    def load_parameter(self, inst: HloInstruction, index: Sequence[ir.Value]) -> ir.Value:
        """A fusion parameter's element at ``index`` (a load at its physical offset)."""
        if not inst.shape.is_array:
            raise unsupported(inst, "tuple-shaped fusion parameters are not supported")
        et = inst.shape.element_type
        b = self.kb.b
        consts = _constant_index(index, inst.shape.dimensions)
        if consts is not None:
            return self._entry_load(inst, consts)
        ptr = b.gep(self.param_ptrs[inst.parameter_number], [self.offset(inst.shape, index)],
                    inbounds=True, source_etype=storage_type(et))
        load = b.load(ptr, typ=storage_type(et))
        self.target.mark_invariant(load)
        return from_storage(b, load, et)

    def _entry_load(self, inst: HloInstruction, index: tuple[int, ...]) -> ir.Value:
        """A parameter element at a constant in-bounds index, loaded once in the current
        function's entry block: the fusion's parameters are read-only, so the load can be
        speculated out of the branches (concatenate, pad, select arms) that each read it, and
        loads of neighbouring constant indices then sit together in one block, where LLVM
        merges them into one vector load (``ld.global.nc.v2.b64`` of a u64[2] key)."""
        b = self.kb.b
        key = (id(b.function), inst.parameter_number, index)
        hit = self._entry_loads.get(key)
        if hit is not None:
            return hit
        et = inst.shape.element_type
        with b.goto_entry_block():
            consts = [ir.Constant(self.kb.index_type, i) for i in index]
            ptr = b.gep(self.param_ptrs[inst.parameter_number], [self.offset(inst.shape, consts)],
                        inbounds=True, source_etype=storage_type(et))
            load = b.load(ptr, typ=storage_type(et))
            self.target.mark_invariant(load)
            v = from_storage(b, load, et)
        self._entry_loads[key] = v
        return v

    def store(self, shape, ptr: ir.Value, index: Sequence[ir.Value], value: ir.Value,
              offset: ir.Value | None = None) -> None:
        """Store ``value`` (compute type) at ``index`` of the output buffer ``ptr`` of ``shape``:
        at its physical offset, or at ``offset`` when the caller computed it already."""
        et = shape.element_type
        b = self.kb.b
        dst = b.gep(ptr, [self.offset(shape, index) if offset is None else offset], inbounds=True,
                    source_etype=storage_type(et))
        b.store(to_storage(b, value, et), dst)

    def _constant(self, inst: HloInstruction, index: Sequence[ir.Value]) -> ir.Value:
        if not inst.shape.is_array:
            raise unsupported(inst, "tuple constants inside a fusion are not supported")
        et = inst.shape.element_type
        plain = inst.plain_scalar()
        if plain is not None:  # (no numpy: issue 17)
            return emit_constant_scalar(plain, et)
        import numpy as np
        lit = np.asarray(inst.literal)
        if lit.size == 1:
            return emit_constant_scalar(lit.reshape(-1)[0], et)
        gv = self.constants.get(inst.name)
        st = storage_type(et)
        if gv is None:
            flat = lit.reshape(-1)
            if et == "pred":
                elems = [ir.Constant(st, int(bool(x))) for x in flat]
            else:
                elems = [to_storage_constant(emit_constant_scalar(x, et), st) for x in flat]
            arr_t = ir.ArrayType(st, len(elems))
            gv = ir.GlobalVariable(self.module, arr_t, name=f"{self.kernel_name}.{inst.name}")
            gv.global_constant = True
            gv.linkage = "internal"
            gv.initializer = ir.Constant(arr_t, elems)
            gv.align = 16
            self.constants[inst.name] = gv
        b = self.kb.b
        strides = np.cumprod([1, *reversed(inst.shape.dimensions[1:])])[::-1]
        off = self.kb.index(0)
        for v, s in zip(index, strides):
            off = b.add(off, b.mul(v, self.kb.index(int(s))))
        ptr = b.gep(gv, [self.kb.index(0), off], inbounds=True, source_etype=gv.value_type)
        return from_storage(b, b.load(ptr, typ=st), et)

    # ---- subgraph functions --------------------------------------------------------------------
    def _lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def preload(self, root: HloInstruction, index: Sequence[ir.Value]) -> None:
        """Load now the parameters ``root``'s subgraph reads at ``index`` (the loop emitter
        issues every thread's loads before any arithmetic, so they merge into vector loads)."""
        sg = self.part.subgraph_of.get(root)
        if sg is None:
            return
        key = ("preload", id(sg), self._key(root, index)[1])
        if self._lookup(key) is None:
            self.scopes[-1][key] = [self.load_parameter(p, index) for p in self.part.reads_at_root_index(sg)]

    def prefetch(self, inst: HloInstruction, index: Sequence[ir.Value]) -> None:
        """Emit now, before any arithmetic, the parts of ``inst`` at ``index`` that only move
        parameter data (slices, bitcasts, transposes, broadcasts, converts of parameters),
        reached through elementwise ops. Emitted where first used, an element's reads land in
        the blocks its arithmetic splits into (the branches of a ``sin``), and LLVM merges
        loads of adjacent elements (the even and odd slices of a rotary embedding: one 32-bit
        load of two bf16) only within one block. The values are cached, so the later emission
        reuses them."""
        seen: set = set()

        def walk(x: HloInstruction, idx: Sequence[ir.Value]) -> None:
            sg = self.part.subgraph_of.get(x)
            foreign = not self.inline and sg is not self.current   # another subgraph's function
            key = self._key(x, idx)
            if key in seen or x in self.injected or not x.shape.is_array:
                return
            seen.add(key)
            if _moves_parameter_data(x, self._moves_memo):
                if foreign and x.opcode != "parameter" and (sg is None or x not in sg.roots):
                    return
                if x.opcode != "parameter" or _constant_index(idx, x.shape.dimensions) is None:
                    self.value(x, idx)
                return
            if foreign:
                return
            if len(seen) > _PREFETCH_VISITS:
                return
            if x.opcode in _MAPPED:
                # an element of the operand: followed through converts and through bitcasts and
                # reshapes that only add or drop unit dims (no index arithmetic that another
                # path would reach the same element by, structurally different)
                if x.opcode in ("convert", "bitcast-convert") or _unit_dims_only(x):
                    walk(x.operands[0], mapped_operand_index(self, x, idx))
                return
            if x.opcode == "broadcast":
                walk(x.operands[0], [idx[d] for d in x.dimensions])
                return
            if x.opcode in ELEMENTWISE and x.opcode not in _NOT_PREFETCHED_THROUGH:
                for op in x.operands:
                    if op.shape.rank != len(idx):
                        continue
                    dims = op.shape.dimensions
                    if any(d == 1 and o != 1 for d, o in zip(dims, x.shape.dimensions)):
                        continue
                    walk(op, idx)
        walk(inst, index)

    def _call_subgraph(self, sg: Subgraph, index: Sequence[ir.Value]) -> list:
        """One call of ``sg``'s function per index and scope; its value per root."""
        index_key = self._key(sg.roots[0], index)[1]
        key = (id(sg), index_key)
        vals = self._lookup(key)
        if vals is not None:
            return vals
        fn = self._subgraph_function(sg)
        pre = self._lookup(("preload", id(sg), index_key))
        if pre is None:
            pre = [self.load_parameter(p, index) for p in self.part.reads_at_root_index(sg)]
        vals = self._unpack(self.kb.b.call(fn, [*self.param_ptrs, *index, *pre]), sg)
        self.scopes[-1][key] = vals
        return vals

    def _result_type(self, sg: Subgraph) -> ir.Type:
        leaves: list[ir.Type] = []
        for r in sg.roots:
            shapes = r.shape.tuple_shapes if r.shape.is_tuple else [r.shape]
            leaves += [compute_type(s.element_type) for s in shapes]
        return leaves[0] if len(leaves) == 1 else ir.LiteralStructType(leaves)

    def _unpack(self, v: ir.Value, sg: Subgraph) -> list:
        """The call result as one entry per root (a list of leaves for tuple-shaped roots)."""
        count = sum(len(r.shape.tuple_shapes) if r.shape.is_tuple else 1 for r in sg.roots)
        if count == 1:  # one leaf is returned as itself (a complex leaf is a struct too)
            return [v]
        leaves = [self.kb.b.extract_value(v, i) for i in range(len(v.type.elements))]
        out, k = [], 0
        for r in sg.roots:
            n = len(r.shape.tuple_shapes) if r.shape.is_tuple else 1
            out.append(leaves[k:k + n] if r.shape.is_tuple else leaves[k])
            k += n
        return out

    def _subgraph_function(self, sg: Subgraph) -> ir.Function:
        fn = self.functions.get(sg.name)
        if fn is not None:
            return fn
        dims = sg.roots[0].shape.dimensions if sg.roots[0].shape.is_array else \
            sg.roots[0].shape.tuple_shapes[0].dimensions
        for r in sg.roots[1:]:
            rd = r.shape.dimensions if r.shape.is_array else r.shape.tuple_shapes[0].dimensions
            if tuple(rd) != tuple(dims):
                raise unsupported(r, "fusion outputs of different dimensions are not supported by the loop emitter")
        pre = self.part.reads_at_root_index(sg)
        pre_types = [compute_type(p.shape.element_type) for p in pre]
        fnty = ir.FunctionType(self._result_type(sg),
                               [PTR] * len(self.params) + [self.index_type] * len(dims) + pre_types)
        fn = ir.Function(self.module, fnty, name=f"{self.kernel_name}_{sg.name}")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        self.functions[sg.name] = fn
        saved = (self.kb, self.param_ptrs, self.current, self.scopes)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.kb = KernelBuilder(b, self.target, self.index_type)
        self.param_ptrs = list(fn.args[:len(self.params)])
        self.current, self.scopes = sg, [{}]
        index = list(fn.args[len(self.params):len(self.params) + len(dims)])
        for p, arg in zip(pre, fn.args[len(self.params) + len(dims):]):
            self.scopes[0][self._key(p, index)] = arg
        leaves: list[ir.Value] = []
        if self.prefetch_moves:
            for r in sg.roots:
                self.prefetch(r, index)
        for r in sg.roots:
            v = self.value(r, index)
            leaves += v if isinstance(v, list) else [v]
        if len(leaves) == 1:
            b.ret(leaves[0])
        else:
            agg = ir.Constant(fnty.return_type, ir.Undefined)
            for i, leaf in enumerate(leaves):
                agg = b.insert_value(agg, leaf, i)
            b.ret(agg)
        self.kb, self.param_ptrs, self.current, self.scopes = saved
        return fn

    # ---- control flow helpers for index ops ------------------------------------------------------
    def branch(self, cond: ir.Value, then_fn, else_fn) -> ir.Value:
        """``cond ? then_fn() : else_fn()`` with real branches (an arm may read memory that is
        only valid when its condition holds)."""
        b = self.kb.b
        with b.if_else(cond) as (then, otherwise):
            with then:
                with self.scope():
                    v1 = then_fn()
                bb1 = b.block
            with otherwise:
                with self.scope():
                    v2 = else_fn()
                bb2 = b.block
        phi = b.phi(v1.type)
        phi.add_incoming(v1, bb1)
        phi.add_incoming(v2, bb2)
        return phi
