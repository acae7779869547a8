"""Sums and tables of the per-case comparisons (``case.compare_case``'s JSON)."""
from __future__ import annotations

import statistics
from collections import Counter

CHECKS = ("launch_equal", "grid_equal", "block_equal", "shared_equal", "total_shared_equal", "load_ge", "store_ge")


def pct(n: int, d: int) -> float | None:
    return round(100.0 * n / d, 1) if d else None


def _fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _rows(cases: list[dict], status: str | None = None):
    for c in cases:
        for r in c["rows"]:
            if status is None or r["status"] == status:
                yield c, r


def _checks(rows: list[dict]) -> dict:
    """For matched rows: count and percentage of each check (a check that could not be made,
    None, is left out of its own denominator), and the register figures."""
    out: dict = {"matched": len(rows)}
    for check in CHECKS:
        known = [r[check] for r in rows if r.get(check) is not None]
        out[check] = sum(known)
        out[check + "_of"] = len(known)
        out[check + "_pct"] = pct(sum(known), len(known))
    pairs = [(r["ours"]["registers"], r["xla"]["registers"]) for r in rows
             if r["ours"]["registers"] is not None and r["xla"]["registers"]]
    ratios = [o / x for o, x in pairs]
    out["registers_compared"] = len(pairs)
    out["registers_median_ratio"] = round(statistics.median(ratios), 3) if ratios else None
    out["registers_within_10pct"] = sum(1 for q in ratios if abs(q - 1) <= 0.1)
    out["spills_where_xla_none"] = sum(1 for r in rows if (r["ours"]["spills"] or 0) > 0
                                       and r["xla"]["spills"] == 0)
    out.update(_model_figures(rows))
    return out


def _model_figures(rows: list[dict]) -> dict:
    """The cost model's ours/XLA time ratios of matched rows: median, worst (the highest, with
    its fusion), and the ratio of the sums."""
    modelled = [r for r in rows if (r.get("model") or {}).get("ratio") is not None]
    ratios = [r["model"]["ratio"] for r in modelled]
    worst = max(modelled, key=lambda r: r["model"]["ratio"], default=None)
    xla_us = sum(r["model"]["xla_us"] for r in modelled)
    ours_us = sum(r["model"]["ours_us"] for r in modelled)
    return {"model_compared": len(ratios),
            "model_median_ratio": round(statistics.median(ratios), 3) if ratios else None,
            "model_worst_ratio": round(worst["model"]["ratio"], 3) if worst else None,
            "model_worst_fusion": worst["fusion"] if worst else None,
            "model_xla_us": round(xla_us, 3), "model_ours_us": round(ours_us, 3),
            "model_sum_ratio": round(ours_us / xla_us, 3) if xla_us else None}


def module_ratios(cases: list[dict]) -> list[dict]:
    """Per module (case): the modelled time of its matched kernel pairs, ours and XLA's, summed."""
    out = []
    for c in cases:
        m = c.get("model")
        if m and m.get("ratio") is not None:
            out.append({"case": c["name"], "pairs": m["pairs"], "xla_us": m["xla_us"], "ours_us": m["ours_us"],
                        "ratio": m["ratio"], "ours_only_us": m.get("ours_only_us", 0)})
    return out


def register_outliers(cases: list[dict]) -> list[dict]:
    """Matched kernels whose ptxas register count is more than 10% off XLA's, or that spill
    where XLA's does not; highest ratio first."""
    out = []
    for c, r in _rows(cases, "matched"):
        o, x = r["ours"], r["xla"]
        if o["registers"] is None or not x["registers"]:
            continue
        q = o["registers"] / x["registers"]
        spills = (o["spills"] or 0) > 0 and x["spills"] == 0
        if abs(q - 1) > 0.1 or spills:
            out.append({"case": c["name"], "fusion": r["fusion"], "family": row_family(r),
                        "xla_registers": x["registers"], "ours_registers": o["registers"], "ratio": round(q, 3),
                        "xla_spills": x["spills"], "ours_spills": o["spills"]})
    out.sort(key=lambda e: (-e["ratio"], e["case"], e["fusion"]))
    return out


def row_family(row: dict) -> str:
    if row["status"] == "xla-only":
        return "(xla only) " + (row.get("xla_backend") or row.get("xla_kind") or "?")
    if row["status"] == "library":
        return "library"
    return row["family"] or "?"


