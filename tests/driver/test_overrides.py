"""A kernel's IR or PTX from a file: --override-dir, --xla_gpu_llvm_ir_file, --xla_gpu_ptx_file
(hlo_compile/driver/overrides.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile.cli.compile import main as compile_main
from hlo_compile.cli.run import main as run_main

GELU = Path(__file__).resolve().parents[2] / "examples" / "gelu.hlo"
KERNEL_LL = "module_0000.gelu.fusion.ir-no-opt.ll"
KERNEL_PTX = "module_0000.gelu.fusion.ptx"
HALF = 'fmul float 0x3FE0000000000000, %".4"'      # 0.5 * x in the emitted gelu
QUARTER = 'fmul float 0x3FD0000000000000, %".4"'   # 0.25 * x: every result halved


def _invoke(cmd, *args, env=None):
    return CliRunner().invoke(cmd, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dump")
    r = _invoke(compile_main, GELU, "--dump-to", d, "--no-cache")
    assert r.exit_code == 0, r.output
    assert (d / KERNEL_LL).is_file() and (d / KERNEL_PTX).is_file()
    return d


def _override_dir(tmp_path: Path, dump: Path, name: str = KERNEL_LL, edit: bool = True) -> Path:
    d = tmp_path / "ov"
    d.mkdir(exist_ok=True)
    text = (dump / name).read_text()
    if edit:
        assert text.count(HALF) == 1
        text = text.replace(HALF, QUARTER)
    (d / name).write_text(text)
    return d


def test_edited_ll_runs_on_host_and_is_detected(tmp_path, dump):
    d = _override_dir(tmp_path, dump)
    out = tmp_path / "out.npz"
    r = _invoke(run_main, GELU, "--platform=host", "--override-dir", d, "--output-literals", out, "--seed", 3)
    assert r.exit_code == 1, r.output
    verdict = [line for line in r.output.splitlines() if "results differ from the interpreter" in line]
    assert verdict and f"kernel fusion: from override {d / KERNEL_LL}" in verdict[0]
    # the edit halves every result: compare with the unedited kernel's
    r = _invoke(run_main, GELU, "--platform=host", "--output-literals", tmp_path / "ref.npz", "--seed", 3)
    assert r.exit_code == 0, r.output
    got, ref = np.load(out)["out0"], np.load(tmp_path / "ref.npz")["out0"]
    np.testing.assert_allclose(got, ref * 0.5, rtol=1e-5, atol=1e-7)


def test_identity_override_matches(tmp_path, dump):
    d = _override_dir(tmp_path, dump, edit=False)
    r = _invoke(run_main, GELU, "--platform=host", "--override-dir", d)
    assert r.exit_code == 0, r.output
    assert "results match the interpreter reference" in r.output
    assert f"kernel fusion: from override {d / KERNEL_LL}" in r.output


def test_ptx_override_refused_on_host(tmp_path, dump):
    d = _override_dir(tmp_path, dump, KERNEL_PTX, edit=False)
    r = _invoke(run_main, GELU, "--platform=host", "--override-dir", d)
    assert r.exit_code == 2, r.output
    assert str(d / KERNEL_PTX) in r.output and "cuda only" in r.output
    r = _invoke(run_main, GELU, "--platform=host", f"--xla_gpu_ptx_file={dump / 'module_0000.gelu.ptx'}")
    assert r.exit_code == 2 and "cuda only" in r.output, r.output


@pytest.mark.parametrize("name", ["module_0000.gelu.fusion_7.ir-no-opt.ll", "notes.txt", "module_0000.gelu.ptx"])
def test_unknown_file_refused(tmp_path, dump, name):
    d = tmp_path / "ov"
    d.mkdir()
    (d / name).write_text("whatever\n")
    for cmd, args in ((run_main, ["--platform=host"]), (compile_main, ["--emit=ptx", "--no-cache"])):
        r = _invoke(cmd, GELU, *args, "--override-dir", d)
        assert r.exit_code == 2, r.output
        assert name in r.output and "matches no kernel" in r.output and "fusion" in r.output.split("kernels:")[-1]


def test_override_must_keep_the_entry_point(tmp_path, dump):
    d = _override_dir(tmp_path, dump, edit=False)
    f = d / KERNEL_LL
    f.write_text(f.read_text().replace('@"fusion"(', '@"fusion_renamed"('))
    r = _invoke(run_main, GELU, "--platform=host", "--override-dir", d)
    assert r.exit_code == 2, r.output
    assert "does not define the kernel's entry point @fusion" in r.output and "ptr, ptr" in r.output


def test_xla_gpu_llvm_ir_file_replaces_the_module(tmp_path, dump):
    d = _override_dir(tmp_path, dump)
    f = d / KERNEL_LL  # named with the module's dump prefix: it is the module's IR
    r = _invoke(run_main, GELU, "--platform=host", f"--xla_gpu_llvm_ir_file={f}")
    assert r.exit_code == 1, r.output
    assert f"kernel fusion: from override {f}" in r.output
    r = _invoke(run_main, GELU, "--platform=host", env={"XLA_FLAGS": f"--xla_gpu_llvm_ir_file={f}"})
    assert r.exit_code == 1 and f"from override {f}" in r.output, r.output
    other = tmp_path / "module_0001.gelu.ir-no-opt.ll"
    shutil.copy(f, other)
    r = _invoke(run_main, GELU, "--platform=host", f"--xla_gpu_llvm_ir_file={other}")
    assert r.exit_code == 2 and str(other) in r.output and "unused" in r.output, r.output


def test_ptx_for_sm80_contains_the_edit(tmp_path, dump):
    d = _override_dir(tmp_path, dump)
    r = _invoke(compile_main, GELU, "--emit=ptx", "--arch=sm_80", "--override-dir", d, "--no-cache")
    assert r.exit_code == 0, r.output
    assert "0f3E800000" in r.output  # 0.25
    r = _invoke(compile_main, GELU, "--emit=ptx", "--arch=sm_80", "--no-cache")
    assert "0f3E800000" not in r.output and "0f3F000000" in r.output  # 0.5


def test_dump_names_the_override_and_cache_is_not_shared(tmp_path, dump):
    d = _override_dir(tmp_path, dump)
    cache = tmp_path / "cache"
    plain = _invoke(compile_main, GELU, "--emit=ptx", "--cache-dir", cache)
    out = tmp_path / "dump2"
    r = _invoke(compile_main, GELU, "--override-dir", d, "--dump-to", out, "--cache-dir", cache)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kernels"][0]["override"] == str(d / KERNEL_LL)
    assert f"kernel fusion: from override {d / KERNEL_LL}" in (out / "module_0000.gelu.fusions.txt").read_text()
    assert "0f3E800000" in (out / KERNEL_PTX).read_text()
    again = _invoke(compile_main, GELU, "--emit=ptx", "--cache-dir", cache)  # the override was not cached
    assert again.output == plain.output and "0f3E800000" not in again.output
    ov = _invoke(compile_main, GELU, "--emit=ptx", "--override-dir", d, "--cache-dir", cache)
    assert "0f3E800000" in ov.output  # nor served from the cache
