"""Regenerate the XLA:GPU corpus: XLA:GPU's own optimized modules, made without a GPU.

    python -m bench.xla_gpu_corpus.make [--out DIR] [--groups G,...] [--archs sm_80,sm_90]
                                        [--jaxenv DIR] [--tool PATH] [--limit N]

Every case is written by ``shared/tools/xla_gpu_dump.py`` (XLA's real GPU pipeline, deviceless):
``optimized_gpu.hlo``, XLA's kernels (``xla_dump/*.thunk_sequence.txt``, PTX), ``inputs.npz`` and
XLA:CPU's ``outputs_cpu.npz``. The groups (each for every arch):

  jax       the shared corpus' JAX modules (``corpus/jax/*/unoptimized.hlo``), through ``--hlo``
  models    the repository's model corpus (``tests/data/models/*/unoptimized.hlo``)
  xla       XLA's own unfused test and benchmark modules (``corpus/xla``) that are small enough to
            run on a CPU; inputs generated here (run_hlo_module's rule), outputs by XLA:CPU
            (``xla_ref.py``)
  programs  the JAX programs of ``programs.py`` (models, training steps, loops, RNG, sort, conv,
            attention, mixed precision, int8, ...)
  spmd2, spmd4, spmd8   ``spmd_programs.py`` sharded over 2, 4 and 8 partitions
and, for sources that hold a dot or a convolution, the same again with ``--cublas`` (suffix
``-cublas``: ``__cublas$lt$matmul`` calls instead of Triton GEMM fusions).

The corpus lives outside the repository (default ``../xla-gpu-corpus`` beside the checkout); the
repository keeps only the small subset its tests read (``tests/data/xla_gpu``). JAX and its CUDA
plugin come from ``--jaxenv`` (a folder put on PYTHONPATH; default ``$HLO_JAXENV`` or
``/tmp/jaxenv``): never the project's own environment.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED = REPO.parent / "shared"
DEFAULT_OUT = REPO.parent / "xla-gpu-corpus"
GROUPS = ("jax", "models", "xla", "programs", "spmd2", "spmd4", "spmd8")
HAS_GEMM = re.compile(r"\b(dot|convolution)\(")

# XLA corpus folders whose modules are whole, unfused programs (emitter tests are bare fusions)
XLA_SOURCES = ("parser_tests", "repo/xla/backends/gpu/tests", "repo/xla/hlo/builder/tests",
               "repo/xla/backends/cpu/benchmarks/hlo", "repo/xla/tools/multihost_hlo_runner/data",
               "repo/xla/tools/hlo_opt/tests", "repo/xla/service/gpu/tests")
MAX_ELEMENTS = 1 << 20       # per array: the numpy interpreter runs every module
MAX_DOT_FLOPS = 5e8
MAX_LOOP_TRIPS = 10_000      # a while loop of more trips (a bound its condition compares with)
# opcodes a single-device XLA:CPU reference cannot run, or whose result is not a function of the
# inputs (the reference and the GPU module would disagree by design)
SKIP_OPCODES = frozenset({
    "fusion", "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-broadcast", "ragged-all-to-all", "send", "recv", "send-done", "recv-done",
    "partition-id", "replica-id", "infeed", "outfeed", "rng", "rng-get-and-update-state",
    "after-all", "add-dependency", "domain", "async-start", "async-update", "async-done",
    "all-reduce-start", "all-gather-start", "collective-permute-start", "copy-start",
})


def jax_env(jaxenv: str | None) -> dict[str, str]:
    """The environment the tool and xla_ref.py run in: jax from ``jaxenv`` only."""
    path = jaxenv or os.environ.get("HLO_JAXENV") or "/tmp/jaxenv"
    env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("XLA_FLAGS", None)
    return env


def run_tool(tool: Path, args: list[str], out: Path, env: dict[str, str], log: Path) -> float:
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"$ {' '.join(map(str, args))} --out {out}\n")
        f.flush()
        subprocess.run([sys.executable, str(tool), *args, "--out", str(out)], env=env,
                       stdout=f, stderr=subprocess.STDOUT, check=False)
    return time.perf_counter() - t0


def _small_enough(module) -> str | None:
    """Why a module is left out of the xla group, or None."""
    from hlo_compile.codegen.model.perf_model import instruction_flops  # noqa: PLC0415
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode in SKIP_OPCODES:
                return f"holds {inst.opcode}"
            if inst.opcode == "custom-call":
                return "holds a custom-call"
            shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else [inst.shape]
            for s in shapes:
                if s.is_tuple or s.is_token:
                    continue
                if not s.is_array:
                    return f"{inst.name}: a {s} value"
                if s.element_count() > MAX_ELEMENTS:
                    return f"{inst.name}: {s.element_count()} elements"
            if inst.opcode == "dot" and instruction_flops(inst) > MAX_DOT_FLOPS:
                return f"{inst.name}: a dot of more than {MAX_DOT_FLOPS:g} flops"
    for p in module.entry.parameters:
        if p.shape.is_token:
            return "a token parameter"
    for comp in module.computations:  # a loop whose condition compares with a large constant
        for inst in comp.instructions:
            if inst.opcode != "while":
                continue
            bounds = [int(c.literal_text) for c in inst.attr("condition").instructions
                      if c.opcode == "constant" and (c.literal_text or "").strip().isdigit()]
            if bounds and max(bounds) > MAX_LOOP_TRIPS:
                return f"{inst.name}: a while loop of up to {max(bounds)} trips"
    return None


def stage_xla_sources(stage: Path, env: dict[str, str], limit: int | None, log: Path) -> list[Path]:
    """XLA's unfused modules with generated inputs and XLA:CPU's outputs beside each, in the
    corpus layout the tool reads (``<case>/{unoptimized.hlo, inputs.npz, outputs.npz}``)."""
    from hlo_compile.cli.common import read_modules  # noqa: PLC0415
    from hlo_compile.hlo.collective_groups import world_of  # noqa: PLC0415
    from hlo_compile.runtime.literals import random_inputs, save_inputs  # noqa: PLC0415
    corpus = SHARED / "corpus" / "xla"
    seen: set[str] = set()
    staged: list[Path] = []
    skipped: dict[str, str] = {}
    for src in XLA_SOURCES:
        for path in sorted((corpus / src).rglob("*.hlo")):
            text = path.read_text(errors="replace")
            if "ENTRY" not in text or "// RUN:" in text or "expected_output" in path.name:
                continue
            digest = hashlib.sha1(re.sub(r"\s+", " ", text).encode()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            try:
                modules = read_modules(str(path))
            except Exception as e:  # noqa: BLE001 - a module we cannot parse is simply not staged
                skipped[str(path)] = f"parse: {str(e).splitlines()[0][:120]}"
                continue
            module = modules[0]
            world = world_of(module)
            if world.replicas * world.partitions != 1:
                skipped[str(path)] = "more than one participant"
                continue
            why = _small_enough(module)
            if why:
                skipped[str(path)] = why
                continue
            name = re.sub(r"[^A-Za-z0-9_]+", "_", f"xla_{path.stem}")[:80]
            case = stage / name
            if (case / "outputs.npz").exists() and (case / "unoptimized.hlo").read_text() == text:
                staged.append(case / "unoptimized.hlo")  # staged by an earlier run
                continue
            case.mkdir(parents=True, exist_ok=True)
            try:
                inputs = random_inputs(module, seed=0)
            except Exception as e:  # noqa: BLE001 - e.g. an unbounded dynamic dimension
                skipped[str(path)] = f"inputs: {e}"
                shutil.rmtree(case)
                continue
            (case / "unoptimized.hlo").write_text(text)
            save_inputs(case / "inputs.npz", inputs)
            ref = subprocess.run([sys.executable, str(SHARED / "tools" / "xla_ref.py"), "run",
                                  str(case / "unoptimized.hlo"), str(case / "inputs.npz"),
                                  str(case / "outputs.npz")], env=env, capture_output=True,
                                 text=True, timeout=300, check=False)
            if ref.returncode != 0 or not (case / "outputs.npz").exists():
                skipped[str(path)] = "XLA:CPU: " + (ref.stderr.strip().splitlines() or ["failed"])[-1][:160]
                shutil.rmtree(case)
                continue
            staged.append(case / "unoptimized.hlo")
            if limit and len(staged) >= limit:
                break
        if limit and len(staged) >= limit:
            break
    with log.open("a") as f:
        f.write(json.dumps({"xla_staged": len(staged), "xla_skipped": skipped}, indent=1) + "\n")
    return staged


def _with_gemm(paths: list[Path]) -> list[Path]:
    return [p for p in paths if HAS_GEMM.search(p.read_text(errors="replace"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.xla_gpu_corpus.make", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of {', '.join(GROUPS)}")
    ap.add_argument("--archs", default="sm_80,sm_90")
    ap.add_argument("--jaxenv", default=None)
    ap.add_argument("--tool", type=Path, default=SHARED / "tools" / "xla_gpu_dump.py")
    ap.add_argument("--limit", type=int, default=None, help="at most N staged XLA modules (a quick try)")
    ap.add_argument("--no-cublas", dest="cublas", action="store_false",
                    help="skip the --cublas variants")
    ns = ap.parse_args(argv)
    groups = [g for g in ns.groups.split(",") if g]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        ap.error(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    if not ns.tool.exists():
        print(f"no tool at {ns.tool}", file=sys.stderr)
        return 2
    env = jax_env(ns.jaxenv)
    ns.out.mkdir(parents=True, exist_ok=True)
    log = ns.out / "make_log.txt"
    arch = ["--arch", ns.archs]
    times: dict[str, float] = {}

    def hlo_group(name: str, files: list[Path], one_by_one: bool = False) -> None:
        # one_by_one: some of XLA's own test modules abort XLA itself (a CHECK failure ends the
        # tool's process), so each gets its own process
        batches = [[f] for f in files] if one_by_one else [files]
        for suffix, extra, chosen in (("", [], files), ("-cublas", ["--cublas"], _with_gemm(files))):
            if not chosen or (suffix and not ns.cublas):
                continue
            wanted = set(chosen)
            for batch in batches:
                batch = [f for f in batch if f in wanted]
                if batch:
                    times[name + suffix] = times.get(name + suffix, 0.0) + run_tool(
                        ns.tool, ["--hlo", *map(str, batch), *arch, *extra], ns.out / f"{name}{suffix}", env, log)

    for group in groups:
        if group == "jax":
            hlo_group("jax", sorted((SHARED / "corpus" / "jax").glob("*/unoptimized.hlo")))
        elif group == "models":
            hlo_group("models", sorted((REPO / "tests" / "data" / "models").glob("*/unoptimized.hlo")))
        elif group == "xla":
            hlo_group("xla", stage_xla_sources(ns.out / "_staged_xla", env, ns.limit, log), one_by_one=True)
        elif group == "programs":
            ex = ["--examples", str(HERE / "programs.py"), *arch]
            times[group] = run_tool(ns.tool, ex, ns.out / group, env, log)
            if ns.cublas:
                times[group + "-cublas"] = run_tool(ns.tool, [*ex, "--cublas"], ns.out / "programs-cublas", env, log)
        else:
            n = group.removeprefix("spmd")
            times[group] = run_tool(ns.tool, ["--spmd", "--partitions", n, "--examples",
                                              str(HERE / "spmd_programs.py"), *arch], ns.out / group, env, log)
    cases = sorted(ns.out.rglob("case.json"))
    print(f"{len(cases)} cases under {ns.out}; tool time per group: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
