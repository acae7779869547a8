"""Run one module on the reference interpreter and the host target (with and without the
fusion pass), optionally on XLA:CPU, and classify each run.

Statuses, per mode:
- ``match``: every output leaf agrees (bit for bit where exact, see ``exactness.py``);
- ``mismatch``: a WRONG result, the serious kind;
- ``crash``: a Python exception that is not an ``HloError`` (a bug too);
- ``refused``: a clean ``HloError`` (unsupported op or type...), counted by op;
- ``unchecked``: the host ran but the interpreter refused, so nothing to compare with;
- ``unstable``: inexact results beyond the tolerances but within what rounding alone moves them
  (``envelope.py``: an ill-conditioned computation, not a wrong one).
The reference itself can be ``ok``, ``refused`` or ``crash`` (an interpreter bug).
"""
from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..hlo import parse_module
from ..hlo.errors import HloError
from ..hlo.opcodes import OPCODES
from .compare import compare_all, compare_xla
from .envelope import all_within_envelope
from .exactness import module_infos
from .inputs import make_inputs
from .spmd_runner import (all_within_envelope_spmd, compare_participants, run_host_spmd, run_reference_spmd,
                          spmd_inputs, spmd_world)

MODES = ("fusion", "no-fusion")
BAD = ("mismatch", "crash", "timeout", "died")


@dataclass
class Outcome:
    mode: str
    status: str
    detail: str = ""
    op: str | None = None          # the refused op, for refusals
    error_type: str | None = None  # the exception's class, for crashes and refusals
    seconds: float = 0.0
    emitters: list = field(default_factory=list)  # "emitter[/variant]" of every kernel, host modes

    def signature(self) -> str:
        """What must stay the same while shrinking: status and, for crashes, the exception."""
        return signature(self.status, self.error_type, self.detail)


def signature(status: str, error_type: str | None, detail: str | None) -> str:
    """A failure's identity: the status, and for crashes the exception's class and where it
    was raised (file and function of the innermost frame; messages name instructions and
    sizes, which change while shrinking)."""
    if status != "crash":
        return status
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', detail or "")
    if frames:
        path, fn = frames[-1]
        return f"crash:{error_type}@{path.rsplit('/', 1)[-1]}:{fn}"
    msg = re.sub(r"\d+", "N", re.sub(r"'[^']*'|%[\w.\-]+", "'_'", _first_line(detail or "")))
    return f"crash:{error_type}:{msg[:80]}"


@dataclass
class CaseResult:
    text: str
    input_seed: int
    reference: Outcome
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        out = [o for o in self.outcomes if o.status in BAD]
        if self.reference.status == "crash":
            out.insert(0, self.reference)
        return out


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else ""


def refused_op(err: BaseException, text: str) -> str:
    """The opcode an ``HloError`` refuses: from its source line, else from its message."""
    loc = getattr(err, "location", None)
    msg = str(getattr(err, "message", err))
    if loc is not None and loc.filename in ("<fuzz>", "<string>") and loc.line:
        lines = text.splitlines()
        if 0 < loc.line <= len(lines):
            m = re.search(r"\s([a-z][a-z0-9-]*)\(", lines[loc.line - 1])
            if m and m.group(1) in OPCODES:
                return m.group(1)
    for pattern in (r"opcode '([a-z0-9-]+)'", r"\b([a-z][a-z0-9-]*) '%?[\w.\-]+'", r"'([a-z][a-z0-9-]*)'",
                    r"\b([a-z][a-z0-9-]*)\b"):
        for m in re.finditer(pattern, msg):
            if m.group(1) in OPCODES:
                return m.group(1)
    return "other"


def _exception_outcome(mode: str, e: BaseException, text: str, t0: float) -> Outcome:
    if isinstance(e, HloError):
        return Outcome(mode, "refused", _first_line(str(e.message if hasattr(e, "message") else e)),
                       refused_op(e, text), type(e).__name__, time.perf_counter() - t0)
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-10:])
    return Outcome(mode, "crash", f"{type(e).__name__}: {e}\n{tb}", None, type(e).__name__,
                   time.perf_counter() - t0)


def _leaves(value) -> list[np.ndarray]:
    from ..runtime.literals import flatten
    return flatten(value)


