"""Kernels optimised and turned into PTX one by one (targets/nvptx/kernels.py): in worker
processes with -j N, the same bytes as -j 1; the module's PTX put together from the kernels'
(one header, shared declarations once, clashing names renamed); an entry per kernel in the
cache, so a module with one fusion changed compiles that kernel alone."""
from __future__ import annotations

import re
from collections import Counter

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as compile_main
from hlo_compile.driver.kernel_cache import KernelCache
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.targets.nvptx import kernels as kernels_mod
from hlo_compile.targets.nvptx.kernels import merge_ptx, ptx_items

from codegen_helpers import fusion_chain, needs_libdevice


_needs_libdevice = needs_libdevice


def _module(n: int, changed: int | None = None) -> str:
    return fusion_chain(n, changed)


N = 6


def test_parallel_ptx_is_the_same_bytes_as_one_process(tmp_path, monkeypatch):
    _needs_libdevice()
    monkeypatch.setattr(kernels_mod, "PARALLEL_MIN_KERNELS", 4)  # fan out for a small module
    monkeypatch.setattr(kernels_mod, "free_cpus", lambda: 2)      # whatever else this machine runs
    calls = []
    real_pool = kernels_mod.ProcessPoolExecutor

    def pool(*args, **kwargs):
        calls.append(kwargs.get("max_workers"))
        return real_pool(*args, **kwargs)
    monkeypatch.setattr(kernels_mod, "ProcessPoolExecutor", pool)
    src = tmp_path / "many.hlo"
    src.write_text(_module(N))
    runner = CliRunner()
    one = runner.invoke(compile_main, [str(src), "--emit=ptx", "--no-cache", "-j", "1"])
    two = runner.invoke(compile_main, [str(src), "--emit=ptx", "--no-cache", "-j", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, (one.output, two.output)
    assert one.stdout == two.stdout
    assert calls == [2]  # -j 2 used two workers, -j 1 none
    assert len(re.findall(r"\.entry\s", one.stdout)) == N
    assert len(re.findall(r"^\.version", one.stdout, re.M)) == 1
    ll1 = runner.invoke(compile_main, [str(src), "--emit=llvm-opt", "--no-cache", "-j", "1"])
    ll2 = runner.invoke(compile_main, [str(src), "--emit=llvm-opt", "--no-cache", "-j", "2"])
    assert ll1.exit_code == 0 and ll1.stdout == ll2.stdout
    assert len(re.findall(r"^define\b.*ptx_kernel", ll1.stdout, re.M)) == N


def test_changing_one_fusion_compiles_one_kernel(tmp_path, monkeypatch):
    _needs_libdevice()
    from hlo_compile.driver import stages
    calls: Counter = Counter()
    real = stages.compile_to_ptx

    def counted(ir_text, arch, names, **kw):
        calls[names[0]] += 1
        return real(ir_text, arch, names, **kw)
    monkeypatch.setattr(stages, "compile_to_ptx", counted)
    cache = KernelCache(tmp_path / "c")
    opts = CompileOptions()
    cold = run_pipeline(parse_module(_module(4)), opts, emit="ptx", cache=cache)
    assert sum(calls.values()) == 4
    calls.clear()
    warm = run_pipeline(parse_module(_module(4)), opts, emit="ptx", cache=cache)
    assert sum(calls.values()) == 0 and warm.artifacts["ptx"] == cold.artifacts["ptx"]
    assert warm.cache_hits == ["llvm-opt"]
    assert warm.kernel_seconds == {}  # nothing emitted either
    changed = run_pipeline(parse_module(_module(4, changed=2)), opts, emit="ptx", cache=cache)
    # fusion v3 calls %f2: it alone (compiled under its canonical name: ``kernel_names``)
    assert sum(calls.values()) == 1 and changed.values["llvm-opt"].from_cache == 3
    new, old = changed.values["llvm-opt"].optimized, cold.values["llvm-opt"].optimized
    assert [n for n in new if new[n] != old[n]] == ["v3"]
    assert changed.artifacts["ptx"] != cold.artifacts["ptx"]
    alone = run_pipeline(parse_module(_module(4, changed=2)), opts, emit="ptx")
    assert changed.artifacts["ptx"] == alone.artifacts["ptx"]  # as compiled without the cache


HEAD = ".version 7.0\n.target sm_80\n.address_size 64\n\n"


def _kernel(name: str, extra: str = "") -> str:
    return HEAD + extra + f".visible .entry {name}(\n)\n{{\n\tret;\n}}\n"


def test_merge_keeps_one_header_shared_declarations_once_and_renames_clashes():
    shared = ".extern .func (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0\n)\n;\n"
    a = _kernel("ka", shared + ".global .align 4 .b8 table[8] = {1, 0, 0, 0, 2, 0, 0, 0};\n")
    b = _kernel("kb", shared + ".global .align 4 .b8 table[8] = {3, 0, 0, 0, 4, 0, 0, 0};\n").replace(
        "\tret;", "\tld.global.u32 %r1, [table];\n\tret;")
    merged = merge_ptx([a, b], ["ka", "kb"])
    assert merged.count(".version") == 1 and merged.count("vprintf\n(") == 1
    assert ".b8 table[8] = {1," in merged and ".b8 table_kb[8] = {3," in merged
    assert "[table_kb]" in merged and "[table]" not in merged.split(".entry kb")[1]
    header, items, _ = ptx_items(merged)
    assert [e for e, _ in items if e] == ["ka", "kb"] and len(header) == 3
    with pytest.raises(ValueError):
        merge_ptx([a, _kernel("kc").replace("sm_80", "sm_90")], ["ka", "kc"])


def test_runnable_elsewhere_reads_this_moment_not_the_average(monkeypatch, tmp_path):
    import builtins
    real_open = builtins.open
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("2.90 2.50 1.20 3/412 12345\n")  # a high average, 2 others running now
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(loadavg if f == "/proc/loadavg" else f, *a, **k))
    assert kernels_mod.runnable_elsewhere() == 2
    loadavg.write_text("2.90 2.50 1.20 1/412 12345\n")  # the load has gone: this process alone
    assert kernels_mod.runnable_elsewhere() == 0


def test_workers_only_on_free_cores(monkeypatch):
    monkeypatch.setattr(kernels_mod, "default_jobs", lambda: 2)
    monkeypatch.setattr(kernels_mod, "runnable_elsewhere", lambda: 0)  # this process alone
    assert kernels_mod.free_cpus() == 2
    monkeypatch.setattr(kernels_mod, "runnable_elsewhere", lambda: 3)  # others keep both busy
    assert kernels_mod.free_cpus() == 1
    started = []
    monkeypatch.setattr(kernels_mod, "ProcessPoolExecutor", lambda *a, **k: started.append(k) or 1 / 0)
    monkeypatch.setattr(kernels_mod, "PARALLEL_MIN_KERNELS", 1)

    class Fake:
        def __init__(self, text):
            self.llvm_opt, self.ptx, self.seconds = text, text, {}
    got = kernels_mod.compile_kernels([("a", "x"), ("b", "y")], "sm_80", jobs=2,
                                      compile_one=lambda text, arch, names, opt_level: Fake(text))
    assert [r.ptx for r in got] == ["x", "y"] and not started  # one process: no pool