def summarize(cases: list[dict]) -> dict:
    """The whole run's figures: totals, per family, GEMM and non-GEMM."""
    statuses = Counter(c["status"] for c in cases)
    rows = [r for _, r in _rows(cases)]
    by_status = Counter(r["status"] for r in rows)
    matched = [r for r in rows if r["status"] == "matched"]
    families: dict[str, dict] = {}
    for fam in sorted({row_family(r) for r in rows}):
        frs = [r for r in rows if row_family(r) == fam]
        entry = _checks([r for r in frs if r["status"] == "matched"])
        entry.update({s: sum(1 for r in frs if r["status"] == s)
                      for s in ("ours-only", "xla-only", "xla-not-kernel", "library")})
        families[fam] = entry
    ptxas_errors = sorted({c["ptxas_error"] for c in cases if c.get("ptxas_error")})
    return {
        "cases": len(cases), "case_status": dict(statuses),
        "our_kernels": sum(1 for r in rows if r["ours"] is not None),
        "xla_kernels": sum(1 for r in rows if r["xla"] is not None),
        "rows": dict(by_status),
        "all": _checks(matched),
        "gemm": _checks([r for r in matched if r.get("gemm")]),
        "non_gemm": _checks([r for r in matched if not r.get("gemm")]),
        "families": families,
        "modules": module_ratios(cases),
        "refused": [{"case": c["case"], "status": c["status"], "message": c["message"]}
                    for c in cases if c["status"] != "ok"],
        "ptxas_errors": ptxas_errors[:20],
    }


def summary_line(s: dict) -> str:
    a, g, n = s["all"], s["gemm"], s["non_gemm"]
    st = s["rows"]
    fams = ", ".join(f"{name} {f['launch_equal']}/{f['matched']}" for name, f in s["families"].items()
                     if f["matched"])
    bad = {k: v for k, v in s["case_status"].items() if k != "ok"}
    return (f"xla-parity: {s['cases']} cases" + (f" ({', '.join(f'{v} {k}' for k, v in bad.items())})" if bad else "")
            + f"; {a['matched']} kernels matched (ours {s['our_kernels']}, XLA {s['xla_kernels']}; "
            f"ours-only {st.get('ours-only', 0)}, XLA-only {st.get('xla-only', 0)}, "
            f"XLA-not-kernel {st.get('xla-not-kernel', 0)}, library {st.get('library', 0)}); "
            f"launch equal {_fmt_pct(a['launch_equal_pct'])}, shared equal {_fmt_pct(a['shared_equal_pct'])}, "
            f"load width >= XLA's {_fmt_pct(a['load_ge_pct'])}, store >= {_fmt_pct(a['store_ge_pct'])}; "
            f"non-GEMM {n['matched']}: launch {_fmt_pct(n['launch_equal_pct'])}, load >= {_fmt_pct(n['load_ge_pct'])}; "
            f"GEMM {g['matched']}: launch {_fmt_pct(g['launch_equal_pct'])}, load >= {_fmt_pct(g['load_ge_pct'])}; "
            f"launch equal per family: {fams or '-'}"
            + (f"; modelled time ours/XLA {a['model_sum_ratio']:.3f} (sum over {a['model_compared']} pairs, "
               f"median kernel {a['model_median_ratio']:.3f}, worst {a['model_worst_ratio']:.2f})"
               if a.get("model_sum_ratio") is not None else ""))


