"""Launch configuration of the loop emitter, and its thread -> output indexing map.

XLA's loop emitter (notes/xla.md §b.2; ``ComputeLoopFusionConfig``, ``CalculateLaunchDimensions``,
``GetDefaultWorkItemIndexingMap``) gives each thread ``unroll`` consecutive output elements in
the output's *physical* order, so neighbouring threads touch neighbouring memory and a thread's
elements can be loaded and stored as one vector. Unrolling pays off only when the fusion is big
enough to fill the GPU (otherwise it just lowers parallelism), and some ops make unrolled code
spill registers; 128 threads per block (4 warps, one per scheduler) keep blocks small so the
grid spreads over all SMs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.ir import HloInstruction
from hlo_compile.hlo.shape import Shape
from hlo_compile.indexing import affine as A
from hlo_compile.indexing.indexing_map import IndexingMap
from hlo_compile.indexing.simplifier import simplify

from ..gpu.device_info import DeviceInfo
from .analysis.emitter_kind import EmitterKind
from .analysis.fusion_analysis import FusionAnalysis, analyze_fusion, bits_of
from .target import LaunchDims
from .model.thread_maps import WORK_ITEM_DIM_NAMES
from ..indexing.memo import BoundedMemo

MAX_UNROLL_FACTOR = 4
WARP_SCHEDULERS = 4          # threads per block = warp size * schedulers = 128
MAX_CONCAT_OPERANDS_FOR_UNROLLING = 10
MAX_REDUCE_WINDOW_ELEMENTS_FOR_UNROLLING = 8
# the kinds Blackwell's wide-vector unrolling applies to (notes §b.2)
_WIDE_UNROLL_KINDS = frozenset({EmitterKind.LOOP, EmitterKind.TRANSPOSE, EmitterKind.CONCATENATE})


@dataclass(frozen=True)
class LoopConfig:
    unroll_factor: int
    launch: LaunchDims
    shape: Shape               # the shape whose elements the threads enumerate (first root's)

    @property
    def num_elements(self) -> int:
        return self.shape.element_count()


def loop_fusion_config(fusion_or_analysis: HloInstruction | FusionAnalysis, device: DeviceInfo, *,
                       shape: Shape | None = None, vector_bits: int = 128,
                       max_unroll_factor: int = 8) -> LoopConfig:
    """Unroll factor and launch dimensions of the loop emitter for a fusion.

    ``shape`` overrides the enumerated shape (default: the first root's, as XLA; the
    concatenate and in-place DUS emitters pass their own). ``vector_bits`` and
    ``max_unroll_factor`` matter on Blackwell only (CUDA >= 12.9 vectorises 256 bits;
    ``--xla_gpu_experimental_max_unroll_factor``). Two assumptions, the notes being silent: that
    flag's default is taken as 8, and the Blackwell rule only applies to fusions big enough to
    unroll at all."""
    analysis = (fusion_or_analysis if isinstance(fusion_or_analysis, FusionAnalysis)
                else analyze_fusion(fusion_or_analysis, device))
    if shape is None:
        shape = analysis.roots[0].shape
        while shape.is_tuple:
            shape = shape.tuple_shapes[0]
    n = shape.element_count()
    unroll = 1
    if n >= device.max_resident_threads and not may_prevent_vectorization(analysis):
        unroll = gcd(n, MAX_UNROLL_FACTOR)
        if device.compute_capability[0] >= 10:
            unroll = _blackwell_unroll(analysis, unroll, vector_bits, max_unroll_factor)
    unroll = max(unroll, -(-8 // analysis.smallest_output_bits))  # a thread never shares a byte
    return LoopConfig(unroll, loop_launch_dims(n, unroll, device), shape)


def may_prevent_vectorization(analysis: FusionAnalysis) -> bool:
    """Ops whose unrolled code spills or does not vectorise (``MayPreventVectorization``)."""
    for inst in analysis.computation.instructions:
        op = inst.opcode
        if op in ("sort", "dot"):
            return True
        if op == "concatenate" and len(inst.operands) > MAX_CONCAT_OPERANDS_FOR_UNROLLING:
            return True
        if op == "reduce" and inst.shape.is_tuple and len(inst.shape.tuple_shapes) > 1:
            return True
        if op == "reduce-window":
            window = 1
            for w in inst.attr("window", ()) or ():
                window *= w.size
            if window > MAX_REDUCE_WINDOW_ELEMENTS_FOR_UNROLLING:
                return True
    return False


def _blackwell_unroll(analysis: FusionAnalysis, unroll: int, vector_bits: int, max_unroll: int) -> int:
    """Blackwell's wider vectors (notes §b.2): single-root loop/transpose/concatenate fusions
    without a reduce whose smallest output is narrower than ``vector_bits / 4`` unroll to fill
    a vector of the widest input or output type."""
    insts = analysis.computation.instructions
    if (len(analysis.roots) != 1 or analysis.xla_emitter not in _WIDE_UNROLL_KINDS
            or any(i.opcode == "reduce" for i in insts) or analysis.smallest_output_bits * 4 >= vector_bits):
        return unroll
    widest = max([1] + [_bits(i.shape) for i in list(analysis.computation.parameters) + analysis.roots])
    wide = min(max_unroll, max(1, vector_bits // widest))
    wide = 1 << (wide.bit_length() - 1)
    if any(i.opcode == "pad" for i in insts):
        wide = min(wide, 8)
    if analysis.transpose is not None:
        while wide > 4 and analysis.transpose.dimensions[-1] < wide:
            wide //= 2
    return wide


def _bits(shape: Shape) -> int:
    return max((bits_of(leaf.element_type) for _, leaf in shape.leaves() if leaf.is_array), default=0)


def loop_launch_dims(num_elements: int, unroll: int, device: DeviceInfo) -> LaunchDims:
    """``CalculateLaunchDimensions`` (CUDA): 128 threads per block, blocks split over x and y
    when x would exceed its limit."""
    if num_elements <= 1:
        return LaunchDims((1, 1, 1), (1, 1, 1))
    n = -(-num_elements // unroll)
    threads = min(device.threads_per_warp * WARP_SCHEDULERS, n)
    total = -(-n // threads)
    return LaunchDims(split_grid(total, device, f"{num_elements} elements need {total} blocks of {threads} threads"),
                      (threads, 1, 1))


def split_grid(blocks: int, device: DeviceInfo, need: str) -> tuple[int, int, int]:
    """``blocks`` over grid x and, past x's limit, y (x as even as possible); ``need`` says
    what asked for them when even that exceeds the grid."""
    limit_x, limit_y, _ = device.block_dim_limit
    blocks_y = -(-blocks // limit_x)
    blocks_x = -(-blocks // blocks_y)
    if blocks_y > limit_y:
        raise HloUnsupportedError(f"{need}: more than the grid limit {limit_x} x {limit_y}")
    return (blocks_x, blocks_y, 1)


def thread_to_output_map(shape: Shape, config: LoopConfig) -> IndexingMap:
    """XLA's default work-item map: ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)[chunk, unroll]`` ->
    output index. Linear index ``(thread's global id + chunk * all threads) * unroll + unroll
    id``, delinearised in the layout's minor-to-major order, constrained to the element count.
    Symbols with a single value are folded and dropped, as XLA's simplifier does."""
    threads, blocks = tuple(config.launch.block), tuple(config.launch.grid)
    # the map depends on nothing else (the map is frozen: callers share it)
    key = (tuple(shape.dimensions), tuple(shape.minor_to_major), threads, blocks, config.unroll_factor)
    return _THREAD_MAPS.get(key, lambda: _thread_to_output_map(shape, threads, blocks, config.unroll_factor))


_THREAD_MAPS: BoundedMemo[IndexingMap] = BoundedMemo(1024)


def _thread_to_output_map(shape: Shape, threads: tuple[int, ...], blocks: tuple[int, ...], u: int) -> IndexingMap:
    linear: A.Expr = A.const(0)
    stride = 1
    for i in range(3):
        coord = A.add(A.dim(i), A.mul(A.dim(3 + i), threads[i]))
        linear = A.add(linear, A.mul(coord, stride))
        stride *= threads[i] * blocks[i]
    total = stride
    n = shape.element_count()
    linear = A.add(A.add(A.mul(linear, u), A.mul(A.sym(0), u * total)), A.sym(1))
    exprs: list[A.Expr] = [A.const(0)] * shape.rank
    divisor = 1
    for d in shape.minor_to_major:
        exprs[d] = A.mod(A.floordiv(linear, divisor), shape.dimensions[d])
        divisor *= shape.dimensions[d]
    dims = [(0, t - 1) for t in threads] + [(0, b - 1) for b in blocks]
    chunks = max(1, -(-n // (total * u)))
    m = IndexingMap.make(exprs, dims, [(0, chunks - 1), (0, u - 1)], (), [(linear, (0, n - 1))])
    m = replace(m, dim_names=WORK_ITEM_DIM_NAMES)
    return simplify(m).remove_unused_symbols()
