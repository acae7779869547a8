"""Structured control flow and index arithmetic over llvmlite's IRBuilder.

Emitters write ``with kb.loop(0, n) as i:`` and ``with kb.if_(cond):`` (DESIGN §7) instead of
wiring basic blocks by hand. Index arithmetic runs in one integer type per kernel: ``i32``
when every index and linear offset of the kernel fits below 2³¹, ``i64`` otherwise (32-bit
index math gives ``mad.lo.s32`` in PTX; 64-bit doubles the register cost).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from llvmlite import ir

from .llvm_types import I1, I32, I64
from .target import LaunchDims, Target

INT32_LIMIT = 2**31 - 1
NO_WRAP = ("nuw", "nsw")   # flags of index arithmetic on in-range, non-negative indices


def index_type_for(max_value: int) -> ir.IntType:
    """The narrowest index type (i32 or i64) that holds every value up to ``max_value``."""
    return I32 if max_value <= INT32_LIMIT else I64


@contextmanager
def counted_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, name: str, *, step: int = 1,
                 signed: bool = True) -> Iterator[ir.Value]:
    """``for i in range(start, stop, step)`` over integers of ``start``'s type; the body may
    branch but must rejoin, and the builder continues after the loop."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    iv = b.phi(start.type, name=name)
    iv.add_incoming(start, pre)
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    b.cbranch(cmp("<", iv, stop), body, done)
    b.position_at_end(body)
    yield iv
    nxt = b.add(iv, ir.Constant(start.type, step), name=f"{name}.next", flags=("nsw",) if signed else ())
    iv.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


def _set_range(v: ir.Value, size: int) -> None:
    """``v`` (an id read by a call or load) is in ``[0, size)``: ``!range`` metadata."""
    if isinstance(v, (ir.CallInstr, ir.LoadInstr)) and isinstance(v.type, ir.IntType) and 0 < size < 2 ** (v.type.width - 1):
        module = v.function.module if hasattr(v, "function") else v.parent.parent.module
        v.set_metadata("range", module.add_metadata([ir.Constant(v.type, 0), ir.Constant(v.type, size)]))


def _order(dims: Sequence[int], minor_to_major: Sequence[int] | None) -> tuple[int, ...]:
    """The dims of more than one element, minor first (what a (de)linearisation walks)."""
    order = minor_to_major if minor_to_major is not None else range(len(dims) - 1, -1, -1)
    return tuple(d for d in order if dims[d] != 1)


