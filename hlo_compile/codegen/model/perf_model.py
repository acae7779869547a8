"""A GPU cost model: each kernel's time estimated from its plan, without a GPU.

After XLA's ``GpuPerformanceModel`` (``xla/service/gpu/model/gpu_performance_model_base.cc``):

- **Reads**, per fusion operand (``coalescing.py``): its distinct bytes come from DRAM at the
  device's bandwidth times the operand's utilisation (1 when coalesced, else the sampled
  warp's useful share of its 64-byte segments: XLA's ``element size / 64`` for one lane per
  segment); re-reads (a broadcast operand) at 2.5x that bandwidth when the operand fits in
  L2, 8x more when it fits in the L1s (XLA's ``kL2CacheSpeedup``/``kL1CacheSpeedup``).
  DRAM traffic is capped by what the active SMs can issue: 32 bytes per SM per clock (XLA's
  ``AdjustBandwidth``, per block there); cached re-reads by the L1's 128 bytes per SM per
  clock (``l1_bytes_per_clock``: measured, see device_info). **Writes**, per output: bytes
  over bandwidth, divided by the write utilisation (ours: XLA takes writes as coalesced).
- **Compute**: flops (``count_flops``) at an FMA per FP32 lane per clock on the lanes the
  resident threads fill (XLA's ``CalculateEffectiveFlopsPerNs``, with the threads of every
  resident block rather than one block's), half rate for f64; the multiply-adds of a dot or
  convolution off tensor cores at ``CUDA_CORE_CONTRACTION_EFFICIENCY`` of that (measured); a
  dot on the tensor-core path at the device's dense tensor rate for its operand type.
- **Time** = compute + memory - 0.95 x min(compute, memory) (XLA's
  ``CombineComputeAndMemoryAccessTime``: nearly the max of the two) + 1 us launch overhead
  (XLA's ``kKernelLaunchOverhead``).
- **Occupancy**: resident blocks per SM from threads, shared memory and registers
  (ptxas's count when known, else an estimate of 32 per thread), and the waves of the grid.
- **Roofline**: the same bytes (distinct reads + writes) at full bandwidth; ``pct_of_roofline``
  is that time over the estimate (100 = a perfect memory-bound kernel).
- **Library calls** that stay calls (cuBLAS/cuBLASLt GEMMs, cuDNN convolutions:
  ``--gemm=library``/``--conv=library``): max(flops at the peak for their operand type, bytes of
  their operands and results at full bandwidth) + launch overhead (``estimate_library_call``).
  The peak: the device's dense tensor-core rate for 16-bit and 8-bit operands, the FP32 CUDA-core
  peak for f32 (our cuBLASLt/cuDNN steps compute f32 in full FP32, not TF32) and that times
  ``fp64_rate`` for f64; complex types 4 real multiply-adds per complex one. A library at peak:
  a small or oddly shaped GEMM runs slower than this. Rows of their own in the module total.
- **Not estimated**: a kernel the model cannot evaluate, cuDNN fused attention, an FFT (cuFFT),
  collectives and asynchronous copies are listed in ``ModuleEstimate.not_estimated`` with why,
  and left out of the total (the reports say how many).

- **Latency** (``estimate_launch`` with a ``LaunchFigures`` that knows the kernel's loads, as
  ``--xla-parity`` gives it for XLA's kernels and ours): DRAM reads at most at the rate the
  resident threads' bytes in flight allow (Little's law: resident threads x the bytes of one
  thread's global loads, at most ``MAX_BYTES_IN_FLIGHT_PER_THREAD``, / ``DRAM_LATENCY_NS``),
  so that narrow loads, low occupancy (registers, shared memory) and small grids cost time.

Limits (say so when quoting a number): the latency cap only where the loads are known (not
in ``--emit=cost``: a kernel with few bytes in flight is as fast as its bandwidth says), one
latency for every read, stores never latency-bound, caches only as XLA's two speedups, tensor-core dots at
peak rate, data-dependent reads (gather, scatter, sort) by XLA's heuristic, a tiled dot's
operand re-reads counted once per element read by the staging maps. Calibrated on one H200 run
(``python -m bench.calibrate``; bench/results/calibration-h200-2026-11-27.md): its bandwidth,
the L1 cap and the CUDA-core contraction efficiency; XLA's constants as XLA has them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from ...hlo import HloInstruction
from ...hlo.element_types import is_complex, is_float
from ...hlo.errors import HloError
from ...hlo.calls.library_targets import library_family, library_name
from ...hlo.opcodes import ELEMENTWISE
from .coalescing import BufferAccess, KernelCoalescing, analyze_kernel
from ...gpu.device_info import DeviceInfo, device_named
from ..analysis.hero_shapes import bits_of

if TYPE_CHECKING:
    from ..compiler import KernelPlan, ModulePlan

L2_CACHE_SPEEDUP = 2.5            # XLA's kL2CacheSpeedup
L1_CACHE_SPEEDUP = 8.0            # XLA's kL1CacheSpeedup
MEMORY_COMPUTE_PARALLELISM = 0.95  # XLA's kMemoryComputeParallelism
# Share of the FP32 FMA peak our tiled GEMM off tensor cores reaches (emitters/gemm: 64x64
# block tiles staged in shared memory, a 4x4 register tile per thread; the dot and convolution
# emitters share it): on the H200, dot_f32 (4096^3) ran at 18.7 TFLOP/s and convolution_f32
# (an implicit GEMM of 401408x64x576) at 18.6, 28% of 66.9 (bench/results/gpu-h200-2026-11-27.json).
# Other devices are assumed alike.
CUDA_CORE_CONTRACTION_EFFICIENCY = 0.28
ESTIMATED_REGISTERS = 32          # per thread, when ptxas has not said
TOP_N = 10                        # rows of the "where the time goes" table
STATIC_SHARED_LIMIT = 48 * 1024
# The latency model of ``estimate_launch`` (used when a kernel's loads are known, e.g. read
# from its PTX): a DRAM read's latency, and the most global-load bytes one thread is taken to
# keep in flight. Assumed, not calibrated: H100/H200 global loads that miss L2 take 500-700
# cycles at 1.6-1.98 GHz; 64 bytes is four 128-bit loads.
DRAM_LATENCY_NS = 400.0
MAX_BYTES_IN_FLIGHT_PER_THREAD = 64

# flops per output element of an elementwise op beyond the default 1: rough SFU/libdevice costs
_ELEMENTWISE_FLOPS = {
    **{op: 4 for op in ("divide", "sqrt", "rsqrt", "cbrt", "remainder")},
    **{op: 8 for op in ("exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "tanh",
                        "sine", "cosine", "tan", "power", "atan2", "erf", "acos", "acosh", "asin", "asinh",
                        "atanh", "cosh", "sinh")},
}
_FREE = frozenset({"parameter", "constant", "bitcast", "reshape", "transpose", "broadcast", "slice",
                   "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "gather", "copy", "iota",
                   "tuple", "get-tuple-element", "reverse", "convert", "bitcast-convert"})


# ---- flops ---------------------------------------------------------------------------------------

def count_flops(computation) -> tuple[int, int]:
    """(flops, of which f64) of one run of a fused computation: 1 per element of an elementwise
    op (more for division and transcendental functions), a reducer's ops per element reduced,
    2 per multiply-add of a dot or convolution; data movement is free."""
    total = f64 = 0
    for inst in computation.instructions:
        n = instruction_flops(inst)
        total += n
        if inst.shape.is_array and inst.shape.element_type == "f64":
            f64 += n
    return total, f64


def instruction_flops(inst: HloInstruction) -> int:
    """Floating-point operations of one execution of ``inst`` (a dot: 2 x output elements x
    contracting size), as the cost model counts them."""
    op = inst.opcode
    if op in _FREE or not inst.shape.is_array and op not in ("reduce", "sort", "scatter"):
        return 0
    out = _elements(inst.shape)
    if op in ELEMENTWISE:
        return out * _ELEMENTWISE_FLOPS.get(op, 1)
    if op == "reduce":
        return _elements(inst.operands[0].shape) * _ops(inst.to_apply)
    if op == "reduce-window":
        window = math.prod(w.size for w in (inst.attr("window", ()) or ()))
        return out * window * _ops(inst.to_apply)
    if op == "dot":
        dn = inst.dot_dimension_numbers
        k = math.prod(inst.operands[0].shape.dimensions[d] for d in dn.lhs_contracting_dimensions)
        return 2 * out * k
    if op == "convolution":
        kernel = inst.operands[1].shape
        dn = inst.convolution_dimension_numbers
        window = math.prod(kernel.dimensions[d] for d in dn.kernel_spatial_dimensions)
        return 2 * out * window * kernel.dimensions[dn.kernel_input_feature_dimension]
    if op == "sort":
        shape = inst.operands[0].shape
        row = shape.dimensions[inst.dimensions[0]] if inst.dimensions else 1
        stages = max(1, math.ceil(math.log2(max(row, 2))))
        return shape.element_count() * stages * (stages + 1) // 2 * _ops(inst.to_apply)
    if op == "scatter":
        n = len(inst.operands) // 2
        return _elements(inst.operands[-1].shape) * n * _ops(inst.to_apply)
    if op == "fusion":
        return count_flops(inst.fused_computation)[0]
    return out


def _elements(shape) -> int:
    if shape.is_tuple:
        return sum(_elements(s) for s in shape.tuple_shapes)
    return shape.element_count()


def _ops(comp) -> int:
    try:
        return max(1, sum(instruction_flops(i) for i in comp.instructions))
    except (AttributeError, KeyError, TypeError):
        return 1


# ---- occupancy -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Occupancy:
    blocks_per_core: int          # resident blocks per SM
    limited_by: str               # "threads", "blocks", "shared memory", "registers"
    occupancy: float              # resident warps / the SM's warp slots
    waves: int                    # ceil(grid blocks / (resident blocks per SM x SMs))
    registers: int                # per thread, as used for the limit
    registers_estimated: bool     # True when ptxas did not say


def occupancy(device: DeviceInfo, threads_per_block: int, num_blocks: int, shared_bytes: int = 0,
              registers: int | None = None) -> Occupancy:
    """Resident blocks per SM as the CUDA occupancy calculator counts them: by threads, by
    the block limit, by shared memory and by registers (allocated per warp in units of 256)."""
    warps = -(-threads_per_block // device.threads_per_warp)
    regs = registers if registers is not None else ESTIMATED_REGISTERS
    unit = device.register_allocation_unit
    regs_per_warp = -(-max(regs, 1) * device.threads_per_warp // unit) * unit
    limits = {
        "threads": device.threads_per_core_limit // max(threads_per_block, 1),
        "blocks": device.blocks_per_core_limit,
        "registers": device.registers_per_core_limit // (regs_per_warp * warps),
    }
    if shared_bytes > 0 and device.shared_memory_per_core:
        limits["shared memory"] = device.shared_memory_per_core // shared_bytes
    limited_by = min(limits, key=lambda k: limits[k])
    blocks = max(limits[limited_by], 0)
    slots = device.threads_per_core_limit // device.threads_per_warp
    occ = min(1.0, blocks * warps / slots)
    waves = -(-num_blocks // max(blocks * device.core_count, 1)) if blocks else 0
    return Occupancy(blocks, limited_by, occ, waves, regs, registers is None)


# ---- one kernel ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelEstimate:
    kernel: str
    fusion: str
    device: str
    flops: int
    bytes_read: int               # distinct bytes of the operands
    bytes_written: int
    bytes_moved: int              # DRAM bytes including what uncoalesced access wastes
    read_us: float
    write_us: float
    compute_us: float
    launch_us: float
    estimated_us: float
    roofline_us: float            # bytes_read + bytes_written at full bandwidth
    tensor_cores: bool
    occupancy: Occupancy | None
    coalescing: KernelCoalescing = field(repr=False, default=None)
    emitter: str | None = None    # the plan's emitter (loop, reduction, transpose...)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def pct_of_roofline(self) -> float:
        return 100.0 * self.roofline_us / self.estimated_us if self.estimated_us else 0.0

    @property
    def bound(self) -> str:
        return "compute" if self.compute_us > self.read_us + self.write_us else "memory"

    def summary_fields(self) -> dict:
        """summary.json's cost-model fields (DESIGN §5)."""
        occ = self.occupancy
        return {
            "estimated_us": round(self.estimated_us, 3), "bytes": self.bytes, "flops": self.flops,
            "bytes_moved": self.bytes_moved, "pct_of_bandwidth_roofline": round(self.pct_of_roofline, 1),
            "bound": self.bound, "tensor_cores_assumed": self.tensor_cores,
            "coalesced": [r.coalesced for r in self.coalescing.reads],
            "writes_coalesced": [w.coalesced for w in self.coalescing.writes],
            "operands": [r.to_json() for r in self.coalescing.reads],
            "occupancy": None if occ is None else {
                "blocks_per_sm": occ.blocks_per_core, "limited_by": occ.limited_by,
                "occupancy": round(occ.occupancy, 3), "waves": occ.waves, "registers": occ.registers,
                "registers_estimated": occ.registers_estimated},
            "cost_model_device": self.device,
        }

    def report_line(self) -> str:
        """One line of ``--emit=fusions``."""
        reads = ", ".join(f"%{r.name} {'coalesced' if r.coalesced else 'UNCOALESCED'}"
                          + ("" if r.coalesced else f" ({r.efficiency:.0%} of bytes used)")
                          for r in self.coalescing.reads if r.how not in ("unused", "scalar", "in place"))
        writes = [w.name for w in self.coalescing.writes if not w.coalesced]
        occ = self.occupancy
        occ_text = (f", occupancy {occ.occupancy:.0%} ({occ.blocks_per_core} block(s)/SM by {occ.limited_by}), "
                    f"{occ.waves} wave(s)" if occ is not None else "")
        return (f"cost ({self.device}): {self.estimated_us:.2f} us, {self.bytes} B, {self.flops} flops, "
                f"{self.pct_of_roofline:.0f}% of the bandwidth roofline, {self.bound}-bound{occ_text}; "
                f"reads: {reads or 'none'}" + (f"; UNCOALESCED writes: {', '.join(writes)}" if writes else ""))


