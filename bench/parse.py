#!/usr/bin/env python3
"""Parse throughput: MB/s of HLO text to IR on a large module, beside XLA's C++ parser.

The module is built from corpus computations: every computation of the large real-model
benchmark file (and of the JAX corpus modules) is copied with renamed computations until the
text is at least --min-mb megabytes. With jax installed, ../shared/tools/xla_ref.py
parse-time times XLA's parser on the same file, and the ratio is reported.

    python bench/parse.py [--min-mb 5] [--repeat 3] [--mutations 3000] [--lark-only] [--json out.json]

--lark-only times the Lark grammar alone (no hand-written fast path), as
HLO_COMPILE_LARK_ONLY=1 does.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import hlo_compile  # noqa: E402

_COMP_HEAD = re.compile(r"^(ENTRY\s+)?%?([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?:\(|\{)", re.M)


def computations_text(module_text: str) -> tuple[str, set[str]]:
    """The computations of a module (header and stack frames dropped) and their names."""
    module = hlo_compile.parse_module(module_text, "<bench>", verify=False)
    module.stack_frames = ""
    body = module.to_text("long").split("\n\n", 1)[1]
    return body, {c.name for c in module.computations}


def build_large_module(corpus: Path, min_bytes: int, small: bool = False) -> str:
    """Corpus computations copied until ``min_bytes``; ``small`` leaves out the 4 MB llama file."""
    sources = [] if small else [corpus / "xla/repo/xla/tools/benchmarks/hlo/hlo_llama31_8b_bf16_1x8.hlo"]
    sources += sorted((corpus / "jax").glob("*/optimized_cpu.hlo"))
    pieces = [computations_text(p.read_text()) for p in sources if p.exists()]
    out, size, copy = [], 0, 0
    while size < min_bytes:
        for body, names in pieces:
            pattern = re.compile(r"%(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
                                 + r")(?![A-Za-z0-9_.\-])")
            renamed = pattern.sub(lambda m: f"%{m.group(1)}.c{copy}", body).replace("ENTRY %", "%")
            out.append(renamed)
            size += len(renamed)
            copy += 1
    # The last computation becomes the entry.
    text = "HloModule parse_benchmark\n\n" + "".join(out)
    head = list(_COMP_HEAD.finditer(text))[-1]
    return text[:head.start()] + "ENTRY " + text[head.start():]


def time_ours(text: str, repeat: int, verify: bool, fast_path: bool = True) -> list[float]:
    hlo_compile.parse_module("ENTRY e { ROOT c = f32[] constant(0) }")  # build the parser first
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        hlo_compile.parse_module(text, "large.hlo", verify=verify, fast_path=fast_path)
        times.append(time.perf_counter() - t0)
    return times


def time_xla(path: Path, repeat: int) -> float | None:
    try:
        import jax  # noqa: F401
    except ImportError:
        return None
    tool = REPO.parent / "shared" / "tools" / "xla_ref.py"
    proc = subprocess.run([sys.executable, str(tool), "parse-time", str(path), "--repeat", str(repeat)],
                          capture_output=True, text=True)
    m = re.search(r"parse throughput: best ([\d.]+) MB/s", proc.stdout)
    return float(m.group(1)) if m else None


def mutation_run(corpus: Path, count: int) -> dict:
    from mutation import check, mutations
    files = sorted((corpus / "xla" / "parser_tests").glob("*.hlo")) + \
        sorted((corpus / "xla" / "parser_tests_invalid").glob("*.hlo")) + sorted((corpus / "jax").glob("*/*.hlo"))
    files = [f for f in files if f.stat().st_size < 20000]
    t0 = time.perf_counter()
    failures = [m for name, text in mutations(files, count, seed=2024) if (m := check(text, name))]
    return {"cases": count, "non_hlo_errors": len(failures), "seconds": time.perf_counter() - t0,
            "examples": failures[:5]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    ap.add_argument("--min-mb", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mutations", type=int, default=3000)
    ap.add_argument("--lark-only", action="store_true", help="time the Lark grammar without the fast path")
    ap.add_argument("--json", type=Path, default=None)
    ns = ap.parse_args()
    if not ns.corpus.is_dir():
        print(f"corpus not found at {ns.corpus}", file=sys.stderr)
        return 2
    text = build_large_module(ns.corpus, int(ns.min_mb * 1e6))
    mb = len(text.encode()) / 1e6
    with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
        f.write(text)
        path = Path(f.name)
    parse_only = time_ours(text, ns.repeat, verify=False, fast_path=not ns.lark_only)
    with_verify = time_ours(text, ns.repeat, verify=True, fast_path=not ns.lark_only)
    xla = time_xla(path, ns.repeat)
    result = {
        "file_mb": round(mb, 2),
        "path": "lark" if ns.lark_only else "fast path, lark fallback",
        "parse_mb_s_best": round(mb / min(parse_only), 3),
        "parse_mb_s_median": round(mb / statistics.median(parse_only), 3),
        "parse_and_verify_mb_s_best": round(mb / min(with_verify), 3),
        "parse_and_verify_mb_s_median": round(mb / statistics.median(with_verify), 3),
        "xla_mb_s_best": xla,
        "ratio_to_xla": round((mb / min(parse_only)) / xla, 4) if xla else None,
        "mutations": mutation_run(ns.corpus, ns.mutations) if ns.mutations else None,
    }
    print(f"module: {mb:.2f} MB")
    which = " (Lark only)" if ns.lark_only else ""
    print(f"hlo_compile parse{which}: best {result['parse_mb_s_best']} MB/s, "
          f"median {result['parse_mb_s_median']} MB/s; "
          f"with verifier: best {result['parse_and_verify_mb_s_best']} MB/s, "
          f"median {result['parse_and_verify_mb_s_median']} MB/s")
    print(f"XLA C++ parser: {xla} MB/s, ratio {result['ratio_to_xla']}" if xla else
          "XLA C++ parser: jax not installed (pip install jax==0.10.2 to compare)")
    if result["mutations"]:
        m = result["mutations"]
        print(f"mutations: {m['cases']} cases, {m['non_hlo_errors']} non-HloError outcomes, {m['seconds']:.1f} s")
    if ns.json:
        ns.json.write_text(json.dumps(result, indent=1) + "\n")
    path.unlink()
    return 0 if not (result["mutations"] and result["mutations"]["non_hlo_errors"]) else 1


if __name__ == "__main__":
    sys.exit(main())