def run_reference(module, args, seed: int):
    from ..interpreter import evaluate_module
    return _leaves(evaluate_module(module, args, seed=seed))


def compile_host(text: str, fusion: bool, emitters: list | None = None):
    """``text`` compiled for the host target; the emitter of each kernel is appended to
    ``emitters``."""
    from ..options import CompileOptions
    from ..runtime.executable import compile_executable
    exe = compile_executable(parse_module(text, "<fuzz>"), "host", CompileOptions(fusion=fusion))
    if emitters is not None:
        for k in exe.plan.kernels:
            a = k.analysis
            emitters.append(f"{a.emitter}/{a.variant}" if a.variant else str(a.emitter))
    return exe


def run_host(text: str, args, fusion: bool, emitters: list | None = None) -> list[np.ndarray]:
    """``text`` compiled for and run on the host target (buffers guarded, ``guard.py``); the
    emitter of each kernel is appended to ``emitters``."""
    from .guard import guarded
    exe = compile_host(text, fusion, emitters)
    with guarded():
        return _leaves(exe.run(args))


def run_case(text: str, input_seed: int = 0, modes: Sequence[str] = MODES, xla: bool = False,
             on_stage=None) -> CaseResult:
    """Run ``text`` on the interpreter and on host in each of ``modes`` (and XLA:CPU with ``xla``).
    ``on_stage(name)`` is told each stage before it starts (a supervisor that sees the process
    die or hang then knows where)."""
    stage = on_stage or (lambda name: None)
    stage("reference")
    t0 = time.perf_counter()
    try:
        module = parse_module(text, "<fuzz>")
        world = spmd_world(module)
        if world is not None:
            return _run_spmd_case(text, module, world, input_seed, modes, xla, stage, t0)
        args = make_inputs(module, input_seed)
    except HloError as e:
        return CaseResult(text, input_seed, Outcome("reference", "invalid", str(e)))
    infos = module_infos(module)
    result, expected = _reference_result(text, input_seed, t0, lambda: run_reference(module, args, input_seed))
    _host_outcomes(result, expected, modes, stage,
                   run=lambda fusion, emitters: run_host(text, args, fusion, emitters),
                   compare=lambda expected, actual: compare_all(expected, actual, infos),
                   within_envelope=lambda expected, actual, failing: all_within_envelope(
                       text, args, input_seed, expected, actual, failing, infos))
    if xla:
        stage("xla")
        result.outcomes.append(run_xla(text, args, expected))
    return result


def _run_spmd_case(text: str, module, world, input_seed: int, modes: Sequence[str], xla: bool, stage,
                   t0: float) -> CaseResult:
    """``run_case`` of an SPMD module (``spmd_runner.py``): every participant compared."""
    args = spmd_inputs(module, input_seed, world)
    infos = module_infos(module)
    result, expected = _reference_result(text, input_seed, t0,
                                         lambda: run_reference_spmd(module, args, input_seed, world))
    _host_outcomes(result, expected, modes, stage,
                   run=lambda fusion, emitters: run_host_spmd(compile_host(text, fusion, emitters), args, world),
                   compare=lambda expected, actual: compare_participants(expected, actual, infos),
                   within_envelope=lambda expected, actual, failing: all_within_envelope_spmd(
                       text, args, input_seed, world, expected, actual, failing, infos))
    if xla:
        stage("xla")
        result.outcomes.append(run_xla_spmd_case(text, args, world, expected))
    return result


