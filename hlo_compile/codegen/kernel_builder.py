"""Structured control flow and index arithmetic over llvmlite's IRBuilder.

Emitters write ``with kb.loop(0, n) as i:`` and ``with kb.if_(cond):`` (DESIGN §7) instead of
wiring basic blocks by hand. Index arithmetic runs in one integer type per kernel: ``i32``
when every index and linear offset of the kernel fits below 2³¹, ``i64`` otherwise (32-bit
index math gives ``mad.lo.s32`` in PTX; 64-bit doubles the register cost).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from llvmlite import ir

from .llvm_types import I1, I32, I64
from .target import Target

INT32_LIMIT = 2**31 - 1


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


class KernelBuilder:
    """A builder, the target it emits for, and the kernel's index type."""

    def __init__(self, builder: ir.IRBuilder, target: Target, index_type: ir.IntType = I32):
        self.b = builder
        self.target = target
        self.index_type = index_type

    # ---- constants and conversions -------------------------------------------------------
    def index(self, v: int) -> ir.Constant:
        return ir.Constant(self.index_type, int(v))

    def as_index(self, v: ir.Value, signed: bool = False) -> ir.Value:
        """``v`` (an integer of any width) converted to the index type."""
        w, t = v.type.width, self.index_type
        if w == t.width:
            return v
        if w > t.width:
            return self.b.trunc(v, t)
        return self.b.sext(v, t) if signed else self.b.zext(v, t)

    def thread_id(self, axis: int = 0) -> ir.Value:
        return self.as_index(self.target.thread_id(self.b, axis))

    def block_id(self, axis: int = 0) -> ir.Value:
        return self.as_index(self.target.block_id(self.b, axis))

    # ---- control flow -----------------------------------------------------------------------
    @contextmanager
    def if_(self, cond: ir.Value) -> Iterator[None]:
        """Emit the body only where ``cond`` holds; the builder continues after the if."""
        with self.b.if_then(cond):
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
