"""Every XLA:GPU-style module of the shared corpus that holds a library call (``__cublas``,
``__cudnn``) or a ``kind=kCustom`` fusion (Triton, cuDNN, custom kernels) runs on the host
and matches the interpreter (issue 14's check), or is refused for one of the reasons listed
in ``KNOWN_REFUSALS`` — never a crash, never a mismatch.

Modules too big to run on a CPU in a test (a dot of 10^11 flops) are compiled only, and the
test says how many; the whole set is counted so that a regression that turns matches into
refusals fails.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlo_compile.cli.common import read_modules
from hlo_compile.codegen.model.perf_model import instruction_flops
from hlo_compile.hlo.errors import HloError
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import run_on_host

MARKERS = re.compile(r"__cublas|__cudnn|kind=kCustom")
# what we refuse on purpose, with the issue that will lift it
KNOWN_REFUSALS = (
    "all-gather", "all-reduce",  # collectives need N participants (issue 16)
    "f8e8m0fnu", "scaled-dot",   # MX block scales (no codegen for the exponent-only type yet)
)
MAX_ELEMENTS = 4_000_000   # per parameter or result: beyond this the host run is too slow for a test
MAX_FLOPS = 2e9


def _files(corpus: Path) -> list[Path]:
    out = []
    for path in sorted(corpus.rglob("*.hlo")):
        if path.stat().st_size < 400_000 and MARKERS.search(path.read_text(errors="replace")):
            out.append(path)
    return out


def _too_big(module) -> bool:
    for comp in module.computations:
        for inst in comp.instructions:
            shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else [inst.shape]
            if any(s.is_array and s.element_count() > MAX_ELEMENTS for s in shapes):
                return True
            if inst.opcode == "dot" and instruction_flops(inst) > MAX_FLOPS:  # the cost model's count
                return True
    return False


def test_max_flops_guard_fires_for_a_large_dot():
    """A [1024,2048] x [2048,1024] dot is 4.3e9 flops (no array over MAX_ELEMENTS): compiled
    only, not run on the host; the same dot with a contracting dimension of 1 runs."""
    from hlo_compile.hlo.parser import parse_module

    def dot(m, k, n):
        return parse_module(f"""HloModule d
ENTRY e {{
  a = f32[{m},{k}] parameter(0)
  b = f32[{k},{n}] parameter(1)
  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
""")

    big = dot(1024, 2048, 1024)
    assert instruction_flops(big.entry.root) == 2 * 1024 * 1024 * 2048  # contracting size 2048 read
    assert _too_big(big)
    assert not _too_big(dot(1024, 1, 1024))


@pytest.mark.slow
def test_xla_gpu_modules_with_library_calls_and_custom_fusions_run_on_host(corpus):
    files = _files(corpus)
    assert files, "no corpus module holds a library call or a kCustom fusion"
    matched, refused, compiled_only, failures = [], [], [], []
    for path in files:
        split = "\n// -----" in path.read_text(errors="replace")
        try:
            modules = read_modules(str(path), split_input_file=split)
        except HloError:
            continue  # parser tests of invalid input: the parser's own tests cover them
        for i, module in enumerate(modules):
            where = f"{path.relative_to(corpus)}#{i}"
            try:
                if _too_big(module):
                    run_pipeline(module, CompileOptions(gemm="generated", conv="generated"), emit="llvm")
                    compiled_only.append(where)
                    continue
                ok, report = run_on_host(module)
            except HloError as e:
                if any(k in str(e) for k in KNOWN_REFUSALS):
                    refused.append(where)
                else:
                    failures.append(f"{where}: refused: {str(e).splitlines()[0]}")
                continue
            (matched if ok else failures).append(where if ok else f"{where}: mismatch: {report[:300]}")
    print(f"{len(matched)} match, {len(refused)} refused on purpose, {len(compiled_only)} compiled only (too big)")
    assert not failures, "\n".join(failures)
    assert len(matched) >= 100, (len(matched), refused, compiled_only)
