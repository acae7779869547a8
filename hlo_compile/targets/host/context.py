"""The per-thread context struct a host kernel reads its ids from (DESIGN §3, notes/nvptx.md §4).

A host kernel takes one extra trailing argument, a pointer to this struct. The serial driver
keeps one (a stack slot it rewrites per thread); the coroutine scheduler keeps one per thread
of the block, because suspended threads must keep their own ids, barrier site and shuffle
count. Field order is shared by the target (which loads ids) and the drivers (which fill it).
"""
from __future__ import annotations

from enum import IntEnum

import llvmlite.binding as llvm
from llvmlite import ir

from ...codegen.llvm_types import I32, PTR


class Ctx(IntEnum):
    """Field indices of ``CTX_TYPE``."""

    IDS = 0          # [12 x i32]: tid x,y,z; ctaid x,y,z; ntid x,y,z; nctaid x,y,z
    SMEM = 1         # ptr: this block's shared memory (static arrays, then dynamic)
    DYN_SMEM = 2     # ptr: the dynamic part of it (after every static array)
    XCHG = 3         # ptr: the block's shuffle exchange, i32[nthreads][2] (double-buffered)
    FRAME = 4        # ptr: a preallocated coroutine frame slot for this thread
    SITE = 5         # i32: > 0 waiting at barrier #site, < 0 at shuffle #-site, 0 running
    SHUFFLES = 6     # i32: shuffles this thread has done in the block (parity = & 1)
    LTID = 7         # i32: linear thread id in the block (x fastest)
    NTHREADS = 8     # i32: threads in the block
    FRAME_CAP = 9    # i32: bytes in the FRAME slot
    FRAME_NEED = 10  # i32: the coroutine frame size this kernel asked for (for resizing)


CTX_TYPE = ir.LiteralStructType([ir.ArrayType(I32, 12), PTR, PTR, PTR, PTR, I32, I32, I32, I32, I32, I32])

# offsets into Ctx.IDS
TID, CTAID, NTID, NCTAID = 0, 3, 6, 9


def struct_layout(struct: ir.LiteralStructType, data_layout: str) -> tuple[list[int], int]:
    """Byte offsets of ``struct``'s fields and its ABI size under ``data_layout``."""
    td = llvm.create_target_data(data_layout)
    offsets, end, align = [], 0, 1
    for el in struct.elements:
        a = el.get_abi_alignment(td)
        end = (end + a - 1) // a * a
        offsets.append(end)
        end += el.get_abi_size(td)
        align = max(align, a)
    return offsets, (end + align - 1) // align * align


def ctx_field(b: ir.IRBuilder, ctx: ir.Value, field: Ctx, index: int | None = None) -> ir.Value:
    """A pointer to ``field`` (element ``index`` of IDS) of the struct at ``ctx``."""
    idx = [ir.Constant(I32, 0), ir.Constant(I32, int(field))]
    if index is not None:
        idx.append(ir.Constant(I32, index))
    return b.gep(ctx, idx, inbounds=True, source_etype=CTX_TYPE)


_ID_NAMES = {TID: "tid", CTAID: "ctaid", NTID: "ntid", NCTAID: "nctaid"}
# value ranges [lo, hi) the drivers guarantee (GPU limits): they let LLVM drop overflow checks
_ID_RANGES = {TID: (0, 1024), CTAID: (0, 2**31 - 1), NTID: (1, 1025), NCTAID: (1, 2**31 - 1)}


def load_id(b: ir.IRBuilder, ctx: ir.Value, base: int, axis: int) -> ir.Value:
    """Load one id or dim (``base`` is TID/CTAID/NTID/NCTAID, ``axis`` 0..2)."""
    if axis not in (0, 1, 2):
        raise ValueError(f"axis must be 0, 1 or 2, not {axis!r}")
    v = b.load(ctx_field(b, ctx, Ctx.IDS, base + axis), name=f"{_ID_NAMES[base]}.{'xyz'[axis]}", typ=I32)
    lo, hi = _ID_RANGES[base]
    v.set_metadata("range", b.module.add_metadata([ir.Constant(I32, lo), ir.Constant(I32, hi)]))
    return v
