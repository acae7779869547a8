"""The convolution emitter: a fusion whose root is a ``convolution`` or elementwise over one (a
bias/activation epilogue), as an implicit GEMM on the tiled GEMM of ``tiles.py``.

XLA sends convolutions to cuDNN; we view one as a matrix product and reuse the tiled GEMM:

- M = output batch × output spatial positions (row-major over (batch, spatial dims in
  ``dim_labels`` order)), N = output features of one group, K = window positions × input
  features of one group (the feature fastest). Groups: Z = batch_group_count ×
  feature_group_count, one grid z slice each; output feature ``o = z * N + n`` (so batch group
  ``y = z / fgc``, feature group ``g = z % fgc``, as in the elemental convolution).
- lhs element (m, k) is the input element the window reads, computed while staging the K tile
  into shared memory: input batch ``y * out_batch + b``, feature ``g * I + c``, spatial
  ``(o_s * stride + k_s * rhs_dilation - pad_low) / lhs_dilation`` where that is a real element
  (zero in padding, base-dilation holes and out of bounds); rhs element (k, n) is the kernel at
  (output feature ``o``, input feature ``c``, window position, reversed where
  ``window_reversal``). Operands are read through the ``FusedEmitter`` at their real indices,
  so every ``dim_labels`` order, layout and fused prologue works.
- Same tiles as the dot emitter: 64 × 64 block tile, BK = 16, 256 threads (16 × 16), 4 × 4
  register tile per thread, shared tiles in the accumulation type; grid (ceil(N / 64),
  ceil(M / 64), Z). Epilogue: the accumulator is injected as the convolution's value
  (``FusedEmitter.inject``) and the root is computed and stored.

Accumulation as the elemental convolution (f32 for f16/bf16/f32, f64 for f64, integers in the
result type). Refused (loop emitter, elemental convolution): complex and pred element types,
tiny convolutions (Z·M·N·K < 4096), fewer than 8 output features per group or output rows
(depthwise convolutions: a 64-wide N tile would be mostly idle), grids beyond 65535 in y or z.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ....hlo import HloInstruction
from ....indexing import affine as A
from ....indexing.indexing_map import IndexingMap
from ....gpu.device_info import DeviceInfo
from ...analysis.fusion_analysis import FusionAnalysis, conv_hero
from ...kernel import KernelSpec, open_kernel
from ...llvm_types import compute_type
from ...target import Target
from ...model.thread_maps import expr_delinearize, work_item_map
from .tiles import (BK, BM, BN, MAX_GRID_YZ, MIN_MN, MIN_WORK, NUM_THREADS, RM, RN, TX, TY, bounds,
                    tiled_mainloop, gemm_hero, gemm_plan, gemm_refusal, load_or_zero, output_element,
                    staged_element, staging_slots, store_epilogue)


@dataclass(frozen=True)
class WindowAxis:
    size: int
    stride: int
    pad_low: int
    base_dilation: int
    window_dilation: int
    reversed: bool
    in_size: int       # input spatial size
    out_size: int      # output spatial size


@dataclass(frozen=True)
class ConvGeometry:
    out_batch: int
    axes: tuple[WindowAxis, ...]
    in_features: int             # input features per group (the kernel's input feature dim)
    features_per_group: int      # output features per group (N)
    feature_groups: int
    batch_groups: int
    dn: object                   # ConvolutionDimensionNumbers

    @staticmethod
    def of(conv: HloInstruction) -> "ConvGeometry":
        dn = conv.convolution_dimension_numbers
        lhs, rhs = (o.shape for o in conv.operands)
        window = conv.attr("window", ())
        fgc, bgc = int(conv.attr("feature_group_count", 1)), int(conv.attr("batch_group_count", 1))
        axes = []
        for s in range(len(dn.input_spatial_dimensions)):
            w = window[s] if window else None
            size = w.size if w else rhs.dimensions[dn.kernel_spatial_dimensions[s]]
            axes.append(WindowAxis(size, w.stride if w else 1, w.padding_low if w else 0,
                                   w.base_dilation if w else 1, w.window_dilation if w else 1,
                                   bool(w is not None and w.window_reversal),
                                   lhs.dimensions[dn.input_spatial_dimensions[s]],
                                   conv.shape.dimensions[dn.output_spatial_dimensions[s]]))
        out_feat = conv.shape.dimensions[dn.output_feature_dimension]
        return ConvGeometry(conv.shape.dimensions[dn.output_batch_dimension], tuple(axes),
                            rhs.dimensions[dn.kernel_input_feature_dimension], out_feat // (fgc * bgc),
                            fgc, bgc, dn)

    @property
    def m_dims(self) -> tuple[int, ...]:
        return (self.out_batch, *(a.out_size for a in self.axes))

    @property
    def k_dims(self) -> tuple[int, ...]:
        return (*(a.size for a in self.axes), self.in_features)

    @property
    def M(self) -> int:
        return math.prod(self.m_dims)

    @property
    def N(self) -> int:
        return self.features_per_group

    @property
    def K(self) -> int:
        return math.prod(self.k_dims)

    @property
    def Z(self) -> int:
        return self.feature_groups * self.batch_groups


@dataclass(frozen=True, kw_only=True)
class ConvKernelSpec(KernelSpec):
    conv: HloInstruction
    root: HloInstruction
    geometry: ConvGeometry
    acc_type: str
    static_shared_bytes: int

    # ---- thread -> data maps ----------------------------------------------------------------
    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[i, j] -> output index``: GEMM output ``(m0 + ty + 16 i, n0 + tx +
        16 j)`` of group ``bl_z``, as (batch, output spatial) and output feature ``z·N + n``."""
        g, dn = self.geometry, self.geometry.dn
        m, n, ranges = output_element()
        bb, *osp = expr_delinearize(m, g.m_dims)
        index: list = [None] * self.conv.shape.rank
        index[dn.output_batch_dimension] = bb
        index[dn.output_feature_dimension] = A.add(A.mul(A.dim(5), g.N), n)
        for s, d in enumerate(dn.output_spatial_dimensions):
            index[d] = osp[s]
        return work_item_map(index, self.launch, ranges, [(m, 0, g.M - 1), (n, 0, g.N - 1)])

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[k step, s] -> index`` of the input (operand 0, default) or the
        kernel that the thread stages into shared memory: element ``tid + 256 s`` of the
        block's BM x BK (k fastest) or BK x BN (n fastest) tile, the input only where the
        window reads a real element (not padding or a base-dilation hole). An input element
        is read by every window that covers it, a kernel element by every block row."""
        g, dn = self.geometry, self.geometry.dn
        lhs = operand in (None, 0)
        free, k, ranges = staged_element(lhs, g.K)
        *ks, c = expr_delinearize(k, g.k_dims)
        cons = [(free, 0, (g.M if lhs else g.N) - 1), (k, 0, g.K - 1)]
        shape = self.conv.operands[0 if lhs else 1].shape
        index: list = [None] * shape.rank
        if lhs:
            bb, *osp = expr_delinearize(free, g.m_dims)
            for s, a in enumerate(g.axes):
                q = A.add(A.add(A.mul(osp[s], a.stride), A.mul(ks[s], a.window_dilation)), -a.pad_low)
                cons += [(q, 0, (a.in_size - 1) * a.base_dilation)]
                if a.base_dilation > 1:
                    cons.append((A.mod(q, a.base_dilation), 0, 0))
                index[dn.input_spatial_dimensions[s]] = A.floordiv(q, a.base_dilation)
            y, grp = A.floordiv(A.dim(5), g.feature_groups), A.mod(A.dim(5), g.feature_groups)
            index[dn.input_batch_dimension] = A.add(A.mul(y, g.out_batch), bb)
            index[dn.input_feature_dimension] = A.add(A.mul(grp, g.in_features), c)
        else:
            for s, a in enumerate(g.axes):
                index[dn.kernel_spatial_dimensions[s]] = A.add(a.size - 1, A.mul(ks[s], -1)) if a.reversed else ks[s]
            index[dn.kernel_input_feature_dimension] = c
            index[dn.kernel_output_feature_dimension] = A.add(A.mul(A.dim(5), g.N), free)
        return work_item_map(index, self.launch, ranges, cons)

    def report_lines(self) -> list[str]:
        g = self.geometry
        return [f"convolution %{self.conv.name} as implicit GEMM: groups Z={g.Z} (batch {g.batch_groups} x "
                f"feature {g.feature_groups}) M={g.M} (batch x spatial {list(g.m_dims)}) N={g.N} "
                f"K={g.K} (window x input features {list(g.k_dims)}), accumulation {self.acc_type}, "
                f"epilogue root %{self.root.name}",
                f"tile {BM}x{BN}x{BK} ({NUM_THREADS} threads as {TX}x{TY}, {RM}x{RN} outputs per thread), "
                "tiled path (no tensor cores)",
                f"shared tiles {BK}x{BM} + {BK}x{BN}: {self.static_shared_bytes} B static, "
                f"index type {self.index_type}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        g = self.geometry
        return {"tile": [BM, BN, BK], "threads_per_block": NUM_THREADS, "register_tile": [RM, RN],
                "accumulation_type": self.acc_type, "path": "implicit-gemm",
                "gemm": {"groups": g.Z, "M": g.M, "N": g.N, "K": g.K},
                "static_shared_bytes": self.static_shared_bytes, "index_type": str(self.index_type)}


def plan_conv_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                     kernel_name: str) -> ConvKernelSpec:
    """The implicit-GEMM plan for ``fusion``; ``Declined`` with the reason where it does not fit."""
    conv = gemm_hero(fusion, analysis.roots, conv_hero, _refusal)
    g = ConvGeometry.of(conv)
    return ConvKernelSpec(conv=conv, geometry=g,
                          **gemm_plan(fusion, kernel_name, conv, analysis.roots[0], g.M, g.N, g.Z))


def _refusal(fusion: HloInstruction, conv: HloInstruction | None) -> str | None:
    why = gemm_refusal(fusion, conv, "convolution")
    if why is not None:
        return why
    g = ConvGeometry.of(conv)
    work = g.Z * g.M * g.N * g.K
    if work < MIN_WORK:
        return f"tiny convolution (groups*M*N*K = {work} < {MIN_WORK})"
    if g.N < MIN_MN or g.M < MIN_MN:
        return f"too narrow for tiles (M={g.M}, output features per group N={g.N}; tiles need both >= {MIN_MN})"
    if -(-g.M // BM) > MAX_GRID_YZ or g.Z > MAX_GRID_YZ:
        return f"grid too large (M tiles {-(-g.M // BM)}, groups {g.Z})"
    return None


# ---- emission ------------------------------------------------------------------------------------

def emit_conv_kernel(target: Target, spec: ConvKernelSpec) -> ir.Module:
    g = spec.geometry
    dn = g.dn
    conv = spec.conv
    lhs, rhs = conv.operands
    acc_et = spec.acc_type
    kernel = open_kernel(target, spec, inline=True)
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    out_ptr = kernel.outputs[0]
    I = kb.index
    tx, ty = kb.thread_id(0), kb.thread_id(1)
    tid = b.add(tx, b.mul(ty, I(TX)))
    m0 = b.mul(kb.block_id(1), I(BM))
    n0 = b.mul(kb.block_id(0), I(BN))
    z = kb.block_id(2)
    o0 = b.mul(z, I(g.N))                     # first output feature of this group
    if g.Z == 1:
        in_batch0, in_feat0 = I(0), I(0)
    else:
        y, grp = b.udiv(z, I(g.feature_groups)), b.urem(z, I(g.feature_groups))
        in_batch0 = b.mul(y, I(g.out_batch))  # batch groups: this group's slice of the input batch
        in_feat0 = b.mul(grp, I(g.in_features))
    tt = compute_type(acc_et)
    zero = ir.Constant(tt, 0)

    def lhs_rows(m) -> tuple[ir.Value, list]:
        """What the input index of GEMM row ``m`` takes from it, computed before the K loop:
        the input batch, per spatial axis ``o_s * stride - pad_low``."""
        bb, *osp = kb.delinearize(m, g.m_dims)
        starts = []
        for s, a in enumerate(g.axes):
            q = b.mul(osp[s], I(a.stride))
            starts.append(b.sub(q, I(a.pad_low)) if a.pad_low else q)
        return (b.add(in_batch0, bb) if g.batch_groups > 1 else bb), starts

    def lhs_element(row, ks, c) -> tuple[list, list]:
        """(index, conditions) of the input element at GEMM row ``row`` (``lhs_rows``) and
        k = (window position ``ks``, input feature ``c``)."""
        batch, starts = row
        index: list = [None] * lhs.shape.rank
        conds: list = []
        for s, a in enumerate(g.axes):
            q = b.add(starts[s], b.mul(ks[s], I(a.window_dilation)))
            if a.pad_low > 0:
                conds.append(b.icmp_signed(">=", q, I(0)))
            if a.base_dilation > 1:
                conds.append(b.icmp_signed("==", b.srem(q, I(a.base_dilation)), I(0)))
                q = b.sdiv(q, I(a.base_dilation))
            hi = ((a.out_size - 1) * a.stride + (a.size - 1) * a.window_dilation - a.pad_low) // a.base_dilation
            if hi >= a.in_size:
                conds.append(b.icmp_signed("<", q, I(a.in_size)))
            index[dn.input_spatial_dimensions[s]] = q
        index[dn.input_batch_dimension] = batch
        index[dn.input_feature_dimension] = b.add(in_feat0, c) if g.feature_groups > 1 else c
        return index, conds

    def rhs_element(ks, c, o) -> list:
        index: list = [None] * rhs.shape.rank
        for s, a in enumerate(g.axes):
            index[dn.kernel_spatial_dimensions[s]] = b.sub(I(a.size - 1), ks[s]) if a.reversed else ks[s]
        index[dn.kernel_input_feature_dimension] = c
        index[dn.kernel_output_feature_dimension] = o
        return index

    def prepare(a_tile, b_tile):
        # per slot, what stays from K step to K step: the tile place, the GEMM row's input
        # batch and window origin (lhs), the output feature (rhs), the bounds of both
        lhs_slots = [(sl, lhs_rows(sl.free)) for sl in staging_slots(kb, tid, True, m0, g.M, a_tile, tt)]
        rhs_slots = [(sl, b.add(o0, sl.free) if g.Z > 1 else sl.free)
                     for sl in staging_slots(kb, tid, False, n0, g.N, b_tile, tt)]

        def stage(step):
            k0 = b.mul(step, I(BK))
            window: dict = {}

            def k_of(kk):
                # the slots that share their k in the tile (all lhs slots) share its decomposition
                if id(kk) not in window:
                    k = b.add(k0, kk)
                    window[id(kk)] = (bounds(kb, (k, g.K, BK)), kb.delinearize(k, g.k_dims))
                return window[id(kk)]
            for sl, row in lhs_slots:
                k_conds, (*ks, c) = k_of(sl.kk)
                index, window_conds = lhs_element(row, ks, c)
                b.store(load_or_zero(kb, fe, lhs, index, sl.free_conds + k_conds + window_conds, acc_et, zero), sl.ptr)
            for sl, o in rhs_slots:
                k_conds, (*ks, c) = k_of(sl.kk)
                b.store(load_or_zero(kb, fe, rhs, rhs_element(ks, c, o), sl.free_conds + k_conds, acc_et, zero), sl.ptr)
        return stage

    acc = tiled_mainloop(target, kb, kernel.module, fe, acc_et, -(-g.K // BK), tx, ty, prepare)

    def point(i, j):
        m, n = b.add(m0, b.add(ty, I(TY * i))), b.add(n0, b.add(tx, I(TX * j)))
        conds = bounds(kb, (m, g.M, BM), (n, g.N, BN))

        def index_fn():
            bb, *osp = kb.delinearize(m, g.m_dims)
            index: list = [None] * conv.shape.rank
            index[dn.output_batch_dimension] = bb
            index[dn.output_feature_dimension] = b.add(o0, n) if g.Z > 1 else n
            for s, d in enumerate(dn.output_spatial_dimensions):
                index[d] = osp[s]
            return index
        return conds, index_fn, acc[i][j]

    store_epilogue(kb, fe, conv, spec.root, acc_et, out_ptr, [point(i, j) for i in range(RM) for j in range(RN)])
    return kernel.finish()
