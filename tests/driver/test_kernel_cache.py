"""The persistent compile cache: keyed on inputs, options and tool versions; atomic entries,
corrupt ones ignored and rewritten, bounded size; hlo-compile's --cache-dir/--no-cache and
$HLO_COMPILE_CACHE_DIR; a warm compile reads llvm-opt (and so the PTX) from the cache."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as compile_main
from hlo_compile.driver.kernel_cache import KernelCache, cache_key, default_cache_dir
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

REPO = Path(__file__).resolve().parents[2]
GELU = REPO / "examples" / "gelu.hlo"


def test_put_get_and_key_parts(tmp_path):
    c = KernelCache(tmp_path)
    k = cache_key("a", "bc")
    assert k != cache_key("ab", "c")  # parts are length-prefixed
    assert c.get(k) is None
    assert c.put(k, b"payload")
    assert c.get(k) == b"payload"
    assert (c.hits, c.misses) == (1, 1)
    assert not list(tmp_path.rglob(".tmp-*"))  # the temporary file was renamed into place


def test_corrupt_entry_is_a_miss_and_removed(tmp_path):
    c = KernelCache(tmp_path)
    k = cache_key("x")
    c.put(k, b"good bytes")
    p = c.path(k)
    data = p.read_bytes()
    p.write_bytes(data[:-3] + b"bad")
    assert c.get(k) is None and not p.exists()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"garbage")
    assert c.get(k) is None
    c.put(k, b"good bytes")
    assert c.get(k) == b"good bytes"


def test_size_bound_evicts_least_recently_used(tmp_path):
    c = KernelCache(tmp_path, max_bytes=3000)
    keys = [cache_key(str(i)) for i in range(5)]
    for i, k in enumerate(keys):
        c.put(k, bytes(900))
        os.utime(c.path(k), (1000 + i, 1000 + i))  # a clear age order
    assert sum(size for _, size, _ in c.entries()) <= 3000
    # the newest survive, the oldest went first
    assert c.get(keys[-1]) is not None and c.get(keys[0]) is None


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_COMPILE_CACHE_DIR", str(tmp_path / "a"))
    assert default_cache_dir() == tmp_path / "a"
    monkeypatch.delenv("HLO_COMPILE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "hlo-compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "hlo-compile"


def test_tests_never_write_the_users_cache():
    assert "HLO_COMPILE_CACHE_DIR" in os.environ
    assert not Path(os.environ["HLO_COMPILE_CACHE_DIR"]).resolve().is_relative_to(Path.home() / ".cache")


def _ptx_run(cache, options=CompileOptions()):  # noqa: B008 - frozen, shared on purpose
    pytest.importorskip("llvmlite")
    try:
        from hlo_compile.targets.nvptx.toolkit import find_libdevice
        find_libdevice()
    except Exception:
        pytest.skip("no libdevice: the llvm-opt stage cannot run here")
    return run_pipeline(parse_module(GELU.read_text()), options, emit="ptx", cache=cache)


def test_warm_pipeline_reads_llvm_opt_from_cache_with_the_same_ptx(tmp_path):
    cache = KernelCache(tmp_path)
    cold = _ptx_run(cache)
    assert cold.cache_hits == []
    warm = _ptx_run(cache)
    assert warm.cache_hits == ["llvm-opt"]
    assert warm.artifacts["ptx"] == cold.artifacts["ptx"]
    assert warm.artifacts["llvm-opt"] == cold.artifacts["llvm-opt"]
    # other options are another key
    other = _ptx_run(cache, CompileOptions(arch="sm_90"))
    assert other.cache_hits == [] and ".target sm_90" in other.artifacts["ptx"]


def test_corrupt_pipeline_entry_is_recompiled(tmp_path):
    cache = KernelCache(tmp_path)
    cold = _ptx_run(cache)
    for _, _, p in cache.entries():
        p.write_bytes(p.read_bytes()[:-10])
    again = _ptx_run(cache)
    assert again.cache_hits == [] and again.artifacts["ptx"] == cold.artifacts["ptx"]
    assert _ptx_run(cache).cache_hits == ["llvm-opt"]  # rewritten


def test_cli_cache_dir_and_no_cache(tmp_path):
    _ptx_run(None)  # skips where libdevice is missing
    runner = CliRunner()
    d = tmp_path / "c"
    r1 = runner.invoke(compile_main, [str(GELU), "--emit=ptx", "--cache-dir", str(d)])
    assert r1.exit_code == 0, r1.output
    assert len(KernelCache(d).entries()) == 3  # the kernel under its names and canonical ones, the whole result
    r2 = runner.invoke(compile_main, [str(GELU), "--emit=ptx", "--cache-dir", str(d)])
    assert r2.exit_code == 0 and r2.stdout == r1.stdout
    e = tmp_path / "none"
    r3 = runner.invoke(compile_main, [str(GELU), "--emit=ptx", "--no-cache", "--cache-dir", str(e)])
    assert r3.exit_code == 0 and r3.stdout == r1.stdout and not e.exists()
    r4 = runner.invoke(compile_main, [str(GELU), "--emit=ptx"])  # $HLO_COMPILE_CACHE_DIR (conftest)
    assert r4.exit_code == 0
    assert KernelCache(default_cache_dir()).entries()


# ---- the whole result (a warm hlo-compile reads it without parsing or compiling) ---------------

def _invoke(args, **kw):
    return CliRunner().invoke(compile_main, [str(a) for a in args], **kw)


def test_warm_compile_prints_the_stored_result_without_parsing(tmp_path, monkeypatch):
    d = tmp_path / "c"
    cold = _invoke([GELU, "--emit=fusions", "--cache-dir", d])
    assert cold.exit_code == 0, cold.output
    import hlo_compile.cli.common as common

    def no_parsing(*a, **k):
        raise AssertionError("a warm compile parsed the module")
    monkeypatch.setattr(common, "modules_of_text", no_parsing)
    warm = _invoke([GELU, "--emit=fusions", "--cache-dir", d])
    assert warm.exit_code == 0 and warm.stdout == cold.stdout
    # another stage, another arch or changed text: not that result (it parses, and fails here)
    for args in (["--emit=hlo"], ["--emit=fusions", "--arch=sm_90"], ["--emit=fusions", "--short"]):
        miss = _invoke([GELU, *args, "--cache-dir", d])
        assert miss.exit_code != 0 and "parsed the module" in miss.output, args
    changed = tmp_path / "g.hlo"
    changed.write_text(GELU.read_text() + "\n")
    assert _invoke([changed, "--emit=fusions", "--cache-dir", d]).exit_code != 0


def test_warm_compile_restores_the_dump_and_notes(tmp_path):
    _ptx_run(None)  # skips where libdevice is missing
    d = tmp_path / "c"
    cold_dir, warm_dir = tmp_path / "d1", tmp_path / "d2"
    cold = _invoke([GELU, "--dump-to", cold_dir, "--cache-dir", d])
    assert cold.exit_code == 0, cold.output
    warm = _invoke([GELU, "--dump-to", warm_dir, "--cache-dir", d])
    assert warm.exit_code == 0 and warm.stderr == cold.stderr.replace(str(cold_dir), str(warm_dir))
    files = sorted(p.name for p in cold_dir.iterdir())
    assert files == sorted(p.name for p in warm_dir.iterdir()) and len(files) > 5
    for name in files:
        assert (cold_dir / name).read_bytes() == (warm_dir / name).read_bytes(), name


def test_damaged_result_entry_is_a_miss(tmp_path):
    d = tmp_path / "c"
    cold = _invoke([GELU, "--emit=fusions", "--cache-dir", d])
    from hlo_compile.driver.kernel_cache import pack
    cache = KernelCache(d)
    for _, _, p in cache.entries():  # valid entries holding something that is not a result
        cache.put(p.stem, pack({"outputs": "nonsense"}))
    third = _invoke([GELU, "--emit=fusions", "--cache-dir", d])
    assert third.exit_code == 0 and third.stdout == cold.stdout


def test_a_large_result_is_not_kept_whole(tmp_path, monkeypatch):
    from hlo_compile.driver.kernel_cache import ResultStore
    monkeypatch.setattr(ResultStore, "MAX_BYTES", 100)  # gelu's fusion report is larger
    d = tmp_path / "c"
    first = _invoke([GELU, "--emit=fusions", "--cache-dir", d])
    assert first.exit_code == 0 and not KernelCache(d).entries()
    second = _invoke([GELU, "--emit=fusions", "--cache-dir", d])  # compiled again, the same text
    assert second.exit_code == 0 and second.stdout == first.stdout