def _reference_result(text: str, input_seed: int, t0: float, run) -> tuple[CaseResult, object]:
    """The case's result holding the reference's outcome, and the reference's values (None when
    it failed)."""
    try:
        expected = run()
        ref = Outcome("reference", "ok", seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - classification is the point
        expected = None
        ref = _exception_outcome("reference", e, text, t0)
    return CaseResult(text, input_seed, ref), expected


def _host_outcomes(result: CaseResult, expected, modes: Sequence[str], stage, run, compare,
                   within_envelope) -> None:
    """Append one outcome per host mode against the reference's values ``expected``:
    ``run(fusion, emitters)`` gives the host's values, ``compare(expected, actual)`` the reports
    of the leaves that differ, ``within_envelope(expected, actual, failing)`` whether rounding
    alone explains them."""
    for mode in modes:
        stage(mode)
        t1 = time.perf_counter()
        emitters: list = []
        try:
            actual = run(mode == "fusion", emitters)
        except Exception as e:  # noqa: BLE001
            result.outcomes.append(_exception_outcome(mode, e, result.text, t1))
            result.outcomes[-1].emitters = emitters
            continue
        dt = time.perf_counter() - t1
        if expected is None:
            result.outcomes.append(Outcome(mode, "unchecked", seconds=dt, emitters=emitters))
            continue
        reports = compare(expected, actual)
        status = "mismatch" if reports else "match"
        if reports and within_envelope(expected, actual, list(reports)):
            status = "unstable"  # ill-conditioned: rounding alone moves these elements that far
        result.outcomes.append(Outcome(mode, status, "\n".join(reports.values()), seconds=dt, emitters=emitters))


def run_xla_spmd_case(text: str, args, world, expected) -> Outcome:
    """XLA:CPU on every participant (``xla_spmd.py``) against the interpreter, per participant."""
    from .xla_spmd import run_xla_spmd
    t0 = time.perf_counter()
    try:
        if any(isinstance(a, tuple) for mine in args for a in mine):
            return Outcome("xla", "xla-refused", "tuple parameters", "parameter")
        outs = run_xla_spmd(_xla(), text, args, world.replicas, world.partitions)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - XLA's errors are RuntimeErrors of all kinds
        return Outcome("xla", "xla-refused", _first_line(str(e))[:300], "xla", type(e).__name__,
                       time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    if expected is None:
        return Outcome("xla", "xla-unchecked", seconds=dt)
    reports = []
    for k, (want, got) in enumerate(zip(expected, outs)):
        if len(got) != len(want):
            reports.append(f"participant {k}: {len(got)} outputs, expected {len(want)}")
            continue
        for i, (e, a) in enumerate(zip(want, got)):
            ok, rep = compare_xla(e, a, f"p{k}.out{i}")
            if not ok:
                reports.append(rep)
    return Outcome("xla", "xla-mismatch" if reports else "xla-match", "\n".join(reports), seconds=dt)


# ---- XLA:CPU -----------------------------------------------------------------------------------

def _xla_ref_module():
    import importlib.util
    import os
    from pathlib import Path
    path = os.environ.get("HLO_XLA_REF") or str(Path(__file__).resolve().parents[3] / "shared" / "tools" /
                                                "xla_ref.py")
    spec = importlib.util.spec_from_file_location("_hlo_fuzz_xla_ref", path)
    if spec is None or not Path(path).is_file():
        raise ImportError(f"xla_ref.py not found at {path} (set HLO_XLA_REF)")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_XLA = None


def _xla():
    global _XLA
    if _XLA is None:
        import jax
        jax.config.update("jax_enable_x64", True)  # 64-bit inputs stay 64-bit on the device
        _XLA = _xla_ref_module()
    return _XLA


def run_xla(text: str, args, expected) -> Outcome:
    """XLA:CPU (fusions inlined as calls: it cannot emit GPU fusion kinds) against the interpreter.
    Its statuses are prefixed ``xla-``: a difference there points at the interpreter (or XLA)."""
    t0 = time.perf_counter()
    try:
        if any(isinstance(a, tuple) for a in args):
            return Outcome("xla", "xla-refused", "tuple parameters", "parameter")
        outs = _xla().run_hlo_text(text, [np.asarray(a) for a in args], inline=True)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - XLA's errors are RuntimeErrors of all kinds
        return Outcome("xla", "xla-refused", _first_line(str(e))[:300], "xla", type(e).__name__,
                       time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    if expected is None:
        return Outcome("xla", "xla-unchecked", seconds=dt)
    if len(outs) != len(expected):
        return Outcome("xla", "xla-mismatch", f"{len(outs)} outputs, expected {len(expected)}", seconds=dt)
    reports = []
    for i, (e, a) in enumerate(zip(expected, outs)):
        ok, rep = compare_xla(e, a, f"out{i}")
        if not ok:
            reports.append(rep)
    return Outcome("xla", "xla-mismatch" if reports else "xla-match", "\n".join(reports), seconds=dt)
