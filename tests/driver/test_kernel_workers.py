"""One compile's kernels emitted and compiled in forked workers (driver/kernel_workers.py): the
bytes of -j 1, each kernel compiled as soon as it is emitted (none left for this process), an
emission error raised as -j 1 raises it, the cache filled as -j 1 fills it, no worker left behind."""
from __future__ import annotations

import multiprocessing
import threading

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen import compiler
from hlo_compile.driver import kernel_workers, stages
from hlo_compile.driver.kernel_cache import KernelCache
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.options import CompileOptions
from hlo_compile.targets.nvptx import kernels as kernels_mod

from codegen_helpers import fusion_chain, needs_libdevice

N = 6


def _module(n: int) -> str:
    """``n`` fusions that differ, then ``f1`` again: ``n`` kernels."""
    return fusion_chain(n, again=1)


@pytest.fixture
def forked(monkeypatch):
    """Workers for a small module, forked whatever else this machine (or pytest-xdist) runs."""
    needs_libdevice()
    monkeypatch.setattr(kernels_mod, "PARALLEL_MIN_KERNELS", 4)
    monkeypatch.setattr(kernels_mod, "free_cpus", lambda: 2)
    monkeypatch.setattr(kernel_workers, "can_fork", lambda: True)
    started = []
    real = kernel_workers.KernelWorkers.emit

    def emit(self, *a, **k):
        started.append(a[2])  # the workers the llvm stage asked for
        return real(self, *a, **k)
    monkeypatch.setattr(kernel_workers.KernelWorkers, "emit", emit)
    return started


def _count(monkeypatch, owner, name: str) -> list:
    """Calls of ``owner.name`` made in this process (a worker's calls are its own)."""
    calls: list = []
    real = getattr(owner, name)

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_workers_make_the_bytes_of_one_process_and_this_process_compiles_nothing(forked, monkeypatch):
    one = run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=1)
    emitted = _count(monkeypatch, compiler.KernelPlan, "emit")
    compiled = _count(monkeypatch, stages, "compile_to_ptx")
    prefetched = _count(monkeypatch, kernel_workers.KernelWorkers, "prefetch")
    two = run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=2)
    assert forked == [2]
    assert two.artifacts["ptx"] == one.artifacts["ptx"]
    assert two.values["llvm"].kernel_ir == one.values["llvm"].kernel_ir
    assert two.values["llvm-opt"].optimized == one.values["llvm-opt"].optimized
    assert len(one.values["llvm"].kernel_ir) == N  # f1's kernel is launched twice, emitted once
    assert emitted == [] and compiled == []      # all of it in the workers
    assert len(prefetched) == N                  # each compiled as it arrived
    assert multiprocessing.active_children() == []


def test_emitting_alone_compiles_nothing_ahead(forked, monkeypatch):
    prefetched = _count(monkeypatch, kernel_workers.KernelWorkers, "prefetch")
    one = run_pipeline(parse_module(_module(N)), CompileOptions(), emit="llvm", jobs=1)
    two = run_pipeline(parse_module(_module(N)), CompileOptions(), emit="llvm", jobs=2)
    assert forked == [2] and prefetched == []
    assert two.values["llvm"].kernel_ir == one.values["llvm"].kernel_ir


def test_an_emission_error_is_raised_as_one_process_raises_it(forked, monkeypatch):
    real = compiler.KernelPlan.emit

    def emit(self, target):
        if self.kernel_name == "v4":
            raise HloUnsupportedError(f"cannot emit {self.kernel_name}")
        return real(self, target)
    monkeypatch.setattr(compiler.KernelPlan, "emit", emit)
    with pytest.raises(HloUnsupportedError) as one:
        run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=1)
    here = _count(monkeypatch, compiler.KernelPlan, "emit")
    with pytest.raises(HloUnsupportedError) as two:
        run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=2)
    assert str(two.value) == str(one.value) and "cannot emit v4" in str(one.value)
    assert [a[0].kernel_name for a in here] == ["v4"]  # the others came from the workers
    assert multiprocessing.active_children() == []


def test_workers_fill_the_cache_as_one_process_does(forked, tmp_path):
    cache = KernelCache(tmp_path / "c")
    cold = run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", cache=cache, jobs=2)
    assert forked == [2]
    warm = run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", cache=cache, jobs=1)
    assert warm.cache_hits == ["llvm-opt"] and warm.artifacts["ptx"] == cold.artifacts["ptx"]


def test_no_fork_with_another_thread_running():
    if not kernel_workers.can_fork():  # pytest-xdist's worker has a thread of its own
        assert threading.active_count() >= 1
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not kernel_workers.can_fork()
    finally:
        stop.set()
        t.join()


def test_few_kernels_or_one_job_stay_in_this_process(monkeypatch):
    monkeypatch.setattr(kernel_workers, "can_fork", lambda: True)
    monkeypatch.setattr(kernels_mod, "free_cpus", lambda: 4)
    def workers(jobs: int) -> kernel_workers.KernelWorkers:
        return kernel_workers.KernelWorkers(jobs, "sm_90", 3)
    assert workers(1).workers_for(100) == 0
    assert workers(4).workers_for(kernels_mod.PARALLEL_MIN_KERNELS - 1) == 0
    assert workers(4).workers_for(100) == 4
    monkeypatch.setattr(kernels_mod, "free_cpus", lambda: 1)
    assert workers(4).workers_for(100) == 0


def test_the_compile_gives_back_what_it_froze_and_leaves_others_freezes_alone(forked, monkeypatch):
    import gc
    assert gc.get_freeze_count() == 0
    froze = []
    real = stages.StageEnv.freeze

    def freeze(self):
        real(self)
        froze.append(gc.get_freeze_count())
    monkeypatch.setattr(stages.StageEnv, "freeze", freeze)
    run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=2)
    assert len(froze) == 2 and froze[0] > 0  # after the passes, and again before the fork
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a caller's own freeze
    try:
        mine = gc.get_freeze_count()
        run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=2)
        assert gc.get_freeze_count() == mine
    finally:
        gc.unfreeze()


def test_a_worker_that_dies_is_an_error_that_says_so(forked, monkeypatch):
    import os

    from hlo_compile.codegen.errors import WorkerError
    parent, real = os.getpid(), compiler.KernelPlan.emit

    def emit(self, target):
        if self.kernel_name == "v3" and os.getpid() != parent:
            os._exit(1)  # as the out-of-memory killer would end it
        return real(self, target)
    monkeypatch.setattr(compiler.KernelPlan, "emit", emit)
    with pytest.raises(WorkerError, match="-j 2 died.*-j 1"):
        run_pipeline(parse_module(_module(N)), CompileOptions(), emit="ptx", jobs=2)
    assert multiprocessing.active_children() == []
