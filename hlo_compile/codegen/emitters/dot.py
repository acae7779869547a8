"""The tiled dot emitter: a fusion whose root is a ``dot`` or elementwise over one (an epilogue).

XLA sends such fusions to cuBLAS or Triton; we emit a classic shared-memory tiled matmul:

- Canonical view of ``dot_general``: B (batch dims) × M (lhs free dims, flattened) × N (rhs
  free dims, flattened) × K (contracting dims, flattened, paired lhs/rhs in their listed
  order). The output index of (b, m, n) is (batch dims, lhs free dims, rhs free dims), dot's
  output order; operands are read through the ``FusedEmitter`` at their real indices, so
  layouts and fused prologues (converts, transposes, broadcasts...) just work.
- Block tile BM × BN = 64 × 64, K steps of BK = 16; 256 threads (16 × 16) per block; grid
  (ceil(N / BN), ceil(M / BM), B).
- Each K step: the block's threads load the lhs BM × BK tile and the rhs BK × BN tile into
  shared memory (converted to the accumulation type; zero outside the bounds), ``barrier``,
  each thread accumulates its 4 × 4 register tile (rows ty + 16 i, columns tx + 16 j) from
  shared memory (``fma`` for floats), ``barrier``.
- Epilogue: the accumulator (converted to the dot's type) is injected as the dot's value
  (``FusedEmitter.inject``) and the root is computed and stored at its physical offset.

Accumulation follows the elemental dot: f32 for f16/bf16/f32 results, f64 for f64, integers
in the result type. Refused (loop emitter instead): complex and pred element types, tiny dots
(B·M·N·K < 4096) and vector products (M < 8 or N < 8), grids beyond 65535 in y or z.

Tensor cores (``dot_mma.py``): the spec carries both paths and ``emit(target)`` chooses. The
warp-level ``mma.sync.m16n8k16`` path (same grid, block, block tile and epilogue) is taken when
``target.has_tensor_cores()`` (a GPU of sm_80 or newer, and ``CompileOptions.dot_tensor_cores``,
which the pipeline and the cuda runtime give the GPU target they create) and both operands are
f16 or both bf16 with f32 accumulation. Everything else, the host target included, emits the
tiled path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ..elemental_contraction import _acc_type
from ..elemental_convert import emit_convert
from ..fused_emitter import FusedEmitter, to_storage
from ..fusion_analysis import dot_hero
from ..kernel_builder import KernelBuilder
from ..llvm_types import compute_type, storage_type
from ..partitioner import PartitionedComputation, partition
from ..target import KernelParam, LaunchDims, Target
from .loop import fall_back_to_loop, fusion_params, kernel_index_type, output_leaves

BM, BN, BK = 64, 64, 16
TX, TY = 16, 16
NUM_THREADS = TX * TY
RM, RN = BM // TY, BN // TX        # register tile per thread (4 x 4)
MIN_WORK = 4096                    # B*M*N*K below this: loop emitter
MIN_MN = 8                         # M or N below this (matrix-vector): loop emitter
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class DotGeometry:
    batch: tuple[int, ...]       # sizes of the batch dims (output order)
    m_dims: tuple[int, ...]      # lhs free dim sizes
    n_dims: tuple[int, ...]      # rhs free dim sizes
    k_dims: tuple[int, ...]      # contracting dim sizes
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    lhs_free: tuple[int, ...]
    rhs_free: tuple[int, ...]

    @staticmethod
    def of(dot: HloInstruction) -> "DotGeometry":
        dn = dot.dot_dimension_numbers
        lhs, rhs = (o.shape for o in dot.operands)
        lb, rb = tuple(dn.lhs_batch_dimensions), tuple(dn.rhs_batch_dimensions)
        lc, rc = tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)
        lf = tuple(i for i in range(lhs.rank) if i not in lb + lc)
        rf = tuple(i for i in range(rhs.rank) if i not in rb + rc)
        return DotGeometry(tuple(lhs.dimensions[d] for d in lb), tuple(lhs.dimensions[d] for d in lf),
                           tuple(rhs.dimensions[d] for d in rf), tuple(lhs.dimensions[d] for d in lc),
                           lb, rb, lc, rc, lf, rf)

    @property
    def B(self) -> int:
        return math.prod(self.batch)

    @property
    def M(self) -> int:
        return math.prod(self.m_dims)

    @property
    def N(self) -> int:
        return math.prod(self.n_dims)

    @property
    def K(self) -> int:
        return math.prod(self.k_dims)


@dataclass(frozen=True)
class DotKernelSpec:
    kernel_name: str
    fusion: HloInstruction
    partitioned: PartitionedComputation
    dot: HloInstruction
    root: HloInstruction
    geometry: DotGeometry
    acc_type: str
    launch: LaunchDims
    index_type: ir.IntType
    static_shared_bytes: int
    # which path the last ``emit`` took ("tiled" or "mma"), for the report and summary.json
    emitted: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def params(self) -> list[KernelParam]:
        return fusion_params(self.fusion)

    def emit(self, target: Target) -> ir.Module:
        return emit_dot_kernel(target, self)

    @property
    def tensor_core_refusal(self) -> str | None:
        """Why this dot cannot take the tensor-core path on any target (None: it can)."""
        from .dot_mma import tensor_core_refusal
        return tensor_core_refusal(self)

    @property
    def path(self) -> str:
        """"mma" or "tiled": what the last ``emit`` produced (tiled before any)."""
        return self.emitted.get("path", "tiled")

    def report_lines(self) -> list[str]:
        from .dot_mma import mma_report_line, mma_shared_line
        g = self.geometry
        shared = (mma_shared_line(self) if self.path == "mma" else
                  f"shared tiles {BK}x{BM} + {BK}x{BN}: {self.static_shared_bytes} B static, "
                  f"index type {self.index_type}")
        return [f"dot %{self.dot.name}: B={g.B} M={g.M} N={g.N} K={g.K}, accumulation {self.acc_type}, "
                f"epilogue root %{self.root.name}",
                f"tile {BM}x{BN}x{BK} ({NUM_THREADS} threads as {TX}x{TY}, {RM}x{RN} outputs per thread), "
                + (f"{self.path} path" if "path" in self.emitted or self.tensor_core_refusal
                   else "tiled path, or mma if the target enables tensor cores (chosen when emitted)"),
                mma_report_line(self),
                shared,
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        from .dot_mma import MMA_SHARED_BYTES
        shared = MMA_SHARED_BYTES if self.path == "mma" else self.static_shared_bytes
        return {"tile": [BM, BN, BK], "threads_per_block": NUM_THREADS, "register_tile": [RM, RN],
                "accumulation_type": self.acc_type, "path": self.path,
                "tensor_cores": self.tensor_core_refusal or "eligible",
                "static_shared_bytes": shared, "index_type": str(self.index_type)}


def plan_dot_kernel(fusion: HloInstruction, analysis, device, kernel_name: str):
    """The tiled dot plan for ``fusion``, or the loop emitter's plan with the reason."""
    roots = analysis.roots
    dot = dot_hero(roots)
    why = _refusal(fusion, dot)
    if why is not None:
        return fall_back_to_loop(fusion, analysis, device, kernel_name, "dot", why)
    g = DotGeometry.of(dot)
    acc = _acc_type(dot.shape.element_type)
    launch, shared = tiled_gemm_launch(g.M, g.N, g.B, acc)
    return DotKernelSpec(kernel_name, fusion, partition(fusion.fused_computation), dot, roots[0], g, acc, launch,
                         kernel_index_type(fusion, launch), shared)


