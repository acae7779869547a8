"""Launch limits checked before launching (codegen/launch_limits.py): each limit hit by a
launch shaped to break it, the message naming the kernel, fusion and line; the plan-time
check through hlo-compile (exit 2, no traceback); ptxas's registers and shared memory of
every kernel of the JAX corpus (and a time-bounded sample of XLA's) at sm_80 and sm_90."""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.gpu import archs
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.gpu.device_info import A100_SXM, H100_SXM
from hlo_compile.codegen.launch_limits import (LaunchLimitError, block_registers, check_plan, launch_violations,
                                               needs_dynamic_shared_optin)
from hlo_compile.codegen.target import LaunchDims
from hlo_compile.options import CompileOptions

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "examples" / "gelu.hlo"


@pytest.mark.parametrize("grid,block,static,dynamic,regs,phrase", [
    ((1, 1, 1), (1025, 1, 1), 0, 0, None, "block x = 1025 exceeds 1024"),
    ((1, 1, 1), (64, 32, 1), 0, 0, None, "block of 2048 threads exceeds 1024"),
    ((1, 1, 1), (1, 1, 65), 0, 0, None, "block z = 65 exceeds 64"),
    ((2**31, 1, 1), (128, 1, 1), 0, 0, None, "grid x = 2147483648 exceeds 2147483647"),
    ((1, 65536, 1), (128, 1, 1), 0, 0, None, "grid y = 65536 exceeds 65535"),
    ((1, 1, 65536), (128, 1, 1), 0, 0, None, "grid z = 65536 exceeds 65535"),
    ((1, 1, 1), (128, 1, 1), 48 * 1024 + 16, 0, None, "static shared memory exceeds the 49152 B static limit"),
    ((1, 1, 1), (128, 1, 1), 0, 232448 + 1, None, "exceeds the device's 232448 B per block"),
    ((1, 1, 1), (1024, 1, 1), 0, 0, 72, "registers x 1024 threads"),
    ((1, 1, 1), (32, 1, 1), 0, 0, 256, "256 registers per thread exceed 255"),
])
def test_each_limit(grid, block, static, dynamic, regs, phrase):
    problems = launch_violations(H100_SXM, grid, block, static, dynamic, regs)
    assert any(phrase in p for p in problems), problems


def test_launches_at_the_limits_pass():
    assert launch_violations(H100_SXM, (2**31 - 1, 65535, 65535), (1024, 1, 1), 48 * 1024, 0, 64) == []
    assert launch_violations(H100_SXM, (1, 1, 1), (128, 1, 1), 0, 232448, 255) == []
    # A100's opt-in is smaller than H100's
    assert launch_violations(A100_SXM, (1, 1, 1), (128, 1, 1), 0, 200 * 1024)


def test_register_allocation_rounds_per_warp():
    assert block_registers(H100_SXM, 1024, 64) == 65536
    assert block_registers(H100_SXM, 1024, 65) == 32 * 2304       # 65 x 32 = 2080 -> 2304 per warp
    assert block_registers(H100_SXM, 100, 32) == 4 * 1024          # 4 warps
    assert launch_violations(H100_SXM, (1, 1, 1), (1024, 1, 1), registers=64) == []
    assert launch_violations(H100_SXM, (1, 1, 1), (1024, 1, 1), registers=65)


def test_dynamic_shared_optin():
    assert not needs_dynamic_shared_optin(48 * 1024)
    assert needs_dynamic_shared_optin(48 * 1024 + 1)
    assert needs_dynamic_shared_optin(1024, static_shared=48 * 1024)
    assert not needs_dynamic_shared_optin(0, static_shared=48 * 1024)


def _plan():
    return plan_module(parse_module(GELU.read_text(), str(GELU)), CompileOptions(arch="sm_90"))


def test_plan_check_names_kernel_fusion_and_line():
    plan = _plan()
    check_plan(plan)   # the real plan launches
    k = plan.kernels[0]
    k.spec = replace(k.spec, launch=LaunchDims(k.launch.grid, (2048, 1, 1)))
    with pytest.raises(LaunchLimitError) as e:
        check_plan(plan)
    msg = e.value.message
    assert f"kernel '{k.kernel_name}'" in msg and f"'%{k.fusion.name}'" in msg and "2048 threads" in msg
    if k.fusion.location is not None:
        assert f"line {k.fusion.location.line}" in msg