@dataclass(frozen=True)
class LaunchFigures:
    """How one kernel of a fusion is launched and what its compiled code does, as far as the
    model takes it: the launch, the shared memory (dynamic + static), ptxas's registers, and
    the width of its global accesses read from its PTX. ``estimate_launch`` models any kernel
    of a fusion from these (ours, or XLA's for the same fusion: ``python -m bench --xla-parity``)."""
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int = 0                     # dynamic + static, per block
    registers: int | None = None              # per thread (ptxas -v); None: ESTIMATED_REGISTERS
    load_bits: int | None = None              # the widest global load of one thread (ld.v4.f32: 128)
    store_bits: int | None = None             # the widest global store
    load_bytes_per_thread: int | None = None  # bytes of all global load instructions of the kernel text

    @property
    def num_blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def num_threads(self) -> int:
        return math.prod(self.block)

    @property
    def bytes_in_flight(self) -> int | None:
        """Global-load bytes one thread can have outstanding: its load instructions' bytes (the
        static count: an unrolled body's independent loads), at least its widest load, at most
        ``MAX_BYTES_IN_FLIGHT_PER_THREAD``; None when the kernel's loads are not known."""
        if self.load_bits is None and self.load_bytes_per_thread is None:
            return None
        widest = (self.load_bits or 0) // 8
        return max(1, min(max(widest, self.load_bytes_per_thread or 0), MAX_BYTES_IN_FLIGHT_PER_THREAD))

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "block": list(self.block), "shared_bytes": self.shared_bytes,
                "registers": self.registers, "load_bits": self.load_bits, "store_bits": self.store_bits,
                "load_bytes_per_thread": self.load_bytes_per_thread}


