"""What the emitters' heuristics need to know about a GPU, and the GPUs we know.

XLA reads these numbers from ``se::DeviceDescription`` and ships deviceless specs for known GPUs
under ``xla/tools/hlo_opt/gpu_specs/*.txtpb``; the H100 SXM and A100 values below are those
specs' values. Launch heuristics depend on them (the loop emitter unrolls only when a fusion
has at least ``threads_per_core_limit * core_count`` elements; the multi-row reduction wants
at least ``core_count`` blocks), so compiling for an ``--arch`` picks the matching device.
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

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)`` from the arch name: ``sm_90a`` -> ``(9, 0)``."""
        digits = "".join(ch for ch in self.arch[3:] if ch.isdigit())
        return int(digits[:-1]), int(digits[-1])

    @property
    def max_resident_threads(self) -> int:
        """Threads the whole GPU keeps resident: the loop emitter's "big fusion" threshold."""
        return self.threads_per_core_limit * self.core_count


H100_SXM = DeviceInfo(
    name="NVIDIA H100 SXM", arch="sm_90", core_count=132, threads_per_core_limit=2048,
    shared_memory_per_block_optin=232448, shared_memory_per_core=233472, clock_rate_ghz=1.98,
    memory_bandwidth=3352320000000, l2_cache_size=52428800)

A100_SXM = DeviceInfo(
    name="NVIDIA A100 SXM", arch="sm_80", core_count=108, threads_per_core_limit=2048,
    shared_memory_per_block_optin=166912, shared_memory_per_core=167936, clock_rate_ghz=1.41,
    memory_bandwidth=1555200000000, l2_cache_size=41943040)

# Blackwell B200: 148 SMs and Hopper's shared memory sizes; the rest is not pinned down here.
B200 = DeviceInfo(
    name="NVIDIA B200", arch="sm_100", core_count=148, threads_per_core_limit=2048,
    shared_memory_per_block_optin=232448, shared_memory_per_core=233472)

_BY_ARCH: dict[str, DeviceInfo] = {
    "sm_90": H100_SXM, "sm_90a": replace(H100_SXM, arch="sm_90a"),
    "sm_80": A100_SXM,
    "sm_86": replace(A100_SXM, name="A100-like (sm_86)", arch="sm_86"),
    "sm_89": replace(A100_SXM, name="A100-like (sm_89)", arch="sm_89"),
    "sm_100": B200, "sm_100a": replace(B200, arch="sm_100a"),
}


def device_for_arch(arch: str) -> DeviceInfo:
    """The device whose heuristics apply when compiling for ``arch`` (e.g. ``"sm_90"``).

    sm_90/sm_90a are H100 SXM; sm_80/sm_86/sm_89 use A100 numbers; sm_100/sm_100a B200's.
    """
    key = arch.strip().lower()
    if key not in _BY_ARCH:
        known = ", ".join(sorted(_BY_ARCH))
        raise ValueError(f"unknown GPU architecture '{arch}'; known: {known}")
    return _BY_ARCH[key]


def known_archs() -> list[str]:
    """The architectures with device constants (``sm_80``, ...)."""
    return sorted(_BY_ARCH)
