"""Issue 31, item 1: the cost model runs once per kernel per compile (the fusion report and
summary.json read one estimate, made in a dump after ptxas gave the registers), and the whole
result cache lives in the driver (``pipeline.compile_source``): a warm hit runs no stage."""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner

from hlo_compile.cli.compile import main as compile_main
from hlo_compile.codegen.model import perf_model
from hlo_compile.driver import pipeline, stages
from hlo_compile.driver.kernel_cache import KernelCache
from hlo_compile.options import CompileOptions

# three fusions, two kernels: %b reuses %a's kernel; %r a row reduction
MODULE = """HloModule cost_once

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

f1 {
  p = f32[1024,256] parameter(0)
  e = f32[1024,256] exponential(p)
  ROOT t = f32[1024,256] tanh(e)
}

ENTRY main {
  p0 = f32[1024,256] parameter(0)
  p1 = f32[1024,256] parameter(1)
  a = f32[1024,256] fusion(p0), kind=kLoop, calls=f1
  b = f32[1024,256] fusion(p1), kind=kLoop, calls=f1
  m = f32[1024,256] multiply(a, b)
  z = f32[] constant(0)
  r = f32[1024] reduce(m, z), dimensions={1}, to_apply=add
  ROOT out = (f32[1024,256], f32[1024]) tuple(a, r)
}
"""


def _needs_ptx() -> None:
    pytest.importorskip("llvmlite")
    try:
        from hlo_compile.targets.nvptx.toolkit import find_libdevice
        find_libdevice()
    except Exception:
        pytest.skip("no libdevice: the llvm-opt stage cannot run here")


def _count_estimates(monkeypatch) -> tuple[Counter, list]:
    """Calls of the model per kernel (``estimate_kernel``) and per module (``estimate_module``)."""
    per_kernel: Counter = Counter()
    modules: list = []
    kernel, module = perf_model.estimate_kernel, perf_model.estimate_module

    def counting_kernel(k, *a, **kw):
        per_kernel[k.kernel_name] += 1
        return kernel(k, *a, **kw)

    def counting_module(plan, *a, **kw):
        modules.append(a[1] if len(a) > 1 else kw.get("resources"))
        return module(plan, *a, **kw)
    monkeypatch.setattr(perf_model, "estimate_kernel", counting_kernel)
    monkeypatch.setattr(perf_model, "estimate_module", counting_module)
    return per_kernel, modules


def _invoke(args):
    return CliRunner().invoke(compile_main, [str(a) for a in args])


def test_a_dumped_compile_estimates_each_kernel_once(tmp_path, monkeypatch):
    _needs_ptx()
    src = tmp_path / "m.hlo"
    src.write_text(MODULE)
    per_kernel, modules = _count_estimates(monkeypatch)
    dump = tmp_path / "d"
    r = _invoke([src, "--dump-to", dump, "--no-cache", "-j", "1"])
    assert r.exit_code == 0, r.output
    summary = json.loads(next(dump.glob("module_0000.*summary.json")).read_text())
    kernels = {k["kernel"] for k in summary["kernels"]}
    assert len(summary["kernels"]) == 3 and len(kernels) == 2  # the reused kernel is not estimated again
    assert per_kernel == Counter({k: 1 for k in kernels}), per_kernel
    assert len(modules) == 1
    report = next(dump.glob("module_0000.*fusions.txt")).read_text()
    ptxas = "cubin" not in summary["skipped_stages"]
    if ptxas:  # the one estimate has ptxas's registers, and the report shows that one
        assert modules[0] and all(not k["occupancy"]["registers_estimated"] for k in summary["kernels"])
    # every kernel's time and occupancy in the report are summary.json's
    by_fusion = {k["fusion"]: k for k in summary["kernels"]}
    costs = _report_costs(report)
    assert sorted(costs) == sorted(by_fusion)
    for fusion, line in costs.items():
        occ = by_fusion[fusion]["occupancy"]
        assert f": {by_fusion[fusion]['estimated_us']:.2f} us," in line, line
        assert f"({occ['blocks_per_sm']} block(s)/SM by {occ['limited_by']})" in line, line


def _report_costs(report: str) -> dict[str, str]:
    """Each fusion block's cost line in the fusion report."""
    costs: dict[str, str] = {}
    fusion = None
    for line in report.splitlines():
        if not line.startswith(" "):
            m = re.match(r"fusion %(\S+) -> kernel ", line)
            fusion = m.group(1) if m else None
        elif fusion is not None and line.startswith("  cost ("):
            costs[fusion] = line
    return costs