def plan_launch(kernel: "KernelPlan", registers: int | None = None, static_shared: int | None = None) -> LaunchFigures:
    """``kernel``'s own launch (its plan's grid, block and shared memory; ``static_shared``: ptxas's
    figure, else the plan's), without access widths."""
    launch = kernel.launch
    if static_shared is None:
        static_shared = int(kernel.spec.summary_fields().get("static_shared_bytes", 0) or 0)
    return LaunchFigures(launch.grid, launch.block, static_shared + launch.shared_bytes, registers)


def estimate_kernel(kernel: "KernelPlan", device: DeviceInfo, registers: int | None = None,
                    static_shared: int | None = None, tensor_cores: bool = False) -> KernelEstimate:
    """The estimate of one planned kernel on ``device``; ``registers`` and ``static_shared``
    are ptxas's figures when known (else an estimate and the plan's static shared bytes);
    ``tensor_cores``: dots may take the tensor-core path (``CompileOptions.dot_tensor_cores``)."""
    return estimate_launch(kernel, device, plan_launch(kernel, registers, static_shared), tensor_cores)


def estimate_launch(kernel: "KernelPlan", device: DeviceInfo, launch: LaunchFigures,
                    tensor_cores: bool = False) -> KernelEstimate:
    """The estimate of a kernel of ``kernel``'s fusion launched as ``launch`` says: the fusion's
    bytes, flops and access pattern (coalescing) from the plan, the occupancy, active SMs and
    compute lanes from ``launch``, and, when ``launch`` knows the kernel's loads, a cap on the
    DRAM read rate by the bytes the resident threads keep in flight (Little's law:
    resident threads x ``bytes_in_flight`` / ``DRAM_LATENCY_NS``): what narrow loads, few
    resident threads (registers, shared memory) or a small grid cost. The same function models
    XLA's kernel of a fusion (its launch, registers and widths from its PTX) and ours."""
    spec = kernel.spec
    coal = analyze_kernel(kernel)
    num_blocks, threads = launch.num_blocks, launch.num_threads
    occ = occupancy(device, threads, num_blocks, launch.shared_bytes, launch.registers) \
        if num_blocks and threads else None
    bandwidth = float(device.memory_bandwidth or 1e12)
    clock = (device.clock_rate_ghz or 1.0) * 1e9
    active_cores = min(num_blocks, device.core_count) if num_blocks else 0
    dram_limit = max(active_cores, 1) * clock * device.memory_transactions_per_clock
    cache_limit = max(active_cores, 1) * clock * device.l1_bytes_per_clock

    read_s = 0.0
    dram_read = 0.0
    moved = 0
    for r in coal.reads:
        if r.bytes_total == 0:
            continue
        rate = 1.0 if r.coalesced else max(r.efficiency, 1e-3)
        rest, rest_limit = bandwidth, cache_limit
        if r.bytes_net < (device.l2_cache_size or 0):
            rest *= L2_CACHE_SPEEDUP
            if r.bytes_net < device.l1_cache_per_core * device.core_count:
                rest *= L1_CACHE_SPEEDUP
        else:
            rest, rest_limit = rest * rate, dram_limit
        dram = min(r.bytes_net, r.bytes_total)
        read_s += dram / min(bandwidth * rate, dram_limit) + (r.bytes_total - dram) / min(rest, rest_limit)
        dram_read += dram / rate
        moved += round(dram / rate)
    in_flight = launch.bytes_in_flight
    if in_flight is not None and occ is not None and dram_read:
        resident = min(num_blocks, occ.blocks_per_core * device.core_count) * threads
        concurrency = resident * in_flight / (DRAM_LATENCY_NS * 1e-9)
        read_s = max(read_s, dram_read / concurrency)
    write_s = 0.0
    for w in coal.writes:
        rate = 1.0 if w.coalesced else max(w.efficiency, 1e-3)
        write_s += w.bytes_net / min(bandwidth * rate, dram_limit)
        moved += round(w.bytes_net / rate)
    comp = spec.fusion.fused_computation
    flops, f64 = count_flops(comp)
    tensor = _tensor_core_rate(spec, device) if tensor_cores else None
    resident_threads = (occ.blocks_per_core * threads) if occ else threads
    lanes = min(resident_threads, device.fpus_per_core) * active_cores
    scalar_rate = 2.0 * clock * max(lanes, 1)
    dot_flops = _flops_of(comp, ("dot",))[0] if tensor else 0
    # multiply-adds of dots and convolutions on CUDA cores, at the emitters' measured efficiency
    mac, mac64 = _flops_of(comp, ("convolution",) if tensor else ("dot", "convolution"))
    compute_s = ((flops - f64 - dot_flops - (mac - mac64)) / scalar_rate
                 + (f64 - mac64) / (scalar_rate * device.fp64_rate)
                 + (mac - mac64 + mac64 / device.fp64_rate) / (scalar_rate * CUDA_CORE_CONTRACTION_EFFICIENCY)
                 + (dot_flops / (tensor * max(active_cores, 1) / device.core_count) if tensor else 0.0))
    memory_s = read_s + write_s
    exec_s = compute_s + memory_s - MEMORY_COMPUTE_PARALLELISM * min(compute_s, memory_s)
    launch_us = device.kernel_launch_overhead_us if num_blocks else 0.0
    total_bytes = sum(r.bytes_net for r in coal.reads) + sum(w.bytes_net for w in coal.writes)
    return KernelEstimate(
        kernel=kernel.kernel_name, fusion=kernel.fusion.name, device=device.name, flops=flops,
        bytes_read=sum(r.bytes_net for r in coal.reads), bytes_written=sum(w.bytes_net for w in coal.writes),
        bytes_moved=moved, read_us=read_s * 1e6, write_us=write_s * 1e6, compute_us=compute_s * 1e6,
        launch_us=launch_us, estimated_us=exec_s * 1e6 + launch_us, roofline_us=total_bytes / bandwidth * 1e6,
        tensor_cores=bool(tensor), occupancy=occ, coalescing=coal, emitter=_emitter_of(kernel))


