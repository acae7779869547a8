"""The cost model's estimate for every GPU bench module, beside the copy roofline.

For each module of ``catalog.MODULES`` at its full (GPU) size and each device of
``DEVICES``: the plan of ``CompileOptions(arch)`` and ``perf_model.estimate_module``'s time
for one run of every kernel, the bytes the kernels move (``catalog.kernel_bytes``, as the GPU
suite counts them) over the device's DRAM bandwidth (the copy roofline), their ratio, and the
kernels the coalescing analysis flags. No GPU is needed: a change that makes a kernel worse
in the model (an uncoalesced read, more bytes, lower occupancy) shows in CI's numbers.
"""
from __future__ import annotations

import time

from hlo_compile.codegen.compiler import plan_module
from hlo_compile.gpu.device_info import device_named
from hlo_compile.codegen.model.perf_model import estimate_module
from hlo_compile.options import CompileOptions

from . import catalog

DEVICES = (("h100", "sm_90"), ("a100", "sm_80"), ("h200", "sm_90"))


def _row(name: str, value: float | None, unit: str, **extra) -> dict:
    return {"name": name, "value": value, "unit": unit, "extra": extra}


def estimate_bench_module(bm: catalog.BenchModule, device_name: str, arch: str) -> dict:
    """One row: the estimate of ``bm`` on ``device_name`` and the copy roofline of its bytes."""
    device = device_named(device_name)
    _, module = catalog.load(bm)
    plan = plan_module(module, CompileOptions(arch=arch))
    est = estimate_module(plan, device)
    moved = catalog.kernel_bytes(plan)
    roofline_us = moved / device.memory_bandwidth * 1e6
    return _row(f"model {bm.name} {device_name}", round(est.estimated_us, 2), "us",
                copy_roofline_us=round(roofline_us, 2),
                pct_of_copy_roofline=round(100 * roofline_us / est.estimated_us, 1) if est.estimated_us else None,
                bytes=moved, flops=est.flops,
                kernels={k.kernel: round(k.estimated_us, 2) for k in est.kernels},
                uncoalesced=[k.kernel for k in est.kernels if not k.coalescing.all_coalesced],
                not_estimated=dict(est.not_estimated))


def cost_section(ns) -> dict:
    """Rows for every bench module on every device of ``DEVICES`` (``--quick``: H100 only)."""
    rows = []
    devices = DEVICES[:1] if getattr(ns, "quick", False) else DEVICES
    for bm in catalog.MODULES:
        for device_name, arch in devices:
            t0 = time.perf_counter()
            try:
                row = estimate_bench_module(bm, device_name, arch)
            except Exception as e:  # noqa: BLE001 - one module failing does not lose the others
                row = _row(f"model {bm.name} {device_name}", None, "us", error=f"{type(e).__name__}: {e}")
            row["extra"]["seconds"] = round(time.perf_counter() - t0, 3)
            rows.append(row)
    return {"rows": rows, "method": __doc__.strip()}
