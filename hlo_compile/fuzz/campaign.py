"""A fuzzing campaign: generate and run many modules in worker processes, count outcomes,
shrink the failures and write reproducers.

Module ``k`` of a campaign with seed ``S`` is ``generate(S + k)``; its inputs use the same
seed, so any case replays from its number alone (``python -m hlo_compile.fuzz --replay N``).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable

from .config import FuzzConfig
from .runner import BAD, MODES, signature
from .worker import Worker, case_request, check_request

HEAD = ("match", "mismatch", "crash", "died", "timeout", "refused", "unchecked", "unstable")


@dataclass
class Failure:
    seed: int
    mode: str
    status: str
    signature: str
    detail: str
    text: str
    shrunk: str | None = None
    shrunk_detail: str = ""
    path: str | None = None
    bucket: str = ""


@dataclass
class CampaignReport:
    count: int = 0
    seed: int = 0
    seconds: float = 0.0
    invalid: list = field(default_factory=list)           # (seed, error) of modules that did not verify
    outcomes: Counter = field(default_factory=Counter)    # (mode, status) -> n
    reference: Counter = field(default_factory=Counter)   # interpreter status -> n
    refusals: Counter = field(default_factory=Counter)    # "mode:op" -> n
    refusal_examples: dict = field(default_factory=dict)  # "mode:op" -> a message
    ops: Counter = field(default_factory=Counter)         # generated opcodes
    features: Counter = field(default_factory=Counter)
    ranks: Counter = field(default_factory=Counter)
    ets: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    unstable: list = field(default_factory=list)          # (seed, mode, detail): beyond the tolerance, within rounding
    host_seconds: float = 0.0
    emitters: Counter = field(default_factory=Counter)    # "mode:emitter[/variant]" -> kernels

    @property
    def mismatches(self) -> int:
        return sum(n for (m, s), n in self.outcomes.items() if s == "mismatch")

    @property
    def crashes(self) -> int:
        return sum(n for (m, s), n in self.outcomes.items() if s in ("crash", "died", "timeout")) + \
            sum(n for s, n in self.reference.items() if s in ("crash", "died", "timeout"))

    def record(self, reply: dict) -> list[Failure]:
        self.count += 1
        if "invalid" in reply:
            self.invalid.append((reply["seed"], reply["invalid"][:500]))
            return []
        st = reply.get("stats")
        if st:
            self.ops.update(st["ops"])
            self.features.update(st["features"])
            self.ranks.update(st["ranks"])
            self.ets.update(st["ets"])
        ref = reply["reference"]
        self.reference[ref["status"]] += 1
        if ref["status"] == "refused":
            self._refusal("interpreter", ref)
        out = []
        if ref["status"] in BAD:
            out.append(self._failure(reply, ref))
        for o in reply["outcomes"]:
            self.outcomes[(o["mode"], o["status"])] += 1
            self.host_seconds += o.get("seconds") or 0.0
            self.emitters.update(f"{o['mode']}:{e}" for e in o.get("emitters") or ())
            if o["status"] in ("refused", "xla-refused"):
                self._refusal(o["mode"], o)
            if o["status"] == "unstable":  # excused by the rounding envelope: kept to look at
                self.unstable.append((reply["seed"], o["mode"], (o.get("detail") or "")[:500]))
            if o["status"] in BAD:
                out.append(self._failure(reply, o))
        self.failures += out
        return out

    def _refusal(self, mode: str, o: dict) -> None:
        key = f"{mode}:{o.get('op') or 'other'}"
        self.refusals[key] += 1
        self.refusal_examples.setdefault(key, (o.get("detail") or "")[:200])

    def _failure(self, reply: dict, o: dict) -> Failure:
        sig = signature(o["status"], o.get("error_type"), o.get("detail"))
        return Failure(reply["seed"], o["mode"], o["status"], sig, o.get("detail") or "", reply.get("text", ""))

    def summary(self) -> str:
        lines = [f"{self.count} modules (seeds {self.seed}..{self.seed + self.count - 1}) in {self.seconds:.0f} s; "
                 f"{len(self.invalid)} did not verify (generator bugs)"]
        lines.append("interpreter: " + ", ".join(f"{k} {v}" for k, v in sorted(self.reference.items())))
        modes = sorted({m for m, _ in self.outcomes})
        for m in modes:
            xla = ("xla-match", "xla-mismatch", "xla-refused", "xla-unchecked", "xla-died", "xla-timeout")
            cells = [f"{s} {self.outcomes[(m, s)]}" for s in HEAD + xla if self.outcomes[(m, s)]]
            lines.append(f"{m}: " + ", ".join(cells))
        lines.append(f"mismatches {self.mismatches}, crashes (incl. died/timeouts) {self.crashes}")
        if self.unstable:
            lines.append("unstable (beyond the tolerance, within what rounding moves): " +
                         ", ".join(f"seed {seed} {mode}" for seed, mode, _ in self.unstable))
        if self.refusals:
            lines.append("refusals by op (mode:op count):")
            for k, n in self.refusals.most_common():
                lines.append(f"  {k:40s} {n:6d}  e.g. {self.refusal_examples.get(k, '')[:110]}")
        lines.append("kernels by emitter: " + ", ".join(f"{k} {v}" for k, v in sorted(self.emitters.items())))
        lines.append("generated ops: " + ", ".join(f"{k} {v}" for k, v in self.ops.most_common()))
        lines.append("features: " + ", ".join(f"{k} {v}" for k, v in self.features.most_common()))
        lines.append("ranks: " + ", ".join(f"{k}:{v}" for k, v in sorted(self.ranks.items())) +
                     "; element types: " + ", ".join(f"{k} {v}" for k, v in self.ets.most_common()))
        if self.failures:
            lines.append("failures:")
            for f in self.failures:
                where = f" -> {f.path}" if f.path else ""
                lines.append(f"  seed {f.seed} {f.mode} {f.signature}{where}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"count": self.count, "seed": self.seed, "seconds": self.seconds, "invalid": self.invalid,
                "outcomes": {f"{m}:{s}": n for (m, s), n in sorted(self.outcomes.items())},
                "reference": dict(self.reference), "refusals": dict(self.refusals.most_common()),
                "mismatches": self.mismatches, "crashes": self.crashes, "ops": dict(self.ops.most_common()),
                "features": dict(self.features), "ranks": {str(k): v for k, v in sorted(self.ranks.items())},
                "element_types": dict(self.ets), "emitters": dict(sorted(self.emitters.items())),
                "unstable": [{"seed": seed, "mode": mode, "detail": detail} for seed, mode, detail in self.unstable],
                "failures": [{"seed": f.seed, "mode": f.mode, "status": f.status, "signature": f.signature,
                              "path": f.path, "bucket": f.bucket, "detail": f.detail[:2000]} for f in self.failures]}


def run_campaign(count: int, seed: int = 0, *, jobs: int = 2, cfg: FuzzConfig | None = None,
                 modes=MODES, xla: bool = False, timeout: float = 120.0, out: Path | None = None,
                 shrink: int = 0, shrink_budget: float = 300.0, log: Callable[[str], None] = print,
                 progress_every: int = 100) -> CampaignReport:
    cfg = cfg or FuzzConfig()
    report = CampaignReport(seed=seed)
    t0 = time.monotonic()
    workers = [Worker() for _ in range(max(1, jobs))]
    seeds = iter(range(seed, seed + count))
    exhausted = False
    try:
        while True:
            for w in workers:
                if not w.busy and not exhausted:
                    s = next(seeds, None)
                    if s is None:
                        exhausted = True
                    else:
                        w.submit(case_request(s, cfg, modes, xla), timeout)
            busy = [w for w in workers if w.busy]
            if not busy:
                break
            wait([x for w in busy for x in w.waitables()],
                 timeout=max(0.05, min(w.deadline for w in busy) - time.monotonic()))
            for w in busy:
                reply = w.collect()
                if reply is None:
                    continue
                if "text" not in reply and reply.get("lost"):
                    from .generator import generate
                    reply["text"] = generate(reply["seed"], cfg, verify=False).text
                for f in report.record(reply):
                    first = f.detail.strip().splitlines()[0][:150] if f.detail.strip() else ""
                    log(f"seed {f.seed}: {f.mode} {f.signature}: {first}")
                if progress_every and report.count % progress_every == 0:
                    log(f"[{report.count}/{count}] {time.monotonic() - t0:.0f} s, mismatches {report.mismatches}, "
                        f"crashes {report.crashes}, invalid {len(report.invalid)}")
    finally:
        for w in workers:
            w.close()
    report.seconds = time.monotonic() - t0
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for s, err in report.invalid[:20]:
            from .generator import generate
            (out / f"invalid_seed{s}.hlo").write_text(generate(s, cfg, verify=False).text + f"\n// {err}\n")
    if shrink and report.failures:
        shrink_failures(report, cfg, out or Path("fuzz-out"), shrink, shrink_budget, timeout, log)
    if out is not None:
        (out / "summary.json").write_text(json.dumps(report.to_json(), indent=1, default=str) + "\n")
        (out / "summary.txt").write_text(report.summary() + "\n")
    return report


def _priority(f: Failure) -> int:
    return {"died": 0, "timeout": 1, "crash": 2, "mismatch": 3}.get(f.status, 4)


def shrink_failures(report: CampaignReport, cfg: FuzzConfig, out: Path, limit: int, budget: float,
                    timeout: float, log: Callable[[str], None] = print) -> None:
    """Shrink up to ``limit`` failures, distinct signatures first, and write each reproducer."""
    picked, seen = [], Counter()
    for f in sorted(report.failures, key=lambda f: (_priority(f), f.seed)):
        key = (f.signature, f.mode if f.status == "mismatch" else "")
        if seen[key] == 0:
            picked.append(f)
        seen[key] += 1
    for f in sorted(report.failures, key=lambda f: (_priority(f), f.seed)):  # then more of each
        if len(picked) >= limit:
            break
        if f not in picked and seen[(f.signature, "")] < 3:
            picked.append(f)
    buckets: dict[str, str] = {}
    worker = Worker()
    try:
        for f in picked[:limit]:
            log(f"shrinking seed {f.seed} ({f.mode} {f.signature})")
            write_reproducer(f, worker, out, budget, timeout, log)
            if f.shrunk:
                f.bucket = bucket_of(f)
                if f.bucket in buckets:
                    log(f"  same bucket as {buckets[f.bucket]}")
                buckets.setdefault(f.bucket, f.path or "")
    finally:
        worker.close()


def bucket_of(f: Failure) -> str:
    import re
    ops = sorted(set(re.findall(r"\s([a-z][a-z0-9-]*)\(", f.shrunk or "")) - {"parameter", "constant"})
    return f"{f.signature}|{f.mode}|{','.join(ops)}"


def interesting_for(f: Failure, worker: Worker, timeout: float) -> Callable[[str], bool]:
    modes = () if f.mode == "reference" else (f.mode,)

    def check(text: str) -> bool:
        reply = worker.call(check_request(text, f.seed, modes), timeout)
        if f.mode == "reference":
            o = reply["reference"]
        else:
            got = [o for o in reply["outcomes"] if o["mode"] == f.mode]
            if not got:
                return False
            o = got[0]
            if reply["reference"]["status"] != "ok" and f.status == "mismatch":
                return False
        return signature(o["status"], o.get("error_type"), o.get("detail")) == f.signature
    return check


def write_reproducer(f: Failure, worker: Worker, out: Path, budget: float, timeout: float,
                     log: Callable[[str], None] = print) -> None:
    from .shrinker import shrink
    d = out / f"seed{f.seed}_{f.mode}_{f.status}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "original.hlo").write_text(f.text)
    _save_inputs(f.text, f.seed, d / "original_inputs.npz")
    check = interesting_for(f, worker, timeout)
    f.shrunk = shrink(f.text, check, budget_s=budget, log=log)
    (d / "shrunk.hlo").write_text(f.shrunk)
    _save_inputs(f.shrunk, f.seed, d / "inputs.npz")
    modes = () if f.mode == "reference" else (f.mode,)
    reply = worker.call(check_request(f.shrunk, f.seed, modes), timeout)
    o = reply["reference"] if f.mode == "reference" else next((o for o in reply["outcomes"] if o["mode"] == f.mode),
                                                                reply["reference"])
    f.shrunk_detail = o.get("detail") or ""
    flag = " --no-fusion" if f.mode == "no-fusion" else ""
    (d / "report.txt").write_text(
        f"seed {f.seed}, mode {f.mode}: {f.signature}\n\n"
        f"reproduce:\n  hlo-run {d / 'shrunk.hlo'} --platform=host --input-literals {d / 'inputs.npz'}{flag}\n"
        f"  python -m hlo_compile.fuzz --check {d / 'shrunk.hlo'} --input-seed {f.seed} --modes {f.mode}\n\n"
        f"shrunk module's outcome:\n{f.shrunk_detail}\n\noriginal outcome:\n{f.detail}\n")
    f.path = str(d)
    log(f"  -> {d}")


def _save_inputs(text: str, seed: int, path: Path) -> None:
    from ..hlo import parse_module
    from ..runtime.literals import save_inputs, save_participant_inputs
    from .inputs import make_inputs
    from .spmd_runner import spmd_inputs, spmd_world
    try:
        module = parse_module(text, "<fuzz>")
        world = spmd_world(module)
        if world is not None:  # hlo-run's p{k}.arg{i}
            save_participant_inputs(path, spmd_inputs(module, seed, world))
            return
        save_inputs(path, make_inputs(module, seed))
    except Exception:  # noqa: BLE001 - a reproducer without inputs is still a reproducer
        pass