def _emitter_of(kernel: "KernelPlan") -> str | None:
    analysis = getattr(kernel, "analysis", None)
    emitter = getattr(analysis, "emitter", None)
    return None if emitter is None else str(emitter)


def _tensor_core_rate(spec, device: DeviceInfo) -> float | None:
    """Tensor-core FLOP/s of a dot kernel our tensor-core path may take, else None."""
    dot = getattr(spec, "dot", None)
    if dot is None or getattr(spec, "tensor_core_refusal", "no") is not None:
        return None
    bits = bits_of(dot.operands[0].shape.element_type)
    return device.tensor_flops({8: "8bit", 16: "16bit"}.get(bits, "tf32"))


def _flops_of(comp, opcodes: tuple[str, ...]) -> tuple[int, int]:
    """(flops, of which f64) of the instructions of ``comp`` with one of ``opcodes``."""
    total = f64 = 0
    for inst in comp.instructions:
        if inst.opcode in opcodes:
            n = instruction_flops(inst)
            total += n
            if inst.shape.is_array and inst.shape.element_type == "f64":
                f64 += n
    return total, f64


# ---- library calls -------------------------------------------------------------------------------

class NotEstimated(ValueError):
    """Why the model has no estimate for a runtime step (listed in ``ModuleEstimate.not_estimated``)."""