def tiled_gemm_launch(m: int, n: int, z: int, acc: str) -> tuple[LaunchDims, int]:
    """Launch dims of the tiled GEMM over an M×N output (z independent problems) and its
    static shared bytes (one BM×BK and one BK×BN tile in the accumulation type)."""
    launch = LaunchDims((-(-n // BN), -(-m // BM), z), (TX, TY, 1), 0)
    elt = _bytes(acc)
    return launch, (-(-BK * BM * elt // 16) + -(-BK * BN * elt // 16)) * 16


def _bytes(et: str) -> int:
    from ..fusion_analysis import bits_of
    return max(1, bits_of(et) // 8)


def gemm_refusal(fusion: HloInstruction, hero: HloInstruction | None, what: str) -> str | None:
    """Why the tiled GEMM cannot take ``fusion`` around ``hero`` (a dot or convolution) on
    element types and outputs alone, or None."""
    if hero is None:
        return f"no single {what} hero reachable through elementwise ops"
    types = [hero.shape.element_type] + [o.shape.element_type for o in hero.operands]
    for t in types:
        if t.startswith("c") or t == "pred" or not t.startswith(("s", "u", "f", "bf")):
            return f"{t} elements"
    leaves = output_leaves(fusion)
    if len(leaves) != 1 or leaves[0][0].shape.is_tuple:
        return "more than one output"
    return None


def _refusal(fusion: HloInstruction, dot: HloInstruction | None) -> str | None:
    why = gemm_refusal(fusion, dot, "dot")
    if why is not None:
        return why
    g = DotGeometry.of(dot)
    if g.B * g.M * g.N * g.K < MIN_WORK:
        return f"tiny dot (B*M*N*K = {g.B * g.M * g.N * g.K} < {MIN_WORK})"
    if g.M < MIN_MN or g.N < MIN_MN:
        return f"vector product (M={g.M}, N={g.N}; tiles need both >= {MIN_MN})"
    if -(-g.M // BM) > MAX_GRID_YZ or g.B > MAX_GRID_YZ:
        return f"grid too large (M tiles {-(-g.M // BM)}, batch {g.B})"
    return None


# ---- emission ------------------------------------------------------------------------------------

def _delinearize(kb: KernelBuilder, v: ir.Value, sizes: Sequence[int]) -> list[ir.Value]:
    """Row-major coordinates of linear ``v`` in ``sizes``."""
    b = kb.b
    out: list = []
    for k in range(len(sizes) - 1, -1, -1):
        if k == 0:
            out.append(v)
        else:
            out.append(b.urem(v, kb.index(sizes[k])))
            v = b.udiv(v, kb.index(sizes[k]))
    return out[::-1]


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
        self.module = target.new_module(spec.kernel_name)
        kf = target.begin_kernel(self.module, spec.kernel_name, spec.params)
        self.kb = kb = KernelBuilder(kf.builder, target, spec.index_type)
        self.b = b = kb.b
        g = spec.geometry
        n_in = len(spec.fusion.fused_computation.parameters)
        self.fe = FusedEmitter(target, self.module, spec.kernel_name, spec.partitioned, spec.index_type, inline=True)
        self.fe.bind(kb, kf.args[:n_in])
        self.out_ptr = kf.args[n_in]
        tx, ty = kb.thread_id(0), kb.thread_id(1)
        self.tx, self.ty = tx, ty
        self.tid = b.add(tx, b.mul(ty, kb.index(TX)))
        self.m0 = b.mul(kb.block_id(1), kb.index(BM))
        self.n0 = b.mul(kb.block_id(0), kb.index(BN))
        self.bidx = _delinearize(kb, kb.block_id(2), g.batch) if g.batch else []

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
        # lhs tile: BM x BK, k fastest among consecutive threads
        for s in range(BM * BK // NUM_THREADS):
            lin = b.add(tid, kb.index(s * NUM_THREADS))
            kk, mm = b.urem(lin, kb.index(BK)), b.udiv(lin, kb.index(BK))
            m, k = b.add(m0, mm), b.add(k0, kk)
            conds = ([b.icmp_unsigned("<", m, kb.index(g.M))] if g.M % BM else []) + \
                    ([b.icmp_unsigned("<", k, kb.index(g.K))] if g.K % BK else [])
            index = _operand_index(lhs.shape.rank, g.lhs_batch, g.lhs_contract, g.lhs_free, bidx,
                                   _delinearize(kb, k, g.k_dims), _delinearize(kb, m, g.m_dims))
            store(a_tile, a_offset(mm, kk), self._load(lhs, index, conds, tile_et, zero))
        # rhs tile: BK x BN, n fastest
        for s in range(BN * BK // NUM_THREADS):
            lin = b.add(tid, kb.index(s * NUM_THREADS))
            nn, kk = b.urem(lin, kb.index(BN)), b.udiv(lin, kb.index(BN))
            n, k = b.add(n0, nn), b.add(k0, kk)
            conds = ([b.icmp_unsigned("<", n, kb.index(g.N))] if g.N % BN else []) + \
                    ([b.icmp_unsigned("<", k, kb.index(g.K))] if g.K % BK else [])
            index = _operand_index(rhs.shape.rank, g.rhs_batch, g.rhs_contract, g.rhs_free, bidx,
                                   _delinearize(kb, k, g.k_dims), _delinearize(kb, n, g.n_dims))
            store(b_tile, b_offset(kk, nn), self._load(rhs, index, conds, tile_et, zero))

    def epilogue(self, points: Sequence[tuple[ir.Value, ir.Value, ir.Value]]) -> ir.Module:
        """Each (m, n, slot) of this thread: the accumulator in ``slot`` (at row ``m0 + m``,
        column ``n0 + n`` of the canonical output) injected as the dot's value and the root
        stored; then the kernel ends."""
        kb, b, spec, g = self.kb, self.b, self.spec, self.spec.geometry

        def point(mm, nn, slot):
            m, n = b.add(self.m0, mm), b.add(self.n0, nn)
            conds = ([b.icmp_unsigned("<", m, kb.index(g.M))] if g.M % BM else []) + \
                    ([b.icmp_unsigned("<", n, kb.index(g.N))] if g.N % BN else [])
            return conds, lambda: [*self.bidx, *_delinearize(kb, m, g.m_dims), *_delinearize(kb, n, g.n_dims)], slot
        store_epilogue(kb, self.fe, spec.dot, spec.root, spec.acc_type, self.out_ptr,
                       [point(mm, nn, slot) for mm, nn, slot in points])
        self.target.end_kernel(b)
        return self.module


# ---- pieces shared with other tiled-GEMM emitters (``conv.py``) ------------------------------------

def load_or_zero(kb: KernelBuilder, fe: FusedEmitter, operand: HloInstruction, index: list, conds: list,
                 tile_et: str, zero: ir.Value) -> ir.Value:
    """``operand`` at ``index`` converted to ``tile_et`` where every condition holds, else
    ``zero`` (a real branch: the read may be out of bounds otherwise)."""
    b = kb.b
    et = operand.shape.element_type

    def read():
        return emit_convert(b, fe.value(operand, index), et, tile_et)
    if not conds:
        with fe.scope():
            return read()
    return fe.branch(kb.all_of(conds), read, lambda: zero)


def store_epilogue(kb: KernelBuilder, fe: FusedEmitter, hero: HloInstruction, root: HloInstruction, acc_et: str,
                   out_ptr: ir.Value, points) -> None:
    """Each (conds, index_fn, slot) of ``points``: where all ``conds`` hold, the accumulator in
    ``slot`` (converted to the hero's type) is injected as ``hero``'s value at ``index_fn()``
    (the hero's output index, built inside the guarded block) and the fusion's ``root`` is
    computed there and stored at its physical offset in ``out_ptr``."""
    b = kb.b
    current: dict = {}

    def hero_value(index: Sequence[ir.Value]) -> ir.Value:
        idx, v = current["point"]
        if len(idx) != len(index) or any(x is not y for x, y in zip(idx, index)):
            raise AssertionError(f"tiled GEMM epilogue: %{hero.name} read at an index other than its output's")
        return v

    fe.inject(hero, hero_value)
    et = root.shape.element_type
    for conds, index_fn, slot in points:
        ctx = kb.if_(kb.all_of(conds)) if conds else None
        if ctx is not None:
            ctx.__enter__()
        with fe.scope():
            index = index_fn()
            v = emit_convert(b, b.load(slot), acc_et, hero.shape.element_type)
            current["point"] = (index, v)
            r = fe.root_value(root, index)
            dst = b.gep(out_ptr, [fe.offset(root.shape, index)], inbounds=True, source_etype=storage_type(et))
            b.store(to_storage(b, r, et), dst)
        if ctx is not None:
            ctx.__exit__(None, None, None)


def emit_tiled_mainloop(target: Target, kb: KernelBuilder, module: ir.Module, fe: FusedEmitter, acc_et: str,
                        k_steps: int, tx: ir.Value, ty: ir.Value, stage) -> list[list[ir.Value]]:
    """The tiled GEMM main loop: ``k_steps`` steps, each ``stage(step, a_tile, a_offset,
    b_tile, b_offset)`` filling the shared BM x BK lhs and BK x BN rhs tiles (in ``acc_et``;
    element (mm, kk) at ``a_offset(mm, kk)``, (kk, nn) at ``b_offset(kk, nn)``), a barrier,
    each thread's RM x RN register tile (rows ty + TY i, columns tx + TX j) accumulated, a
    barrier. Returns the accumulator slots [i][j]."""
    b = kb.b
    at = compute_type(acc_et)
    is_float = acc_et.startswith(("f", "bf"))
    zero = ir.Constant(at, 0)
    a_tile = target.shared_array(b, "lhs_tile", at, BK * BM)
    b_tile = target.shared_array(b, "rhs_tile", at, BK * BN)

    with b.goto_entry_block():
        slots = [[b.alloca(at, name=f"acc{i}_{j}") for j in range(RN)] for i in range(RM)]
    for row in slots:
        for s in row:
            b.store(zero, s)

    fma = module.declare_intrinsic("llvm.fma", [at], ir.FunctionType(at, [at, at, at])) if is_float else None

    with kb.loop(0, k_steps, name="kstep") as step:
        with fe.scope():
            # lhs stored k-major [BK][BM], rhs [BK][BN]
            stage(step, a_tile, lambda mm, kk: b.add(b.mul(kk, kb.index(BM)), mm),
                  b_tile, lambda kk, nn: b.add(b.mul(kk, kb.index(BN)), nn))
            target.barrier(b)
            acc = [[b.load(s) for s in row] for row in slots]
            for kk in range(BK):
                a_vals = [b.load(b.gep(a_tile, [b.add(ty, kb.index(kk * BM + TY * i))], inbounds=True,
                                       source_etype=at), typ=at) for i in range(RM)]
                b_vals = [b.load(b.gep(b_tile, [b.add(tx, kb.index(kk * BN + TX * j))], inbounds=True,
                                       source_etype=at), typ=at) for j in range(RN)]
                for i in range(RM):
                    for j in range(RN):
                        if is_float:
                            acc[i][j] = b.call(fma, [a_vals[i], b_vals[j], acc[i][j]])
                        else:
                            acc[i][j] = b.add(acc[i][j], b.mul(a_vals[i], b_vals[j]))
            for i in range(RM):
                for j in range(RN):
                    b.store(acc[i][j], slots[i][j])
            target.barrier(b)
    return slots


def emit_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    """The dot kernel for ``target``: the tensor-core path where ``use_tensor_cores`` says so
    (``target.has_tensor_cores()``, f16/bf16 operands), else the tiled path."""
    from .dot_mma import emit_mma_dot_kernel, use_tensor_cores
    if use_tensor_cores(target, spec):
        spec.emitted["path"] = "mma"
        return emit_mma_dot_kernel(target, spec)
    spec.emitted["path"] = "tiled"
    return emit_tiled_dot_kernel(target, spec)


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