class KernelBuilder:
    """A builder, the target it emits for, and the kernel's index type."""

    def __init__(self, builder: ir.IRBuilder, target: Target, index_type: ir.IntType = I32,
                 launch: LaunchDims | None = None):
        self.b = builder
        self.target = target
        self.index_type = index_type
        # the kernel's launch: thread and block ids get its ranges (``!range``), as XLA's
        # ``thread_id``/``block_id`` ops carry them, so that LLVM folds what they decide
        # (``tid / 32`` of a 32-thread block is 0) instead of keeping it in registers
        self.launch = launch
        # delinearize's results -> (the linear index, dims, order): linearize of those very
        # values in the same dims and order is that linear index (``linear_of``), as XLA's
        # simplifier folds a delinearisation followed by its linearisation
        self._delinearized: dict[tuple[int, ...], tuple[ir.Value, tuple[int, ...], tuple[int, ...]]] = {}

    # ---- constants and conversions -------------------------------------------------------
    def index(self, v: int) -> ir.Constant:
        return ir.Constant(self.index_type, int(v))

    def as_index(self, v: ir.Value, signed: bool = False) -> ir.Value:
        """``v`` (an integer of any width) converted to the index type."""
        return self.cast_int(v, self.index_type, signed)

    def cast_int(self, v: ir.Value, t: ir.IntType, signed: bool = False) -> ir.Value:
        """``v`` (an integer of any width) truncated or extended to ``t``."""
        w = v.type.width
        if w == t.width:
            return v
        if w > t.width:
            return self.b.trunc(v, t)
        return self.b.sext(v, t) if signed else self.b.zext(v, t)

    # ---- ids ----------------------------------------------------------------------------------
    def thread_id(self, axis: int = 0) -> ir.Value:
        v = self.target.thread_id(self.b, axis)
        if self.launch is not None:
            _set_range(v, self.launch.block[axis])
        return self.as_index(v)

    def block_id(self, axis: int = 0) -> ir.Value:
        v = self.target.block_id(self.b, axis)
        if self.launch is not None:
            _set_range(v, self.launch.grid[axis])
        return self.as_index(v)

    def work_item_ids(self) -> list[ir.Value]:
        """``(th_x, th_y, th_z, bl_x, bl_y, bl_z)``: the dims of every thread -> data map."""
        return [self.thread_id(a) for a in range(3)] + [self.block_id(a) for a in range(3)]

    def linear_block_id(self, grid: Sequence[int]) -> ir.Value:
        """The block's number when blocks are split over grid x and y (``blockIdx.y ·
        gridDim.x + blockIdx.x``; just ``blockIdx.x`` when the grid has one row)."""
        if grid[1] == 1:
            return self.block_id(0)
        b = self.b
        return b.add(b.mul(self.block_id(1), self.index(grid[0])), self.block_id(0), name="block")

    # ---- index arithmetic ---------------------------------------------------------------------
    def delinearize(self, linear: ir.Value, dims: Sequence[int], minor_to_major: Sequence[int] | None = None,
                    *, wrap: bool = False) -> list[ir.Value]:
        """The index of position ``linear`` in ``dims`` ordered by ``minor_to_major`` (row-major
        when None): remainders and quotients from the minor dim up, size-1 dims constant 0,
        the major dim the last quotient (``linear`` is taken to be in range; ``wrap``: the
        major dim's too is taken modulo its size)."""
        b = self.b
        out: list[ir.Value] = [self.index(0)] * len(dims)
        order = minor_to_major if minor_to_major is not None else range(len(dims) - 1, -1, -1)
        order = [d for d in order if dims[d] != 1]
        start = linear
        for k, d in enumerate(order):
            major = k == len(order) - 1
            out[d] = linear if major and not wrap else b.urem(linear, self.index(dims[d]))
            if not major:
                linear = b.udiv(linear, self.index(dims[d]))
        if not wrap and order:
            self._delinearized[tuple(id(v) for v in out)] = (start, tuple(dims), _order(dims, minor_to_major))
        return out

    def linear_of(self, index: Sequence[ir.Value], dims: Sequence[int],
                  minor_to_major: Sequence[int] | None = None) -> ir.Value | None:
        """The linear index ``index`` was delinearised from (``delinearize``) in the same
        ``dims`` and order, else None: its ``linearize`` without the arithmetic."""
        hit = self._delinearized.get(tuple(id(v) for v in index))
        if hit is None or hit[1] != tuple(dims) or hit[2] != _order(dims, minor_to_major):
            return None
        return hit[0]

    def linearize(self, index: Sequence[ir.Value], dims: Sequence[int],
                  minor_to_major: Sequence[int] | None = None) -> ir.Value:
        """The position of ``index`` in ``dims`` ordered by ``minor_to_major`` (row-major when
        None). ``nuw nsw``: the index type holds every offset of the kernel, and consecutive
        elements get provably consecutive offsets (vector loads)."""
        known = self.linear_of(index, dims, minor_to_major)
        if known is not None:
            return known
        b = self.b
        order = minor_to_major if minor_to_major is not None else range(len(dims) - 1, -1, -1)
        out, stride = None, 1
        for d in order:
            if dims[d] != 1:
                term = index[d] if stride == 1 else b.mul(index[d], self.index(stride), flags=NO_WRAP)
                out = term if out is None else b.add(out, term, flags=NO_WRAP)
            stride *= dims[d]
        return out if out is not None else self.index(0)

    # ---- control flow -----------------------------------------------------------------------
    @contextmanager
    def if_(self, cond: ir.Value) -> Iterator[None]:
        """Emit the body only where ``cond`` holds; the builder continues after the if."""
        with self.b.if_then(cond):
            yield

    @contextmanager
    def if_all(self, conds: Sequence[ir.Value]) -> Iterator[None]:
        """Emit the body only where every condition holds; no branch when there is none."""
        if not conds:
            yield
            return
        with self.if_(self.all_of(list(conds))):
            yield

    @contextmanager
    def loop(self, start: int | ir.Value, stop: int | ir.Value, step: int = 1,
             name: str = "i") -> Iterator[ir.Value]:
        """A counted loop ``for i in range(start, stop, step)`` (step > 0), yielding ``i``.

        The body may not terminate its block (no early return inside); values it defines
        stay inside it.
        """
        start_v = self.index(start) if isinstance(start, int) else start
        stop_v = self.index(stop) if isinstance(stop, int) else stop
        with counted_loop(self.b, start_v, stop_v, name, step=step, signed=True) as iv:
            yield iv

    def select_chain(self, conds_values: list[tuple[ir.Value, ir.Value]], default: ir.Value) -> ir.Value:
        """``c0 ? v0 : c1 ? v1 : ... : default``."""
        out = default
        for c, v in reversed(conds_values):
            out = self.b.select(c, v, out)
        return out

    def all_of(self, conds: list[ir.Value]) -> ir.Value:
        if not conds:
            return ir.Constant(I1, 1)
        out = conds[0]
        for c in conds[1:]:
            out = self.b.and_(out, c)
        return out