@dataclass(frozen=True)
class LibraryCallEstimate:
    """A GEMM or convolution the runtime hands to cuBLAS/cuBLASLt/cuDNN: max(flops at peak,
    bytes at bandwidth) + launch overhead (the library assumed at the device's peak)."""
    call: str                     # the custom-call's name
    target: str                   # __cublas$lt$matmul, __cudnn$convForward...
    library: str                  # cuBLAS, cuBLASLt, cuDNN
    device: str
    element_type: str             # the operands' (A's, x's)
    peak: str                     # "16bit tensor cores", "FP32 CUDA cores"...
    peak_flops: float             # FLOP/s the compute time is taken at
    flops: int
    bytes_read: int               # every operand (A, B, C, bias, scales; x, w...)
    bytes_written: int            # every result leaf but the workspace/scratch
    compute_us: float
    memory_us: float
    launch_us: float
    estimated_us: float
    roofline_us: float            # bytes at full bandwidth: memory_us

    kind = "library call"

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def bound(self) -> str:
        return "compute" if self.compute_us > self.memory_us else "memory"

    @property
    def pct_of_roofline(self) -> float:
        return 100.0 * self.roofline_us / self.estimated_us if self.estimated_us else 0.0

    def summary_fields(self) -> dict:
        """summary.json's cost-model fields of a library call's row."""
        return {"estimated_us": round(self.estimated_us, 3), "bytes": self.bytes, "flops": self.flops,
                "pct_of_bandwidth_roofline": round(self.pct_of_roofline, 1), "bound": self.bound,
                "compute_us": round(self.compute_us, 3), "memory_us": round(self.memory_us, 3),
                "peak": self.peak, "peak_tflops": round(self.peak_flops / 1e12, 1),
                "cost_model_device": self.device}

    def report_line(self) -> str:
        """The cost line of a library call in ``--emit=fusions``."""
        return (f"cost ({self.device}): {self.estimated_us:.2f} us, {self.bytes} B, {self.flops} flops "
                f"({self.element_type} at the {self.peak} peak, {self.peak_flops / 1e12:.1f} TFLOP/s: "
                f"{self.compute_us:.2f} us; bytes at bandwidth: {self.memory_us:.2f} us), {self.bound}-bound")