def family_table(s: dict) -> list[str]:
    head = ["family", "matched", "launch=", "grid=", "block=", "shared=", "smem tot=", "load>=", "store>=",
            "regs o/x", "regs±10%", "spill!", "time o/x", "worst", "sum o/x", "ours-only", "xla-only", "not-kern", "library"]
    table = [head]
    for name, f in s["families"].items():
        m = f["matched"]

        def c(check):
            return f"{f[check]}/{f[check + '_of']}" if m else "-"
        table.append([name, str(m), c("launch_equal"), c("grid_equal"), c("block_equal"), c("shared_equal"),
                      c("total_shared_equal"), c("load_ge"), c("store_ge"),
                      f"{f['registers_median_ratio']:.2f}" if f["registers_median_ratio"] is not None else "-",
                      f"{f['registers_within_10pct']}/{f['registers_compared']}" if f["registers_compared"] else "-",
                      str(f["spills_where_xla_none"]), _ratio(f.get("model_median_ratio")),
                      _ratio(f.get("model_worst_ratio")), _ratio(f.get("model_sum_ratio")), str(f["ours-only"]), str(f["xla-only"]),
                      str(f["xla-not-kernel"]), str(f["library"])])
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    return ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip()
            for r in table]


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def module_lines(s: dict, n: int = 10) -> list[str]:
    """The modules whose modelled time (matched pairs summed) is furthest above XLA's, and the
    median module."""
    mods = sorted(s.get("modules", []), key=lambda m: -m["ratio"])
    if not mods:
        return []
    med = statistics.median(m["ratio"] for m in mods)
    out = [f"modelled time ours/XLA per module (matched kernels summed): median {med:.3f} over {len(mods)}, "
           f"{sum(1 for m in mods if m['ratio'] > 1.1)} above 1.1; highest:"]
    out += [f"  {m['ratio']:6.3f}  {m['case']}: ours {m['ours_us']:.2f} us, XLA {m['xla_us']:.2f} us "
            f"({m['pairs']} kernels)" for m in mods[:n]]
    return out


def _dims(d) -> str:
    return "x".join(str(v) for v in d) if d else "-"


def _bits(v) -> str:
    return "-" if v is None else str(v)


def _side_text(side: dict | None) -> str:
    if side is None:
        return "-"
    regs = "?" if side["registers"] is None else str(side["registers"])
    spills = "" if not side["spills"] else f" spill {side['spills']}B"
    return (f"grid {_dims(side['grid'])} block {_dims(side['block'])} smem {side['shared']}"
            + (f"+{side['static_shared']}" if side["static_shared"] else "")
            + f" ld {_bits(side['load_bits'])} st {_bits(side['store_bits'])} regs {regs}{spills}")


def _model_text(row: dict) -> str:
    m = row.get("model") or {}
    if m.get("ratio") is None:
        return ""
    return f"  model {m['ours_us']:.2f}/{m['xla_us']:.2f} us = {m['ratio']:.2f}"


def differs(row: dict) -> bool:
    return row["status"] != "matched" or not all(row.get(k) in (True, None) for k in
                                                 ("launch_equal", "shared_equal", "load_ge", "store_ge"))


def kernel_lines(cases: list[dict], only_diff: bool = False) -> list[str]:
    """Per kernel, grouped by our emitter family: ``case/fusion: XLA ... | ours ...`` and what differs."""
    groups: dict[str, list[str]] = {}
    for c, r in _rows(cases):
        if only_diff and not differs(r):
            continue
        if r["status"] == "matched":
            marks = [k.replace("_equal", "").replace("_ge", "<") for k in ("grid_equal", "block_equal", "shared_equal",
                                                                         "load_ge", "store_ge") if r.get(k) is False]
            tail = f"  DIFF {','.join(marks)}" if marks else ""
        elif r["status"] == "ours-only":
            tail = f"  (ours only; from XLA's {r['from_xla']})" if r.get("from_xla") else "  (ours only)"
        elif r["status"] == "xla-only":
            tail = "  (XLA only" + (f"; we split it into {', '.join(r['split_into'])}" if r.get("split_into") else "") \
                + ("; ours: library call" if r.get("ours_library") else "") + ")"
        elif r["status"] == "xla-not-kernel":
            tail = f"  (XLA runs it as {r['xla_thunk']})"
        else:
            tail = f"  (library call {r.get('library')}; XLA: {r.get('xla_thunk') or '-'})"
        groups.setdefault(row_family(r), []).append(
            f"  {c['name']}/{r['fusion']}: XLA {_side_text(r['xla'])} | ours {_side_text(r['ours'])}{tail}"
            f"{_model_text(r)}")
    out = []
    for fam in sorted(groups):
        out.append(f"[{fam}] {len(groups[fam])}")
        out.extend(groups[fam])
    return out


def difference_kinds(cases: list[dict]) -> Counter:
    """How often each kind of difference occurs: ``family: what`` -> count."""
    kinds: Counter = Counter()
    for _, r in _rows(cases):
        fam = row_family(r)
        if r["status"] != "matched":
            kinds[f"{fam}: {r['status']}"] += 1
            continue
        for check in ("grid_equal", "block_equal", "shared_equal", "load_ge", "store_ge"):
            if r.get(check) is False:
                kinds[f"{fam}: {check.replace('_equal', ' differs').replace('_ge', ' narrower')}"] += 1
    return kinds
