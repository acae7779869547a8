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

Tensor cores (``dot_mma.py``): the spec carries both paths and ``emit_dot_kernel`` picks the
first of ``PATHS`` the target takes. The
warp-level ``mma.sync.m16n8k16`` path (same grid, block, block tile and epilogue) is taken when
``target.has_tensor_cores()`` (a GPU of sm_80 or newer, and ``CompileOptions.dot_tensor_cores``,
which the pipeline and the cuda runtime give the GPU target they create) and both operands are
f16 or both bf16 with f32 accumulation. Everything else emits the tiled path.

With a Triton config tiling the tensor-core path keeps the config's launch, shared memory and
staging (``dot_mma.emit_config_mma_dot_kernel``): a warp layout per config
(``mma_layout.config_warp_layout``), fragments read from the staged tiles with ``ld.shared``;
taken on sm_80+ with ``dot_tensor_cores`` and on the host, which emulates the warp MMA
(``dot_mma.EmulatedMma``), so host runs check the kernel the GPU runs with tensor cores. Tiles
without a warp layout (block_m < 16, block_k not a multiple of 16, more warps than 16 x 8 tiles)
keep the FMA path; the fusion report says why.

Epilogue stores with a config tiling (as XLA's Triton kernels store their tiles): where the
root's physically minor dim is the dot's last N dim (``dot_config.contiguous_output``), each
thread of the FMA path owns groups of ``vn`` adjacent columns (``DotTiling.vn``,
``store_vector``: up to 16 bytes, the thread's share of the tile, dividing the tile and that
dim) and stores each as one vector after computing the epilogue's ops per element; where it is
the last M dim, groups of ``vm`` adjacent rows, threads M-fastest. The tensor-core path stores
each lane's accumulator pairs (adjacent columns) as 2-vectors where the N dim is contiguous
and even. Elsewhere scalar stores. One-stage f32 tilings keep both operand tiles in the larger
one's bytes (``dot_staging.tile_reuse``), as XLA's tf32 kernels' shared memory does.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ....hlo import HloInstruction
from ....gpu.device_info import DeviceInfo
from ...analysis.fusion_analysis import FusionAnalysis, dot_hero
from ...analysis.hero_search import dot_epilogue_chain
from ...kernel import Declined, kernel_index_type
from ...llvm_types import storage_bytes
from ...target import Target
from .dot_config import DotTiling, contiguous_output, dot_tiling, store_vector
from .dot_mma import emit_mma_dot_kernel, use_tensor_cores
from .dot_spec import DotGeometry, DotKernelSpec, DotPath
from .dot_staging import operand_staging, stage_shared_bytes, tile_reuse
from .dot_tiled import emit_tiled_dot_kernel
from .tiles import BM, MAX_GRID_YZ, MIN_MN, MIN_WORK, gemm_plan, gemm_refusal



@dataclass(frozen=True)
class Path:
    """One way to emit a dot kernel: whether ``target`` takes it for ``spec``, and the emitter."""

    takes: Callable[[Target, DotKernelSpec], bool]
    emit: Callable[[Target, DotKernelSpec], ir.Module]


def _every_target(target: Target, spec: DotKernelSpec) -> bool:
    return True


# the ways to emit a dot, the first one the target takes wins
PATHS: dict[DotPath, Path] = {
    DotPath.MMA: Path(use_tensor_cores, emit_mma_dot_kernel),
    DotPath.TILED: Path(_every_target, emit_tiled_dot_kernel),
}


def plan_dot_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                    kernel_name: str) -> DotKernelSpec:
    """The tiled dot plan for ``fusion``: the tiling of its Triton GEMM config where it has
    one (``dot_config.py``), else the fixed tiling; ``Declined`` with the reason where it does
    not fit."""
    root = analysis.roots[0]
    dot = dot_hero(analysis.roots)
    chain = dot_epilogue_chain(dot, root) if dot is not None else None
    tiling, staging = None, None
    if dot is not None and len(dot.operands) == 2:
        g = DotGeometry.of(dot)
        tiling = dot_tiling(fusion, dot, chain, g.m_dims, g.n_dims, len(g.batch))
        if tiling is not None:
            staging = (operand_staging(dot, True, tiling.bm, tiling.bk, g),
                       operand_staging(dot, False, tiling.bn, tiling.bk, g))
            # the stages that fit the device (XLA's configs fit Triton's figure, which may be
            # less than ours); a tile whose one stage does not fit: the fixed tiling
            stages = max(1, tiling.num_stages)
            while stages > 1 and stage_shared_bytes(*staging, stages) > device.shared_memory_per_block_optin:
                stages -= 1
            if stage_shared_bytes(*staging, stages) > device.shared_memory_per_block_optin:
                tiling, staging = None, None
            elif stages != tiling.num_stages:
                tiling = dataclasses.replace(tiling, num_stages=stages)
    columns, reuse = 1, None
    if tiling is not None and staging is not None:
        g = DotGeometry.of(dot)
        along, size = contiguous_output(dot, root, chain, len(g.batch), len(g.m_dims))
        nbytes = storage_bytes(root.shape.element_type)
        if along == "n":
            columns = size
            tiling = dataclasses.replace(tiling, vn=store_vector(size, tiling.bn, tiling.store_share, nbytes))
        elif along == "m":
            tiling = dataclasses.replace(tiling, vm=store_vector(size, tiling.bm, tiling.store_share, nbytes))
        reuse = tile_reuse(dot, tiling, *staging)
    why = _refusal(fusion, dot, tiling)
    if why is not None:
        raise Declined(why)
    g = DotGeometry.of(dot)
    fields = gemm_plan(fusion, kernel_name, dot, root, g.M, g.N, g.B)
    if tiling is not None and staging is not None:
        # XLA launches its Triton kernels with their tiles in dynamic shared memory
        shared = stage_shared_bytes(*staging, tiling.num_stages, reuse)
        launch = tiling.launch(g.B, g.M, g.N, shared)
        fields.update(launch=launch, index_type=kernel_index_type(fusion, launch), static_shared_bytes=0)
    return DotKernelSpec(dot=dot, geometry=g, tiling=tiling, epilogue_chain=tuple(chain) if chain else None,
                         staging=staging, store_columns=columns, tile_reuse=reuse, **fields)