def _peak(element_type: str, device: DeviceInfo) -> tuple[str, float]:
    """(what, FLOP/s) a library GEMM/convolution on ``element_type`` operands runs at: dense
    tensor cores for 16-bit floats and 8-bit types, CUDA cores for f32/f64 (and complex)."""
    if element_type in ("f64", "c128"):
        return "FP64 CUDA cores", device.fp32_flops * device.fp64_rate
    bits = bits_of(element_type)
    cls = "16bit" if bits == 16 and is_float(element_type) else "8bit" if bits <= 8 else None
    if cls is None:  # f32, c64 and 16/32-bit integers
        return "FP32 CUDA cores", device.fp32_flops
    rate = device.tensor_flops(cls)
    if rate is None:
        raise NotEstimated(f"the cost model has no dense tensor-core rate for {element_type} operands "
                           f"({cls}) on {device.name}")
    return f"{cls} tensor cores", rate


def _array_bytes(shape, skip: tuple[int, ...] | None = None) -> int:
    """Bytes of the array leaves of ``shape`` but the one at tuple index ``skip``."""
    return sum(leaf.element_count() * max(1, (bits_of(leaf.element_type) + 7) // 8)
               for index, leaf in shape.leaves() if leaf.is_array and index != skip)


def _gemm_figures(inst: HloInstruction) -> tuple[str, int, int, int]:
    """(A's element type, flops, bytes read, bytes written) of a cuBLAS GEMM call."""
    from ...hlo.calls.gemm import parse_gemm_call
    call = parse_gemm_call(inst)
    a = inst.operands[call.a].shape
    k = math.prod(a.dimensions[d] for d in call.dot_dims.lhs_contracting_dimensions)
    out = call.output.element_count()
    per_mac = 8 if is_complex(a.element_type) else 2   # a complex multiply-add is 4 real ones
    flops = 0 if call.alpha_is_zero else per_mac * out * k
    # epilogue: scaling by alpha, adding beta x C and the bias, the activation (GELU: a tanh)
    flops += out * (1 + (call.c is not None) + call.epilogue.has_bias
                    + {"relu": 1, "gelu": 8}.get(call.epilogue.activation, 0))
    skipped = {call.a, call.b} if call.alpha_is_zero else set()
    read = sum(_array_bytes(o.shape) for i, o in enumerate(inst.operands) if i not in skipped)
    workspace = (call.workspace_index,) if call.workspace_index is not None else None
    return a.element_type, flops, read, _array_bytes(inst.shape, workspace)


def _conv_figures(inst: HloInstruction) -> tuple[str, int, int, int]:
    """(x's element type, flops, bytes read, bytes written) of a cuDNN convolution call: the
    forward convolution's multiply-adds (the backward ones do as many)."""
    from ...hlo.calls.conv import ConvKind, parse_conv_call
    call = parse_conv_call(inst)
    window = math.prod(wd.size for wd in call.window)
    cin = call.w.dimensions[call.dnums.kernel_input_feature_dimension]
    out = call.y.element_count()
    flops = 2 * out * window * cin
    if call.kind is ConvKind.BIAS_ACTIVATION:
        flops += out * (2 + (call.activation != "kNone") + 2 * call.uses_side_input)
    read = sum(_array_bytes(o.shape) for o in inst.operands)
    scratch = (len(inst.shape.tuple_shapes) - 1,)
    return call.x.element_type, flops, read, _array_bytes(inst.shape, scratch)


def estimate_library_call(inst: HloInstruction, device: DeviceInfo) -> LibraryCallEstimate:
    """The estimate of a GEMM or convolution custom-call the runtime runs through a library;
    ``NotEstimated`` for any other call (fused attention, a target the model does not know),
    ``HloError`` for one the call readers refuse."""
    target = inst.attr("custom_call_target", "")
    family = library_family(target)
    if family == "gemm":
        et, flops, read, written = _gemm_figures(inst)
    elif family == "conv":
        et, flops, read, written = _conv_figures(inst)
    elif family == "fmha":
        raise NotEstimated(f"cuDNN fused attention ({target}): the model has no estimate for it")
    else:
        raise NotEstimated(f"custom-call target '{target}': the model has no estimate for it")
    peak, rate = _peak(et, device)
    bandwidth = float(device.memory_bandwidth or 1e12)
    compute_s = flops / rate
    memory_s = (read + written) / bandwidth
    launch_us = device.kernel_launch_overhead_us
    return LibraryCallEstimate(
        call=inst.name, target=target, library=library_name(target), device=device.name, element_type=et,
        peak=peak, peak_flops=rate, flops=flops, bytes_read=read, bytes_written=written,
        compute_us=compute_s * 1e6, memory_us=memory_s * 1e6, launch_us=launch_us,
        estimated_us=max(compute_s, memory_s) * 1e6 + launch_us, roofline_us=memory_s * 1e6)


# runtime steps outside kernels and library calls that do work the model does not estimate
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                "collective-broadcast", "ragged-all-to-all", "all-reduce-start", "all-gather-start",
                "collective-permute-start")
