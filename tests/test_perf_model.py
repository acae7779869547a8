"""The cost model (codegen/perf_model.py): a memcpy-like fusion costs its bytes over the
bandwidth, an uncoalesced loop-emitted transpose is flagged and estimated slower than the
shared-memory transpose of the same fusion, flops, occupancy, devices, and the model's
place in --emit=fusions and summary.json."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import KernelPlan, plan_fusion
from hlo_compile.codegen.device_info import A100_SXM, H100_SXM, H200_SXM, device_named
from hlo_compile.codegen.emitter_kind import EmitterKind
from hlo_compile.codegen.emitters import EMITTERS
from hlo_compile.codegen.emitters.loop import plan_loop_kernel
from hlo_compile.codegen.perf_model import count_flops, estimate_kernel, occupancy


def _fusion_module(body: str, params: list[str], root: str, kind: str = "kLoop") -> str:
    entry = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    return (f"HloModule m\nfusion {{\n{body}\n}}\nENTRY e {{\n{entry}\n"
            f"  ROOT fusion = {root} fusion({args}), kind={kind}, calls=fusion\n}}\n")


COPY = _fusion_module("  p0 = f32[64,1024,1024] parameter(0)\n  ROOT c = f32[64,1024,1024] negate(p0)",
                      ["f32[64,1024,1024]"], "f32[64,1024,1024]")
TRANSPOSE = _fusion_module("  p0 = f32[4096,4096] parameter(0)\n  ROOT t = f32[4096,4096] transpose(p0), "
                           "dimensions={1,0}", ["f32[4096,4096]"], "f32[4096,4096]", "kInput")


def _kernel(text: str, device):
    return plan_fusion(parse_module(text).entry.root, device, "k")


@pytest.mark.parametrize("device", [A100_SXM, H100_SXM, H200_SXM], ids=lambda d: d.name)
def test_memcpy_like_fusion_costs_bytes_over_bandwidth(device):
    e = estimate_kernel(_kernel(COPY, device), device)
    n = 64 * 1024 * 1024 * 4
    assert e.bytes == 2 * n and e.bytes_moved == 2 * n
    ideal_us = 2 * n / device.memory_bandwidth * 1e6
    assert e.roofline_us == pytest.approx(ideal_us)
    assert ideal_us < e.estimated_us < ideal_us * 1.02 + device.kernel_launch_overhead_us + 0.01
    assert e.pct_of_roofline > 98 and e.bound == "memory"
    assert e.coalescing.all_coalesced


def test_h200_is_faster_than_h100_for_bytes():
    h100 = estimate_kernel(_kernel(COPY, H100_SXM), H100_SXM).estimated_us
    h200 = estimate_kernel(_kernel(COPY, H100_SXM), H200_SXM).estimated_us
    assert h200 < h100 * 0.82   # 3352 GB/s (H100, XLA's spec) over 4167 (H200, the copy measured)


def test_loop_emitted_transpose_is_flagged_and_slower():
    tiled = _kernel(TRANSPOSE, H100_SXM)
    assert tiled.analysis.emitter == EmitterKind.TRANSPOSE
    spec = plan_loop_kernel(tiled.fusion, tiled.analysis, H100_SXM, "k_loop")
    loop = KernelPlan(tiled.fusion, "k_loop", tiled.analysis, spec, EMITTERS[EmitterKind.LOOP])
    t, lp = estimate_kernel(tiled, H100_SXM), estimate_kernel(loop, H100_SXM)
    assert [r.coalesced for r in t.coalescing.reads] == [True]
    assert [r.coalesced for r in lp.coalescing.reads] == [False]
    assert lp.bytes == t.bytes and lp.bytes_moved > 4 * t.bytes_moved
    assert lp.estimated_us > 4 * t.estimated_us
    assert "UNCOALESCED" in lp.report_line() and "UNCOALESCED" not in t.report_line()


def test_flops():
    body = """  p0 = f32[128,256] parameter(0)
  p1 = f32[256,64] parameter(1)
  d = f32[128,64] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT e = f32[128,64] exponential(d)"""
    comp = parse_module(_fusion_module(body, ["f32[128,256]", "f32[256,64]"], "f32[128,64]")).entry.root
    flops, f64 = count_flops(comp.fused_computation)
    assert flops == 2 * 128 * 64 * 256 + 8 * 128 * 64 and f64 == 0
    reduce = """HloModule m
