"""What the emitters' heuristics need to know about a GPU, and the GPUs we know.

XLA reads these numbers from ``se::DeviceDescription`` and ships deviceless specs for known GPUs
under ``xla/tools/hlo_opt/gpu_specs/*.txtpb``; the H100 SXM and A100 values below are those
specs' values. Launch heuristics depend on them (the loop emitter unrolls only when a fusion
has at least ``threads_per_core_limit * core_count`` elements; the multi-row reduction wants
at least ``core_count`` blocks), so compiling for an ``--arch`` picks the matching device (``archs.ARCHS``).

The cost model (``perf_model.py``) reads the rest: DRAM bandwidth, L1/L2 sizes, the clock,
FP32 lanes and tensor-core rates (NVIDIA's datasheet figures for the SXM parts, dense), the
DRAM->L2 transaction size and bytes per SM per clock that XLA's ``GpuPerformanceModel`` uses,
the L1's bytes per SM per clock, and the occupancy limits (blocks, registers and their
allocation unit per SM). H200 is H100's chip with HBM3e: same SMs and clocks, so the same plans;
``device_named`` picks it. Its bandwidth is the copy measured on one (``bench/calibrate.py``);
H100's and A100's are XLA's spec values, not measured here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    arch: str                          # "sm_90", "sm_80", ...
    core_count: int                    # streaming multiprocessors
    threads_per_core_limit: int        # resident threads per SM
    threads_per_warp: int = 32
    block_dim_limit: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    threads_per_block_limit: int = 1024
    shared_memory_per_block: int = 48 * 1024          # without opt-in
    shared_memory_per_block_optin: int = 48 * 1024    # with cudaFuncAttributeMaxDynamicSharedMemorySize
    shared_memory_per_core: int = 0
    registers_per_core_limit: int = 65536
    registers_per_block_limit: int = 65536
    clock_rate_ghz: float | None = None
    memory_bandwidth: int | None = None               # bytes per second
    l2_cache_size: int | None = None                  # bytes
    # ---- the cost model's figures (perf_model.py) ----
    fpus_per_core: int = 64                           # FP32 lanes per SM (one FMA each per clock)
    fp64_rate: float = 0.5                            # FP64 throughput / FP32 throughput
    tensor_tflops: tuple[tuple[str, float], ...] = ()  # operand class ("tf32", "16bit", "8bit") -> dense TFLOP/s
    l1_cache_per_core: int = 0                        # bytes (L1 and shared memory together)
    dram_to_l2_transaction_size_bytes: int = 64
    memory_transactions_per_clock: int = 32           # bytes one SM moves per clock at most (DRAM side)
    # bytes one SM's L1 returns per clock (Volta to Hopper: 128): caps cached re-reads (a
    # broadcast operand), which the DRAM-side figure above overcharged 4x: softmax_f32 ran at
    # 97.6% of the copy roofline on the H200 (264 us) although its kernels re-read 805 MB of
    # broadcast operands, 96 us at 32 B/clk/SM (bench/results/gpu-h200-2026-11-27.json)
    l1_bytes_per_clock: int = 128
    blocks_per_core_limit: int = 32
    max_registers_per_thread: int = 255
    register_allocation_unit: int = 256               # registers are given to a warp in these units
    kernel_launch_overhead_us: float = 1.0            # XLA's kKernelLaunchOverhead
    memory_size: int | None = None                    # bytes of device memory

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)`` from the arch name: ``sm_90a`` -> ``(9, 0)``."""
        digits = "".join(ch for ch in self.arch[3:] if ch.isdigit())
        return int(digits[:-1]), int(digits[-1])

    @property
    def max_resident_threads(self) -> int:
        """Threads the whole GPU keeps resident: the loop emitter's "big fusion" threshold."""
        return self.threads_per_core_limit * self.core_count

    @property
    def fp32_flops(self) -> float:
        """Peak FP32 FLOP/s without tensor cores: an FMA (2 flops) per lane per clock."""
        return 2.0 * self.fpus_per_core * self.core_count * (self.clock_rate_ghz or 1.0) * 1e9

    def tensor_flops(self, operand_class: str) -> float | None:
        """Dense tensor-core FLOP/s for operands of ``operand_class`` ("tf32", "16bit", "8bit"),
        None where this device has none for it."""
        rate = dict(self.tensor_tflops).get(operand_class)
        return None if rate is None else rate * 1e12


H100_SXM = DeviceInfo(
    name="NVIDIA H100 SXM", arch="sm_90", core_count=132, threads_per_core_limit=2048,
    shared_memory_per_block_optin=232448, shared_memory_per_core=233472, clock_rate_ghz=1.98,
    memory_bandwidth=3352320000000, l2_cache_size=52428800,
    fpus_per_core=128, tensor_tflops=(("tf32", 494.7), ("16bit", 989.4), ("8bit", 1978.9)),
    l1_cache_per_core=262144, memory_size=80 * 2**30)

A100_SXM = DeviceInfo(
    name="NVIDIA A100 SXM", arch="sm_80", core_count=108, threads_per_core_limit=2048,
    shared_memory_per_block_optin=166912, shared_memory_per_core=167936, clock_rate_ghz=1.41,
    memory_bandwidth=1555200000000, l2_cache_size=41943040,
    fpus_per_core=64, tensor_tflops=(("tf32", 156.0), ("16bit", 312.0)),
    l1_cache_per_core=196608, memory_size=40 * 2**30)

# H100's chip with 141 GB of HBM3e: the plans are H100's, the cost model differs. Bandwidth: what
# a 256 MiB cuMemcpyDtoD moved on an H200 (read + write counted), 4167 GB/s, not the datasheet's
# 4.8 TB/s (bench/results/gpu-h200-2026-11-27.json, copy_roofline; the transposes and row/column
# reductions there ran at 88-98% of it)
H200_SXM = replace(H100_SXM, name="NVIDIA H200 SXM", memory_bandwidth=4167000000000, memory_size=141 * 10**9)

# Blackwell B200: 148 SMs and Hopper's shared memory sizes; the rest is not pinned down here.
B200 = DeviceInfo(
    name="NVIDIA B200", arch="sm_100", core_count=148, threads_per_core_limit=2048,
    shared_memory_per_block_optin=232448, shared_memory_per_core=233472)

_BY_NAME: dict[str, DeviceInfo] = {"a100": A100_SXM, "h100": H100_SXM, "h200": H200_SXM, "b200": B200}


def device_named(name: str) -> DeviceInfo:
    """The device ``--device`` names: ``a100``, ``h100``, ``h200`` (or ``b200``), any case."""
    key = name.strip().lower()
    if key not in _BY_NAME:
        raise ValueError(f"unknown device '{name}'; known: {', '.join(_BY_NAME)}")
    return _BY_NAME[key]


def known_devices() -> list[str]:
    """The names ``device_named`` accepts."""
    return list(_BY_NAME)