UNMODELLED_STEPS: dict[str, str] = {
    "fft": "an FFT the runtime runs through cuFFT: the model has no FFT estimate",
    **{op: "a collective: the model has no interconnect estimate" for op in _COLLECTIVES},
    "copy-start": "an asynchronous copy step: the model has no estimate for it",
    "send": "a send step: the model has no interconnect estimate",
    "recv": "a receive step: the model has no interconnect estimate",
}


# ---- a module ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopRow:
    """One row of "where the estimated time goes": a kernel (every launch of it summed) or a
    library call."""
    name: str
    kind: str                     # "kernel" or "library call"
    emitter: str | None           # the kernel's emitter; "library" for a call
    estimated_us: float
    pct_of_total: float
    launches: int = 1
    target: str | None = None     # a library call's custom-call target

    def to_json(self) -> dict:
        # rounded down: the rows never add up to more than the module's (rounded) total
        return {"name": self.name, "kind": self.kind, "emitter": self.emitter, "target": self.target,
                "launches": self.launches, "estimated_us": math.floor(self.estimated_us * 1000) / 1000,
                "pct_of_total": round(self.pct_of_total, 1)}


@dataclass(frozen=True)
class ModuleEstimate:
    device: str
    kernels: tuple[KernelEstimate, ...]
    not_estimated: tuple[tuple[str, str], ...] = ()   # (kernel or instruction, why) left out of the total
    library_calls: tuple[LibraryCallEstimate, ...] = ()   # GEMMs and convolutions the libraries run

    def for_kernel(self, name: str) -> KernelEstimate | None:
        """The first estimate of kernel ``name`` (by a table: a module has thousands)."""
        return self._by_kernel.get(name)

    def for_fusion(self, name: str) -> KernelEstimate | None:
        """The estimate of fusion ``name``'s launch (a reused kernel under the fusion's buffer names)."""
        return self._by_fusion.get(name)

    def for_call(self, name: str) -> LibraryCallEstimate | None:
        """The estimate of library custom-call ``name``."""
        return self._by_call.get(name)

    @cached_property
    def _by_kernel(self) -> dict[str, KernelEstimate]:
        table: dict[str, KernelEstimate] = {}
        for k in self.kernels:
            table.setdefault(k.kernel, k)
        return table

    @cached_property
    def _by_fusion(self) -> dict[str, KernelEstimate]:
        return {k.fusion: k for k in self.kernels}

    @cached_property
    def _by_call(self) -> dict[str, LibraryCallEstimate]:
        return {c.call: c for c in self.library_calls}

    @property
    def estimated_us(self) -> float:
        return sum(k.estimated_us for k in self.kernels) + sum(c.estimated_us for c in self.library_calls)

    @property
    def bytes(self) -> int:
        return sum(k.bytes for k in self.kernels) + sum(c.bytes for c in self.library_calls)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels) + sum(c.flops for c in self.library_calls)

    @property
    def roofline_us(self) -> float:
        return sum(k.roofline_us for k in self.kernels) + sum(c.roofline_us for c in self.library_calls)

    @property
    def uncoalesced_kernels(self) -> list[str]:
        """Each kernel with an uncoalesced access once, however many fusions launch it."""
        return list(dict.fromkeys(k.kernel for k in self.kernels if not k.coalescing.all_coalesced))

    def top(self, n: int = TOP_N) -> list[TopRow]:
        """The ``n`` kernels and library calls the most estimated time goes to, most first (a
        kernel several fusions launch counted once, its launches summed)."""
        total = self.estimated_us
        rows: dict[tuple[str, str], list] = {}
        for k in self.kernels:
            row = rows.setdefault(("kernel", k.kernel), [k.emitter, 0.0, 0, None])
            row[1] += k.estimated_us
            row[2] += 1
        for c in self.library_calls:
            rows[("library call", c.call)] = ["library", c.estimated_us, 1, c.target]
        ranked = sorted(rows.items(), key=lambda kv: (-kv[1][1], kv[0][1]))[:max(n, 0)]
        return [TopRow(name, kind, emitter, us, 100.0 * us / total if total else 0.0, launches, target)
                for (kind, name), (emitter, us, launches, target) in ranked]

    def summary_fields(self) -> dict:
        pct = 100.0 * self.roofline_us / self.estimated_us if self.estimated_us else 0.0
        return {"device": self.device, "estimated_us": round(self.estimated_us, 3), "bytes": self.bytes,
                "flops": self.flops, "pct_of_bandwidth_roofline": round(pct, 1),
                "kernel_launches": len(self.kernels), "library_calls_estimated": len(self.library_calls),
                "uncoalesced_kernels": self.uncoalesced_kernels,
                "not_estimated": dict(self.not_estimated), "not_estimated_count": len(dict(self.not_estimated)),
                "top_kernels": [r.to_json() for r in self.top()]}