def test_ptxas_registers_are_checked():
    from hlo_compile.targets.nvptx.ptxas import KernelResources
    plan = _plan()
    k = plan.kernels[0]
    k.spec = replace(k.spec, launch=LaunchDims(k.launch.grid, (1024, 1, 1)))
    check_plan(plan, {k.kernel_name: KernelResources(registers=64)})
    with pytest.raises(LaunchLimitError, match="registers x 1024 threads"):
        check_plan(plan, {k.kernel_name: KernelResources(registers=128)})


def test_hlo_compile_refuses_at_plan_time(monkeypatch):
    """A device whose blocks hold only 64 threads: the loop kernels of 128 break it, and
    hlo-compile says so (exit 2, the kernel named, no traceback) at --emit=fusions."""
    from hlo_compile.cli.compile import main
    small = replace(H100_SXM, threads_per_block_limit=64)
    monkeypatch.setitem(archs.ARCHS, "sm_90", replace(archs.ARCHS["sm_90"], device=small))
    r = CliRunner().invoke(main, [str(GELU), "--emit=fusions", "--arch", "sm_90"])
    assert r.exit_code == 2, r.output
    assert "cannot launch" in r.output and "exceeds 64" in r.output and "Traceback" not in r.output


# ---- every corpus kernel through ptxas -v -----------------------------------------------------------

MAX_SPILL_BYTES = 0          # our kernels spill nothing today; a spill is a regression to look at
CORPUS = Path(os.environ.get("HLO_CORPUS", ROOT.parent / "shared" / "corpus"))


def _ptxas():
    from hlo_compile.targets.nvptx.toolkit import find_libdevice, find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    try:
        find_libdevice()
    except Exception as e:   # noqa: BLE001 - any reason the toolkit is incomplete
        pytest.skip(f"libdevice not found: {e}")


def _corpus_files(sub: str, limit_bytes: int) -> list[Path]:
    base = CORPUS / sub
    if not base.is_dir():
        pytest.skip(f"corpus not found at {base}")
    return sorted(p for p in base.rglob("*.hlo") if p.stat().st_size <= limit_bytes) + \
        sorted(p for p in base.rglob("*.txt") if p.stat().st_size <= limit_bytes)


def _check_file(path: Path, arch: str) -> tuple[list[str], int]:
    """Compile ``path`` to a cubin for ``arch``; the problems ptxas's figures show (the cubin
    stage's launch check raises for registers x threads and shared memory)."""
    from hlo_compile.hlo.errors import HloError
    from hlo_compile.driver.pipeline import run_pipeline
    try:
        module = parse_module(path.read_text(), str(path))
        result = run_pipeline(module, CompileOptions(arch=arch), emit="cubin")
    except LaunchLimitError as e:
        return [f"{path.name}: {e.message}"], 0
    except HloError:
        return [], 0       # refused by name elsewhere; the corpus tests cover refusals
    out = []
    kernels = result.values["cubin"].kernels
    for name, res in kernels.items():
        spills = res.spill_stores_bytes + res.spill_loads_bytes
        if spills > MAX_SPILL_BYTES:
            out.append(f"{path.name}: kernel {name} spills {spills} B at {arch}")
    return out, len(kernels)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_jax_corpus_kernels_fit_the_device(arch):
    _ptxas()
    files = _corpus_files("jax", 400_000)
    problems, kernels, t0 = [], 0, time.monotonic()
    for path in files:
        if time.monotonic() - t0 > 240:
            break
        found, n = _check_file(path, arch)
        problems, kernels = problems + found, kernels + n
    assert kernels >= 50   # 72 modules, most with several kernels
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_xla_corpus_sample_fits_the_device(arch):
    _ptxas()
    files = _corpus_files("xla", 60_000)[::5]
    problems, kernels, t0 = [], 0, time.monotonic()
    for path in files:
        if time.monotonic() - t0 > 120:
            break
        found, n = _check_file(path, arch)
        problems, kernels = problems + found, kernels + n
    assert kernels >= 20
    assert not problems, "\n".join(problems)


def test_zero_block_grid_is_not_a_violation():
    """A zero-element output plans grid [0, 1, 1]: the runtime skips the launch, nothing to refuse
    (the fuzzer's zero-element transpose was refused by the first version of this check)."""
    from hlo_compile.gpu.device_info import device_named
    from hlo_compile.codegen.launch_limits import launch_violations
    dev = device_named("h100")
    assert launch_violations(dev, (0, 1, 1), (1, 1, 1)) == []
    assert launch_violations(dev, (1, 1, 1), (0, 1, 1))   # an empty block with blocks to run is wrong