add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}
fusion {
  p0 = f64[100,50] parameter(0)
  z = f64[] constant(0)
  ROOT r = f64[100] reduce(p0, z), dimensions={1}, to_apply=add
}
ENTRY e {
  p0 = f64[100,50] parameter(0)
  ROOT fusion = f64[100] fusion(p0), kind=kInput, calls=fusion
}
"""
    assert count_flops(parse_module(reduce).entry.root.fused_computation) == (5000, 5000)


def test_compute_bound_kernel():
    body = "\n".join(["  p0 = f32[1048576] parameter(0)"] +
                     [f"  t{i} = f32[1048576] tanh({'p0' if i == 0 else f't{i - 1}'})" for i in range(200)] +
                     ["  ROOT r = f32[1048576] negate(t199)"])
    e = estimate_kernel(_kernel(_fusion_module(body, ["f32[1048576]"], "f32[1048576]"), A100_SXM), A100_SXM)
    assert e.bound == "compute" and e.compute_us > 5 * (e.read_us + e.write_us)
    assert e.pct_of_roofline < 20


@pytest.mark.parametrize("threads,shared,regs,blocks,by", [
    (128, 0, None, 16, "threads"),            # 2048 threads / 128
    (32, 0, None, 32, "blocks"),              # the 32-block limit
    (256, 64 * 1024, None, 3, "shared memory"),
    (256, 0, 128, 2, "registers"),            # 128 x 256 = 32768 registers per block
    (1024, 0, 255, 0, "registers"),           # does not fit at all
])
def test_occupancy(threads, shared, regs, blocks, by):
    occ = occupancy(H100_SXM, threads, 10_000, shared, regs)
    assert occ.blocks_per_core == blocks and occ.limited_by == by
    if blocks:
        assert occ.waves == -(-10_000 // (blocks * H100_SXM.core_count))


def test_device_named():
    assert device_named("H200") is H200_SXM and device_named("a100") is A100_SXM
    with pytest.raises(ValueError, match="known"):
        device_named("v100")


def test_fusions_report_and_summary(tmp_path):
    from hlo_compile.cli.compile import main
    path = tmp_path / "t.hlo"
    path.write_text(TRANSPOSE)
    r = CliRunner().invoke(main, [str(path), "--emit=fusions", "--arch", "sm_90"])
    assert r.exit_code == 0, r.output
    assert "cost (NVIDIA H100 SXM)" in r.output and "% of the bandwidth roofline" in r.output
    r = CliRunner().invoke(main, [str(path), "--dump-to", str(tmp_path / "d"), "--arch", "sm_90"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    (k,) = summary["kernels"]
    n = 4096 * 4096 * 4
    assert k["bytes"] == 2 * n and k["flops"] == 0 and k["coalesced"] == [True]
    assert 2 * n / H100_SXM.memory_bandwidth * 1e6 < k["estimated_us"] < 2 * n / H100_SXM.memory_bandwidth * 1e6 * 1.1
    assert 90 < k["pct_of_bandwidth_roofline"] <= 100
    assert summary["cost_model"]["device"] == "NVIDIA H100 SXM"


def test_device_flag_picks_the_cost_models_gpu(tmp_path):
    """hlo-compile --device chooses the GPU of the estimate (any case); the default follows --arch;
    an unknown name is exit 2 without a traceback."""
    from pathlib import Path

    from click.testing import CliRunner

    from hlo_compile.cli.compile import main
    gelu = str(Path(__file__).parent.parent / "examples" / "gelu.hlo")

    def cost_line(*args: str) -> str:
        r = CliRunner().invoke(main, [gelu, "--emit=fusions", "-q", *args])
        assert r.exit_code == 0, r.output
        return next(line for line in r.output.splitlines() if line.startswith("// cost model"))
    assert "(NVIDIA A100 SXM)" in cost_line()
    assert "(NVIDIA H100" in cost_line("--arch", "sm_90")
    h200 = cost_line("--device", "H200")
    assert "(NVIDIA H200" in h200
    us = [float(line.split(": ")[1].split(" us")[0]) for line in (cost_line(), h200)]
    assert us[1] < us[0]   # same bytes on a faster memory
    r = CliRunner().invoke(main, [gelu, "--emit=fusions", "--device", "v100"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_calibrated_on_the_h200_run():
    """The model against the committed H200 run (bench/calibrate.py): the geometric-mean ratio
    model/measured near 1, every module within a factor 2.75 (concatenate and scatter, slow
    kernels, are the worst: x0.44, x0.40), and within 25% where the kernel ran at 85% of the
    copy roofline or more (transposes, row/column reductions, softmax): there the model's
    bytes over bandwidth is the whole story."""
    import math

    from bench.calibrate import DEFAULT_RESULTS, calibrate, summary
    results = json.loads(DEFAULT_RESULTS.read_text())
    device, rows = calibrate(results)
    assert device is H200_SXM and len(rows) == 16
    s = summary(rows)
    assert 0.75 <= s["geomean_ratio"] <= 1.33, s
    assert s["max_abs_log_ratio"] < math.log(2.75), s
    measured = results["suites"]["gpu"]["sections"]["gpu kernels"]["rows"]
    pct = {r["name"]: r["extra"]["pct_copy_roofline"] for r in measured}
    efficient = {r.module: round(r.ratio, 2) for r in rows if pct[r.module] >= 85}
    assert len(efficient) == 7 and all(0.8 <= v <= 1.25 for v in efficient.values()), efficient