def cost_device(name: str | None, plan_device: DeviceInfo) -> DeviceInfo:
    """The device ``CompileOptions.device`` names, else the plan's (the arch's)."""
    return device_named(name) if name else plan_device


def estimate_module(plan: "ModulePlan", device: DeviceInfo | None = None, resources: dict | None = None,
                    tensor_cores: bool = False) -> ModuleEstimate:
    """Every kernel and library call of ``plan`` (each run once: loop bodies are not
    multiplied by trip counts) on ``device`` (default: the plan's); ``resources`` is ptxas's
    per-kernel ``KernelResources`` (registers, static shared memory) when the cubin stage ran.
    A kernel the model cannot take (a map it cannot evaluate), a library call it has no
    estimate for (fused attention) and the runtime steps it does not model (FFTs,
    collectives) are listed with why, never guessed, and left out of the total."""
    device = device or plan.device
    resources = resources or {}
    out, skipped = [], {}
    owners: dict[str, KernelEstimate] = {}  # kernel → the estimate of the fusion that owns it
    for k in plan.kernels:
        owner = owners.get(k.kernel_name) if k.reuses is not None else None
        if owner is not None:  # the same kernel, launch and buffers: the same figures, its own names
            out.append(_renamed(owner, k))
            continue
        res = resources.get(k.kernel_name)
        try:
            est = estimate_kernel(k, device, res.registers if res else None,
                                  res.shared_bytes if res else None, tensor_cores)
        except (ArithmeticError, ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            skipped.setdefault(k.kernel_name, f"{type(e).__name__}: {e}")
            continue
        out.append(est)
        if k.reuses is None:
            owners[k.kernel_name] = est
    calls = []
    for call in plan.library_calls:
        try:
            calls.append(estimate_library_call(call, device))
        except NotEstimated as e:
            skipped.setdefault(call.name, str(e))
        except (HloError, ArithmeticError, ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            skipped.setdefault(call.name, f"{type(e).__name__}: {e}")
    for comp in (plan.computations or [plan.module.entry]):
        for inst in comp.instructions:
            why = UNMODELLED_STEPS.get(inst.opcode)
            if why is not None:
                skipped.setdefault(inst.name, why)
    return ModuleEstimate(device.name, tuple(out), tuple(skipped.items()), tuple(calls))


def _renamed(est: KernelEstimate, k: "KernelPlan") -> KernelEstimate:
    """The estimate of the kernel ``k`` reuses, for ``k``'s fusion: its buffers' names (the
    fusion's operands, parameters and roots, as ``coalescing.analyze_spec`` names them)."""
    from ..kernel import output_leaves
    fusion = k.fusion
    params = fusion.fused_computation.parameters
    aliased = set(k.spec.in_place.values())
    reads = tuple(replace(r, name=params[r.index].name if r.index in aliased or r.index >= len(fusion.operands)
                          else fusion.operands[r.index].name) for r in est.coalescing.reads)
    leaves = output_leaves(fusion)
    writes = tuple(replace(w, name=leaves[w.index][0].name) for w in est.coalescing.writes)
    return replace(est, fusion=fusion.name, coalescing=KernelCoalescing(reads, writes))


__all__ = ["BufferAccess", "KernelEstimate", "LaunchFigures", "LibraryCallEstimate", "ModuleEstimate", "NotEstimated",
           "Occupancy", "TopRow", "cost_device", "count_flops", "estimate_kernel", "estimate_launch",
           "estimate_library_call", "estimate_module", "occupancy", "plan_launch"]