def test_the_printed_report_is_the_only_estimate_without_ptxas(tmp_path, monkeypatch):
    src = tmp_path / "m.hlo"
    src.write_text(MODULE)
    per_kernel, modules = _count_estimates(monkeypatch)
    r = _invoke([src, "--emit=fusions", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "cost (" in r.stdout
    assert sorted(per_kernel.values()) == [1, 1] and modules == [{}]  # no registers: nothing ran ptxas


def test_summary_reads_the_reports_estimate(monkeypatch):
    """``run_pipeline`` without ptxas: the report and summary share one ``ModuleEstimate``."""
    from hlo_compile import parse_module
    per_kernel, modules = _count_estimates(monkeypatch)
    result = pipeline.run_pipeline(parse_module(MODULE), CompileOptions(), emit="fusions")
    report = result.artifacts["fusions"]
    s = pipeline.summary(result)
    assert len(modules) == 1 and sum(per_kernel.values()) == 2
    assert s["cost_model"]["estimated_us"] == result.cost().summary_fields()["estimated_us"]
    assert f"{s['cost_model']['estimated_us']:.2f} us for one run" in report


def test_a_warm_result_hit_runs_no_stage(tmp_path, monkeypatch):
    _needs_ptx()
    src = tmp_path / "m.hlo"
    src.write_text(MODULE)
    cache, cold_dir, warm_dir = tmp_path / "c", tmp_path / "d1", tmp_path / "d2"
    cold = _invoke([src, "--dump-to", cold_dir, "--cache-dir", cache, "-j", "1"])
    assert cold.exit_code == 0, cold.output

    def no_stage(*a, **k):
        raise AssertionError("a warm compile ran a stage")
    monkeypatch.setattr(pipeline, "run_pipeline", no_stage)
    monkeypatch.setattr(stages, "plan_prepared_module", no_stage)
    monkeypatch.setattr(perf_model, "estimate_module", no_stage)
    warm = _invoke([src, "--dump-to", warm_dir, "--cache-dir", cache, "-j", "1"])
    assert warm.exit_code == 0, warm.output
    files = sorted(p.name for p in cold_dir.iterdir())
    assert files == sorted(p.name for p in warm_dir.iterdir()) and len(files) > 5
    for name in files:
        assert (cold_dir / name).read_bytes() == (warm_dir / name).read_bytes(), name
    # other flags: a miss, which compiles (and here fails)
    miss = _invoke([src, "--dump-to", warm_dir, "--cache-dir", cache, "--arch=sm_90"])
    assert miss.exit_code != 0 and "ran a stage" in miss.output


def test_compile_source_decides_lookup_and_store(tmp_path):
    """The driver's entry point: a cold compile is stored, a warm one neither parses nor compiles;
    ``key_flags`` (how the caller reads the text) are part of the key; overrides are never kept."""
    from hlo_compile import parse_module
    cache = KernelCache(tmp_path / "c")
    parsed: list[str] = []

    def parse():
        parsed.append("x")
        return [parse_module(MODULE)]
    cold = pipeline.compile_source(MODULE, parse, CompileOptions(), emit="fusions", cache=cache)
    assert not cold.from_cache and parsed == ["x"] and "cost (" in cold.outputs[0]
    warm = pipeline.compile_source(MODULE, parse, CompileOptions(), emit="fusions", cache=cache)
    assert warm.from_cache and parsed == ["x"] and warm.outputs == cold.outputs
    other = pipeline.compile_source(MODULE, parse, CompileOptions(), emit="fusions", cache=cache,
                                    key_flags=["split=True"])
    assert not other.from_cache and len(parsed) == 2

    class NoOverrides:  # an override spec that replaces nothing
        def check_module_count(self, names):
            pass

        def bind(self, module, index, plan):
            class Bound:
                def sources(self, names):
                    return {}
            return Bound()

        def finish(self):
            pass
    entries = len(cache.entries())
    again = pipeline.compile_source(MODULE, parse, CompileOptions(), emit="fusions", cache=cache,
                                    overrides=NoOverrides())
    assert not again.from_cache and len(parsed) == 3 and len(cache.entries()) == entries
