"""Pick the corpus' committed subset (``tests/data/xla_gpu``) from a checked corpus.

    python -m bench.xla_gpu_corpus.subset CHECK.json [--out tests/data/xla_gpu] [--per-group N]
                                          [--max-case-bytes B] [--max-seconds S]

CHECK.json is ``python -m bench --xla-gpu-corpus DIR... --json CHECK.json``'s output. Per group and
arch it takes up to N cases that passed every step, the quickest first, one per name prefix
(``model_``, ``rng_``, ...) before a second of the same, each at most B bytes and S seconds in all.
A case keeps what the tests and ``--xla-parity`` read: ``optimized_gpu.hlo``, ``inputs.npz``,
``outputs_cpu.npz``, XLA's ``thunk_sequence``/``thunk_metadata``/PTX, and a ``case.json`` with the
tolerances resolved (so the source case need not be there).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from .check import tolerances

KEEP = ("optimized_gpu.hlo", "inputs.npz", "outputs_cpu.npz")
KEEP_DUMP = (".thunk_sequence.txt", ".thunk_metadata.txt", ".ptx")
CASE_KEYS = ("name", "category", "module_name", "arch_requested", "arch_in_dump_name", "device_kind",
             "topology", "compile_options", "build_options", "num_partitions", "num_replicas", "versions")


def case_bytes(case: Path) -> int:
    files = [case / k for k in KEEP] + [p for p in (case / "xla_dump").glob("*") if p.name.endswith(KEEP_DUMP)]
    return sum(p.stat().st_size for p in files if p.exists())


def prefix(name: str) -> str:
    return name.split("_", 1)[0]


def choose(results: list[dict], per_group: int, max_bytes: int, max_seconds: float) -> list[Path]:
    by_group: dict[tuple[str, str], list[tuple[float, Path]]] = {}
    for r in results:
        if any(s["status"] != "ok" for s in r["steps"].values()):
            continue
        seconds = sum(s["seconds"] for s in r["steps"].values())
        case = Path(r["case"])
        if seconds > max_seconds or not case.exists() or case_bytes(case) > max_bytes:
            continue
        by_group.setdefault((r["group"], r["arch"]), []).append((seconds, case))
    chosen = []
    for key in sorted(by_group):
        ranked = sorted(by_group[key])
        seen: set[str] = set()
        first = [c for _, c in ranked if not (prefix(c.name) in seen or seen.add(prefix(c.name)))]
        rest = [c for _, c in ranked if c not in first]
        chosen.extend((first + rest)[:per_group])
    return chosen


def copy_case(case: Path, group: str, out: Path) -> Path:
    meta = json.loads((case / "case.json").read_text())
    dest = out / group / meta["arch_requested"] / case.name
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "xla_dump").mkdir(parents=True)
    for k in KEEP:
        shutil.copyfile(case / k, dest / k)
    for p in sorted((case / "xla_dump").glob("*")):
        if p.name.endswith(KEEP_DUMP):
            shutil.copyfile(p, dest / "xla_dump" / p.name)
    slim = {k: meta[k] for k in CASE_KEYS if k in meta}
    slim["group"] = group
    slim["outputs"] = [dict(o, rtol=t[0], atol=t[1]) if t[0] is not None else dict(o)
                       for o, t in zip(meta.get("outputs") or [], tolerances(meta))]
    (dest / "case.json").write_text(json.dumps(slim, indent=1) + "\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.xla_gpu_corpus.subset", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check_json", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "tests" / "data" / "xla_gpu")
    ap.add_argument("--per-group", type=int, default=3)
    ap.add_argument("--max-case-bytes", type=int, default=200_000)
    ap.add_argument("--max-seconds", type=float, default=12.0)
    ap.add_argument("--only-groups", default=None, help="comma-separated groups to take")
    ns = ap.parse_args(argv)
    results = json.loads(ns.check_json.read_text())["cases"]
    if ns.only_groups:
        keep = set(ns.only_groups.split(","))
        results = [r for r in results if r["group"] in keep]
    chosen = choose(results, ns.per_group, ns.max_case_bytes, ns.max_seconds)
    group = {r["case"]: r["group"] for r in results}
    total = 0
    for case in chosen:
        dest = copy_case(case, group[str(case)], ns.out)
        total += sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"{len(chosen)} cases, {total / 1e6:.2f} MB under {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
