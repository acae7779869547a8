"""A kernel launch checked against the device's limits before it is made.

CUDA refuses a launch that breaks one of these with a bare error code
(``CUDA_ERROR_INVALID_VALUE``, ``..._LAUNCH_OUT_OF_RESOURCES``) and no kernel name; we
check them where the plan is made (the ``fusions`` stage: both CLIs exit 2), again when
ptxas has said how many registers and how much static shared memory a kernel uses (the
``cubin`` stage), and in the cuda runtime with what the loaded function reports.

- block: each of x, y <= 1024, z <= 64, and x*y*z <= 1024 threads;
- grid: x <= 2^31 - 1, y and z <= 65535;
- static shared memory <= 48 KiB; static + dynamic <= the device's opt-in limit (dynamic
  above 48 KiB needs ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``, which the cuda
  runtime sets: ``needs_dynamic_shared_optin``);
- registers: <= 255 per thread, and one block's registers (allocated per warp in units of
  256) within the SM's 65536.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..hlo.errors import HloUnsupportedError
from ..hlo.ir import HloInstruction
from ..gpu.device_info import DeviceInfo

if TYPE_CHECKING:
    from .compiler import ModulePlan

BLOCK_DIM_LIMIT = (1024, 1024, 64)
STATIC_SHARED_LIMIT = 48 * 1024


class LaunchLimitError(HloUnsupportedError):
    """A kernel whose launch would break a device limit (exit 2 in both CLIs)."""


def launch_violations(device: DeviceInfo, grid: Sequence[int], block: Sequence[int], static_shared: int = 0,
                      dynamic_shared: int = 0, registers: int | None = None) -> list[str]:
    """What a launch of ``grid`` x ``block`` with that shared memory and registers per thread
    breaks on ``device``, one phrase each; empty when it may launch. A grid with no blocks (a
    zero-element output) is never launched: the runtime skips it, so it breaks nothing."""
    if min(grid) == 0:
        return []
    out = []
    threads = block[0] * block[1] * block[2]
    for axis, n, limit in zip("xyz", block, BLOCK_DIM_LIMIT):
        if n > limit:
            out.append(f"block {axis} = {n} exceeds {limit}")
    if threads > device.threads_per_block_limit:
        out.append(f"block of {threads} threads exceeds {device.threads_per_block_limit}")
    for axis, n, limit in zip("xyz", grid, device.block_dim_limit):
        if n > limit:
            out.append(f"grid {axis} = {n} exceeds {limit}")
    if min(list(grid) + list(block)) < 1:
        out.append(f"empty launch dimension (grid {list(grid)}, block {list(block)})")
    if static_shared > STATIC_SHARED_LIMIT:
        out.append(f"{static_shared} B of static shared memory exceeds the {STATIC_SHARED_LIMIT} B static limit")
    if static_shared + dynamic_shared > device.shared_memory_per_block_optin:
        out.append(f"{static_shared + dynamic_shared} B of shared memory exceeds the device's "
                   f"{device.shared_memory_per_block_optin} B per block")
    if registers is not None:
        if registers > device.max_registers_per_thread:
            out.append(f"{registers} registers per thread exceed {device.max_registers_per_thread}")
        used = block_registers(device, threads, registers)
        if used > device.registers_per_block_limit:
            out.append(f"{registers} registers x {threads} threads ({used} allocated) exceed the "
                       f"{device.registers_per_block_limit} registers of an SM")
    return out


def block_registers(device: DeviceInfo, threads: int, registers: int) -> int:
    """Registers one block holds: per warp, ``registers`` x 32 rounded up to the allocation unit."""
    warps = -(-threads // device.threads_per_warp)
    unit = device.register_allocation_unit
    return warps * (-(-registers * device.threads_per_warp // unit) * unit)


def needs_dynamic_shared_optin(dynamic_shared: int, static_shared: int = 0) -> bool:
    """Whether a launch must first raise the function's dynamic shared memory limit."""
    return dynamic_shared > 0 and static_shared + dynamic_shared > STATIC_SHARED_LIMIT


def check_launch(kernel: str, fusion: HloInstruction | None, device: DeviceInfo, grid: Sequence[int],
                 block: Sequence[int], static_shared: int = 0, dynamic_shared: int = 0,
                 registers: int | None = None) -> None:
    """Raise ``LaunchLimitError`` naming the kernel, its fusion and line when the launch
    breaks a limit of ``device``."""
    problems = launch_violations(device, grid, block, static_shared, dynamic_shared, registers)
    if problems:
        where = ""
        if fusion is not None:
            where = f" (fusion '%{fusion.name}'" + (f", line {fusion.location.line}" if fusion.location else "") + ")"
        raise LaunchLimitError(f"kernel '{kernel}'{where} cannot launch on {device.name} ({device.arch}): "
                               + "; ".join(problems), fusion.location if fusion is not None else None)


def check_plan(plan: "ModulePlan", resources: dict | None = None) -> None:
    """Every kernel of ``plan`` against its device: the planned launch and static shared
    memory, and ptxas's registers and static shared memory (``resources``, per kernel
    name) when given."""
    resources = resources or {}
    for k in plan.kernels:
        res = resources.get(k.kernel_name)
        static = res.shared_bytes if res is not None else int(k.spec.summary_fields().get("static_shared_bytes", 0)
                                                                or 0)
        check_launch(k.kernel_name, k.fusion, plan.device, k.launch.grid, k.launch.block, static,
                     k.launch.shared_bytes, res.registers if res is not None else None)
