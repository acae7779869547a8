"""Shared helpers of the code-generation tests: FileCheck in process, module compilation to
LLVM IR/PTX for one module, and running a module on the host platform against the
interpreter, and a host platform that tracks every buffer's lifetime."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import HostPlatform, compile_executable


def needs_libdevice() -> None:
    """Skip the calling test where the ``llvm-opt`` stage cannot run (no llvmlite or libdevice)."""
    import pytest
    pytest.importorskip("llvmlite")
    try:
        from hlo_compile.targets.nvptx.toolkit import find_libdevice
        find_libdevice()
    except Exception:
        pytest.skip("no libdevice: the llvm-opt stage cannot run here")


def fusion_chain(n: int, changed: int | None = None, again: int | None = None) -> str:
    """A module of ``n`` loop fusions in a chain, each its own kernel (a constant each: no
    kernel reuse); fusion ``changed`` gets another constant; ``again``: one more fusion at the
    end calling ``%f{again}`` (a kernel launched twice)."""
    comps, body = [], ["  %v0 = f32[64,32] parameter(0)"]
    for i in range(n):
        c = f"{i + 2}.5" if i != changed else f"{i + 2}.25"
        comps.append(f"%f{i} (p: f32[64,32]) -> f32[64,32] {{\n  %p = f32[64,32] parameter(0)\n"
                     f"  %c = f32[] constant({c})\n  %b = f32[64,32] broadcast(%c), dimensions={{}}\n"
                     f"  %m = f32[64,32] multiply(%p, %b)\n  ROOT %t = f32[64,32] tanh(%m)\n}}\n")
    calls = list(range(n)) + ([again] if again is not None else [])
    for i, f in enumerate(calls):
        root = "ROOT " if i == len(calls) - 1 else ""
        body.append(f"  {root}%v{i + 1} = f32[64,32] fusion(%v{i}), kind=kLoop, calls=%f{f}")
    return ("HloModule many\n\n" + "\n".join(comps) + "\nENTRY %main (x: f32[64,32]) -> f32[64,32] {\n"
            + "\n".join(body) + "\n}\n")


def filecheck(text: str, checks: str, tmp_path: Path) -> None:
    """In-process FileCheck; on failure the input and checks stay in ``tmp_path`` and the
    message carries the command that reproduces it."""
    from filecheck.matcher import Matcher
    from filecheck.options import Options

    inp, chk = tmp_path / "input.txt", tmp_path / "checks.txt"
    inp.write_text(text)
    chk.write_text(checks)
    matcher = Matcher.from_opts(Options(match_filename=str(chk), input_file=str(inp)))
    matcher.stderr = io.StringIO()
    if matcher.run() != 0:
        raise AssertionError(f"FileCheck failed:\n{matcher.stderr.getvalue()}\n"
                             f"reproduce: filecheck {chk} --input-file {inp}")


def emit_stage(text: str, stage: str, arch: str = "sm_80") -> str:
    module = parse_module(text)
    return run_pipeline(module, CompileOptions(arch=arch), emit=stage).artifacts[stage]


def load_fusion_test(path: Path):
    """An XLA emitter test file (a bare fused computation) as a module with an ENTRY fusion."""
    from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion
    return wrap_entry_as_fusion(parse_module(path.read_text(), str(path)))


def run_on_host(module, seed: int = 0, args=None, options=None):
    """(ok, report): the module on the host platform (``options``: ``CompileOptions``)
    compared with the interpreter."""
    args = literals.random_inputs(module, seed) if args is None else args
    exe = compile_executable(module, "host", options)
    got = literals.flatten(exe.run(args))
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[(None, None)] * len(expected))
    return cmp.ok, cmp.report()


class TrackedBuffer(np.ndarray):
    freed = False


class TrackingHostPlatform(HostPlatform):
    """Host platform asserting that no buffer is freed twice or used after being freed, and
    counting allocations and copies."""

    def __init__(self):
        self.live: dict[int, TrackedBuffer] = {}
        self.allocations = 0
        self.copies = 0

    def _track(self, a):
        t = a.view(TrackedBuffer)
        t.freed = False
        self.live[id(t)] = t
        return t

    def upload(self, physical):
        return self._track(physical)

    def allocate(self, shape):
        self.allocations += 1
        return self._track(super().allocate(shape))

    def free(self, data):
        assert not data.freed, "freed twice"
        data.freed = True
        self.live.pop(id(data))

    def copy(self, dst, src, shape):
        assert not dst.freed and not src.freed, "copy with a freed buffer"
        self.copies += 1
        super().copy(np.asarray(dst), np.asarray(src), shape)

    def launch(self, kernel, plan, buffers):
        assert not any(getattr(b, "freed", False) for b in buffers), "a kernel reads a freed buffer"
        super().launch(kernel, plan, [np.asarray(b) for b in buffers])

    def download(self, data, shape):
        assert not data.freed, "downloading a freed buffer"
        return super().download(np.asarray(data), shape)
