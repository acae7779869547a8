"""python -m bench.calibrate [RESULTS.json] [--json OUT]: the cost model against a GPU run.

For each timed row of a GPU suite's results (``bench/gpu_suite.py``: ``suites.gpu.sections
["gpu kernels"].rows``), the module of ``bench/catalog.py`` at full size is planned for the arch
the run names, as the suite compiled it, and every kernel estimated by
``perf_model.estimate_kernel`` on the cost model's entry for the run's GPU, with the register
counts the run recorded. The table puts the model's time beside the measured one (the suite times
all launches of a module together, so a module of several kernels is compared as their sum),
then the geometric mean of model/measured and the largest |ln(model/measured)|.
No GPU needed: only planning.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from hlo_compile.codegen.compiler import plan_module
from hlo_compile.gpu.device_info import DeviceInfo, device_named, known_devices
from hlo_compile.codegen.model.perf_model import KernelEstimate, estimate_kernel
from hlo_compile.options import CompileOptions

from . import catalog

DEFAULT_RESULTS = Path(__file__).resolve().parent / "results" / "gpu-h200-2026-11-27.json"


@dataclass(frozen=True)
class Row:
    module: str
    measured_us: float
    model_us: float
    kernels: tuple[KernelEstimate, ...]

    @property
    def ratio(self) -> float:
        return self.model_us / self.measured_us

    def to_json(self) -> dict:
        return {"module": self.module, "measured_us": round(self.measured_us, 2),
                "model_us": round(self.model_us, 2), "ratio": round(self.ratio, 3),
                "kernels": [{"kernel": k.kernel, "model_us": round(k.estimated_us, 2), "bound": k.bound,
                             "read_us": round(k.read_us, 2), "write_us": round(k.write_us, 2),
                             "compute_us": round(k.compute_us, 2)} for k in self.kernels]}


def cost_device_of(gpu_name: str) -> DeviceInfo:
    """The cost model's entry for a GPU as CUDA names it ("NVIDIA H200" -> ``h200``)."""
    words = gpu_name.lower().replace("-", " ").split()
    for name in known_devices():
        if name in words:
            return device_named(name)
    raise ValueError(f"no cost-model device for GPU '{gpu_name}'; known: {', '.join(known_devices())}")


def calibrate(results: dict) -> tuple[DeviceInfo, list[Row]]:
    """The model beside every timed module of a GPU suite's ``results`` (the bench JSON)."""
    gpu = results["suites"]["gpu"]
    device = cost_device_of(gpu["device"]["device"])
    options = CompileOptions(arch=gpu["device"]["arch"])
    by_name = {bm.name: bm for bm in catalog.MODULES}
    rows = []
    for r in gpu["sections"]["gpu kernels"]["rows"]:
        if r.get("value") is None or r["name"] not in by_name:
            continue
        bm = by_name[r["name"]]
        plan = plan_module(catalog.load(bm)[1], options)
        why = catalog.check_emitters(bm, plan)
        if why:
            raise ValueError(f"{bm.name}: the plan differs from the run's: {why}")
        registers = r["extra"].get("registers") or [None] * len(plan.kernels)
        if len(registers) != len(plan.kernels):
            raise ValueError(f"{bm.name}: {len(plan.kernels)} kernels planned, the run has {len(registers)}")
        kernels = tuple(estimate_kernel(k, device, regs) for k, regs in zip(plan.kernels, registers))
        rows.append(Row(bm.name, float(r["value"]), sum(k.estimated_us for k in kernels), kernels))
    return device, rows


def summary(rows: list[Row]) -> dict:
    """Geometric-mean ratio model/measured and the largest |ln ratio| (and whose it is)."""
    logs = [math.log(r.ratio) for r in rows]
    worst = max(rows, key=lambda r: abs(math.log(r.ratio)))
    return {"modules": len(rows), "geomean_ratio": math.exp(sum(logs) / len(logs)),
            "max_abs_log_ratio": abs(math.log(worst.ratio)), "worst": worst.module, "worst_ratio": worst.ratio}


def format_table(device: DeviceInfo, rows: list[Row]) -> str:
    width = max(len(r.module) for r in rows)
    lines = [f"cost model: {device.name} ({device.memory_bandwidth / 1e9:.0f} GB/s)",
             f"{'module':<{width}}  {'measured us':>12}  {'model us':>10}  {'model/meas':>10}  "
             "kernels: model us, bound"]
    for r in rows:
        kernels = ", ".join(f"{k.kernel} {k.estimated_us:.1f} {k.bound}" for k in r.kernels)
        lines.append(f"{r.module:<{width}}  {r.measured_us:>12.1f}  {r.model_us:>10.1f}  {r.ratio:>10.2f}  {kernels}")
    s = summary(rows)
    lines.append(f"summary: {s['modules']} modules, geometric-mean ratio {s['geomean_ratio']:.3f}, "
                 f"max |ln ratio| {s['max_abs_log_ratio']:.3f} ({s['worst']}: x{s['worst_ratio']:.2f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.calibrate",
                                 description="The cost model beside the kernels a GPU suite run measured.")
    ap.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS, help="a GPU suite's JSON")
    ap.add_argument("--json", type=Path, help="write the table and summary here")
    ns = ap.parse_args(argv)
    device, rows = calibrate(json.loads(ns.results.read_text()))
    if not rows:
        print(f"{ns.results}: no timed GPU kernel rows", file=sys.stderr)
        return 1
    print(format_table(device, rows))
    if ns.json:
        ns.json.write_text(json.dumps({"results": str(ns.results), "device": device.name,
                                       "rows": [r.to_json() for r in rows], "summary": summary(rows)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
