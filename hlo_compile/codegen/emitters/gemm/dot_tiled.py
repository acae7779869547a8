"""The tiled path of the dot emitter, and what it shares with the tensor-core path
(``DotKernelEmission``: the kernel, the block's output origin, operand staging, epilogue)."""
from __future__ import annotations

from typing import Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ...kernel import open_kernel
from ...llvm_types import compute_type
from ...target import Target
from .dot_spec import DotKernelSpec
from .tiles import (BK, BM, BN, RM, RN, TX, TY, bounds, emit_tiled_mainloop, load_or_zero, staged_slots,
                    store_epilogue)


def _operand_index(rank: int, batch_dims, contract_dims, free_dims, bidx, kidx, fidx) -> list:
    index: list = [None] * rank
    for d, v in zip(batch_dims, bidx):
        index[d] = v
    for d, v in zip(contract_dims, kidx):
        index[d] = v
    for d, v in zip(free_dims, fidx):
        index[d] = v
    return index


class DotKernelEmission:
    """What both dot paths share: the kernel, the fused emitter, the block's output origin
    (``m0``, ``n0``, batch index), staging operand tiles into shared memory and the epilogue."""

    def __init__(self, target: Target, spec: DotKernelSpec):
        self.target, self.spec = target, spec
        self.kernel = open_kernel(target, spec, inline=True)
        self.module = self.kernel.module
        self.kb = kb = self.kernel.kb
        self.b = b = kb.b
        g = spec.geometry
        self.fe = self.kernel.fe
        self.out_ptr = self.kernel.outputs[0]
        tx, ty = kb.thread_id(0), kb.thread_id(1)
        self.tx, self.ty = tx, ty
        self.tid = b.add(tx, b.mul(ty, kb.index(TX)))
        self.m0 = b.mul(kb.block_id(1), kb.index(BM))
        self.n0 = b.mul(kb.block_id(0), kb.index(BN))
        self.bidx = kb.delinearize(kb.block_id(2), g.batch) if g.batch else []

    def _load(self, operand: HloInstruction, index: list, conds: list, tile_et: str, zero: ir.Value) -> ir.Value:
        return load_or_zero(self.kb, self.fe, operand, index, conds, tile_et, zero)

    def stage_tiles(self, step: ir.Value, tile_et: str, a_tile: ir.Value, a_offset, b_tile: ir.Value,
                    b_offset) -> None:
        """This K step's operand tiles into shared memory, converted to ``tile_et`` (zero
        outside the bounds): lhs element (mm, kk) of the BM x BK tile at ``a_offset(mm, kk)``,
        rhs element (kk, nn) of the BK x BN tile at ``b_offset(kk, nn)`` (element offsets)."""
        kb, b, g, tid = self.kb, self.b, self.spec.geometry, self.tid
        lhs, rhs = self.spec.dot.operands
        tt = compute_type(tile_et)
        zero = ir.Constant(tt, 0)
        bidx, m0, n0 = self.bidx, self.m0, self.n0

        def store(tile, off, v):
            b.store(v, b.gep(tile, [off], inbounds=True, source_etype=tt))

        k0 = b.mul(step, kb.index(BK))
        for mm, kk, m, k, conds in staged_slots(kb, tid, True, m0, k0, g.M, g.K):
            index = _operand_index(lhs.shape.rank, g.lhs_batch, g.lhs_contract, g.lhs_free, bidx,
                                   kb.delinearize(k, g.k_dims), kb.delinearize(m, g.m_dims))
            store(a_tile, a_offset(mm, kk), self._load(lhs, index, conds, tile_et, zero))
        for nn, kk, n, k, conds in staged_slots(kb, tid, False, n0, k0, g.N, g.K):
            index = _operand_index(rhs.shape.rank, g.rhs_batch, g.rhs_contract, g.rhs_free, bidx,
                                   kb.delinearize(k, g.k_dims), kb.delinearize(n, g.n_dims))
            store(b_tile, b_offset(kk, nn), self._load(rhs, index, conds, tile_et, zero))

    def epilogue(self, points: Sequence[tuple[ir.Value, ir.Value, ir.Value]]) -> ir.Module:
        """Each (m, n, slot) of this thread: the accumulator in ``slot`` (at row ``m0 + m``,
        column ``n0 + n`` of the canonical output) injected as the dot's value and the root
        stored; then the kernel ends."""
        kb, b, spec, g = self.kb, self.b, self.spec, self.spec.geometry

        def point(mm, nn, slot):
            m, n = b.add(self.m0, mm), b.add(self.n0, nn)
            return (bounds(kb, (m, g.M, BM), (n, g.N, BN)),
                    lambda: [*self.bidx, *kb.delinearize(m, g.m_dims), *kb.delinearize(n, g.n_dims)], slot)
        store_epilogue(kb, self.fe, spec.dot, spec.root, spec.acc_type, self.out_ptr,
                       [point(mm, nn, slot) for mm, nn, slot in points])
        return self.kernel.finish()


def emit_tiled_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    e = DotKernelEmission(target, spec)
    kb, b = e.kb, e.b
    tx, ty = e.tx, e.ty

    def stage(step, a_tile, a_offset, b_tile, b_offset):
        e.stage_tiles(step, spec.acc_type, a_tile, a_offset, b_tile, b_offset)
    slots = emit_tiled_mainloop(target, kb, e.module, e.fe, spec.acc_type, -(-spec.geometry.K // BK), tx, ty, stage)

    # epilogue: the accumulator is the dot's value at this thread's outputs
    return e.epilogue([(b.add(ty, kb.index(TY * i)), b.add(tx, kb.index(TX * j)), slots[i][j])
                       for i in range(RM) for j in range(RN)])