def _refusal(fusion: HloInstruction, dot: HloInstruction | None, tiling: DotTiling | None) -> str | None:
    # pred operands are read as 0/1 in the accumulation type (XLA's Triton GEMMs take them)
    why = gemm_refusal(fusion, dot, "dot", operands_may_be_pred=True)
    if why is not None:
        return why
    g = DotGeometry.of(dot)
    if tiling is not None:
        launch = tiling.launch(g.B, g.M, g.N)
        if launch.grid[1] > MAX_GRID_YZ or launch.grid[2] > MAX_GRID_YZ or launch.grid[0] >= 2**31:
            return f"grid too large for the config tiling ({launch.grid})"
        return None
    if g.B * g.M * g.N * g.K < MIN_WORK:
        return f"tiny dot (B*M*N*K = {g.B * g.M * g.N * g.K} < {MIN_WORK})"
    if g.M < MIN_MN or g.N < MIN_MN:
        return f"vector product (M={g.M}, N={g.N}; tiles need both >= {MIN_MN})"
    if -(-g.M // BM) > MAX_GRID_YZ or g.B > MAX_GRID_YZ:
        return f"grid too large (M tiles {-(-g.M // BM)}, batch {g.B})"
    return None


def emit_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    """The dot kernel for ``target``: the first path of ``PATHS`` the target takes (the
    tensor-core path where ``use_tensor_cores`` says so, else the tiled path)."""
    kind, path = next((k, p) for k, p in PATHS.items() if p.takes(target, spec))
    spec.emitted["path"] = kind
    return path.emit(target, spec)
