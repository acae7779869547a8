"""``hlo-run --isolate=NAME`` and ``--isolate-instructions`` (run_hlo_module's
``--isolate_instructions``): one instruction run alone.

``--isolate=NAME`` names an instruction, a fusion or a kernel (as ``hlo-compile --extract``:
``hlo.extract.resolve``). The whole module is evaluated once on the interpreter, on the inputs
the run would use (``--input-literals``, or generated from ``--seed``), until NAME is about to
be evaluated; its operand values are captured there (an instruction of a while body, a branch
or a fused computation: its *first* execution). The module of that instruction alone
(``extract_instruction``: one parameter per distinct operand that is no constant) then runs on
``--platform`` and is compared with ``--reference`` like any module, on the captured values,
which are saved as ``inputs.npz`` (``arg0, arg1, ...``, what ``--input-literals`` reads) in the
dump directory (``--dump-to``), else the current directory: ``hlo-compile FILE --extract=NAME
-o one.hlo && hlo-run one.hlo --input-literals inputs.npz`` reproduces the run.

``--isolate-instructions`` does what XLA's ``RunIsolatedAndCompare`` does
(``xla/tools/hlo_decomposer.cc``): every instruction of ENTRY and of the computations it runs
as control flow (while bodies and conditions, branches, ``call``, async computations; not the
computations called on whole arrays: fused computations, reducers, comparators...), except
``parameter``, ``constant``, ``get-tuple-element`` and ``tuple``, is taken out into its own
module (identical modules once: XLA's deduplication by fingerprint) and run on generated
inputs against the reference. A verdict per instruction is printed (stdout), with the first
failing one named with its line and its report; as in XLA the runs stop at the first one that
fails by an error (not a mismatch). An instruction that cannot stand alone (``async-done``
without its start...) is listed as not isolated.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path
from typing import Any

import click
import numpy as np

from ..hlo.errors import HloError
from .common import EXIT_ERROR, EXIT_MISMATCH, EXIT_OK, UserError

PROG = "hlo-run"
# XLA's ShouldIsolateOpcode: what makes no sense alone
NOT_ISOLATED = frozenset({"parameter", "constant", "get-tuple-element", "tuple"})
# calls whose computations run as control flow (XLA's CallContext::kControlFlow); any other
# call (fusion, reduce, sort, map, scatter...) is embedded: its computation is not decomposed
CONTROL_FLOW_CALLS = frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})
INPUTS_NAME = "inputs.npz"


@dataclasses.dataclass(frozen=True)
class RunHooks:
    """What the isolated runs take from hlo-run (``run.py`` passes its own functions: this
    module never imports it)."""
    inputs: Any              # (module, settings, iteration) -> the run's arguments
    rng_seed: Any            # (settings, iteration) -> the interpreter's RNG seed
    run_one: Any             # (module, settings, **dump) -> exit status
    is_own_reference: Any    # (platform, reference) -> bool: comparing a platform with itself


def with_isolation(s, isolate: str | None, isolate_instructions: bool):
    """``s`` (hlo-run's RunSettings) with the two flags set."""
    return dataclasses.replace(s, isolate=isolate, isolate_instructions=bool(isolate_instructions))


def check_flags(s) -> None:
    """The flags --isolate and --isolate-instructions exclude (checked before any work)."""
    isolate = getattr(s, "isolate", None)
    whole = getattr(s, "isolate_instructions", False)
    if isolate is not None and whole:
        raise UserError("--isolate=NAME and --isolate-instructions exclude each other")
    if (isolate is not None or whole) and getattr(s, "expected_literals", None):
        raise UserError("--expected-literals holds the whole module's outputs: it cannot check "
                        + ("--isolate=NAME" if isolate is not None else "--isolate-instructions"))
    if whole and s.input_literals:
        raise UserError("--isolate-instructions runs each instruction on generated inputs (as run_hlo_module, "
                        "which refuses input literals there); --isolate=NAME runs one instruction on the values "
                        "the module computes from --input-literals")
    if whole and s.output_literals:
        raise UserError("--isolate-instructions runs many modules: --output-literals is not written; use "
                        "--isolate=NAME --output-literals OUT.npz for one instruction")
    if isolate is not None and not isolate.strip().lstrip("%"):
        raise UserError("--isolate needs an instruction, fusion or kernel name")


def _where(inst) -> str:
    return f"'%{inst.name}'" + (f" (line {inst.location.line})" if inst.location else "")


# ---- --isolate=NAME -------------------------------------------------------------------------------

class _Captured(Exception):
    """Ends the capturing evaluation once the operands are taken (no HloError: nothing catches it)."""


def _copy(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return np.array(value, copy=True)
    return value  # a token


def _leaf_shapes_agree(value: Any, shape) -> bool:
    if shape.is_tuple:
        return isinstance(value, tuple) and len(value) == len(shape.tuple_shapes) and all(
            _leaf_shapes_agree(v, s) for v, s in zip(value, shape.tuple_shapes))
    if shape.is_token:
        return True
    return tuple(np.shape(value)) == tuple(shape.dimensions)


def capture_operands(module, inst, args: list, seed: int | None) -> list:
    """The values of ``inst``'s operands (one per operand, in order) when the interpreter first
    evaluates ``inst`` in a run of ``module`` on ``args``; the run stops there."""
    from ..hlo.calls.te_attention import check_private_flows
    from ..hlo.unbounded import refuse_unbounded_dimensions
    from ..interpreter.evaluator import Evaluator, coerce_argument
    refuse_unbounded_dimensions(module, "evaluate")
    check_private_flows(module)
    params = module.entry.parameters
    if len(args) != len(params):
        raise HloError(f"module {module.name} takes {len(params)} arguments, got {len(args)}")
    callers = [i for c in module.computations for i in c.instructions
               if i.opcode not in CONTROL_FLOW_CALLS | {"fusion"} and inst.parent in i.called_computations()]
    if callers:
        raise UserError(f"{inst.opcode} {_where(inst)} is in computation {inst.parent.name}, which "
                        f"{callers[0].opcode} {_where(callers[0])} applies to elements (a reducer, comparator or "
                        "mapped computation): its operands are no values of the module's run; isolate "
                        f"'%{callers[0].name}' instead")
    coerced = [coerce_argument(a, p.shape) for a, p in zip(args, params)]
    got: list[list] = []

    def watch(i, operands) -> None:
        if i is inst:
            got.append([_copy(v) for v in operands])
            raise _Captured()
    ev = Evaluator(module, seed=seed)
    ev.watch = watch
    try:
        with np.errstate(all="ignore"):
            ev.evaluate(module.entry, coerced)
    except _Captured:
        pass
    if not got:
        raise UserError(f"{inst.opcode} {_where(inst)} of computation {inst.parent.name} is not evaluated in this "
                        "run of the module (a branch not taken, a loop body run no time?): no operand values to "
                        "capture")
    for op, value in zip(inst.operands, got[0]):
        if not _leaf_shapes_agree(value, op.shape):
            raise UserError(f"{inst.opcode} {_where(inst)} is in computation {inst.parent.name}, which the "
                            "interpreter evaluates on whole arrays at once (a reducer, comparator or mapped "
                            "computation): its operands cannot be captured one call at a time; isolate the "
                            "instruction that calls it")
    return got[0]


def _dump_path(s, index: int | None) -> Path:
    folder = Path(s.dump_to) if s.dump_to is not None else Path.cwd()
    return folder / (INPUTS_NAME if index is None else f"inputs.{index}.npz")


def run_isolated(module, s, hooks: RunHooks, *, index: int | None = None, dump=None, dump_index: int = 0) -> int:
    """``--isolate=NAME``: see the module docstring."""
    from ..hlo.collective_groups import world_of
    from ..hlo.extract import extract_instruction, resolve
    from ..driver.pipeline import fusions_plan
    from ..runtime import literals
    world = world_of(module, s.num_replicas, s.num_partitions)
    if world.size > 1:
        raise UserError(f"--isolate: module {module.name} runs on {world.size} participants; isolating one "
                        "instruction of an SPMD run is not supported yet (--isolate-instructions runs each "
                        "instruction alone on generated inputs)")
    inst = resolve(module, s.isolate, plan_of=fusions_plan)
    if inst.opcode == "parameter":
        raise UserError(f"--isolate={s.isolate}: parameter {_where(inst)} is an input, it computes nothing to run "
                        "alone (as run_hlo_module's --isolate_instructions, which skips parameters)")
    owner = inst.parent.parent if inst.parent is not None and inst.parent.parent is not None else module
    extracted = extract_instruction(owner, f"{inst.parent.name}/{inst.name}")
    args = hooks.inputs(module, s, 0)
    operands = capture_operands(owner, inst, args, hooks.rng_seed(s, 0)) if inst.operands else []
    seen: set[int] = set()
    values, names = [], []
    for op, value in zip(inst.operands, operands):
        if id(op) in seen or op.opcode == "constant":  # (extract keeps constants; an operand read twice is one)
            continue
        seen.add(id(op))
        values.append(value)
        names.append(op.name)
    path = _dump_path(s, index)
    try:
        literals.save_inputs(path, values)
    except OSError as e:
        raise UserError(f"cannot write the operands of '%{inst.name}' to {path}: {e.strerror or e}") from None
    first = "" if inst.parent is owner.entry else (
        f", in computation {inst.parent.name} at its first execution")
    made = "" if owner is module else ", in the module after our passes (which made this fusion)"
    if names:
        click.echo(f"{module.name}: {inst.opcode} {_where(inst)}: operands captured on the interpreter{first}{made}, "
                   f"saved to {path} as {', '.join(f'arg{k} = %{n}' for k, n in enumerate(names))}", err=True)
    else:
        click.echo(f"{module.name}: {inst.opcode} {_where(inst)}: no operand to capture (constants are kept in the "
                   f"module); {path} holds no argument", err=True)
    click.echo(f"{module.name}: to run it again: hlo-compile FILE --extract={s.isolate.strip()} -o one.hlo && "
               f"hlo-run one.hlo --input-literals {path}", err=True)
    alone = dataclasses.replace(s, input_literals=str(path), random_inputs=True, isolate=None)
    return hooks.run_one(extracted, alone, index=index, dump=dump, dump_index=dump_index)


# ---- --isolate-instructions -----------------------------------------------------------------------

def isolated_instructions(module) -> list:
    """The instructions XLA's decomposer takes out (see the module docstring), ENTRY's first,
    then those of the computations it runs as control flow, as they are reached."""
    order, seen = [module.entry], {id(module.entry)}
    k = 0
    while k < len(order):
        for inst in order[k].instructions:
            if inst.opcode in CONTROL_FLOW_CALLS:
                for c in inst.called_computations():
                    if id(c) not in seen:
                        seen.add(id(c))
                        order.append(c)
        k += 1
    return [i for c in order for i in c.instructions if i.opcode not in NOT_ISOLATED]


@dataclasses.dataclass
class Verdict:
    inst: Any
    result: str            # matched, mismatch, ran, error, not isolated, same as %X, didn't run
    detail: str = ""       # the run's report (its stderr), or why


def _run_alone(extracted, s, hooks: RunHooks) -> tuple[str, str]:
    """(result, report) of one extracted module's run (what it printed, kept for the report of
    the first failure: the verdicts stay one line per instruction)."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf), contextlib.redirect_stdout(buf):  # shown if it fails
            rc = hooks.run_one(extracted, s)
    except UserError as e:
        return "error", f"{buf.getvalue()}{e}"
    except HloError as e:
        return "error", f"{buf.getvalue()}{e.message}"
    except MemoryError as e:
        return "error", f"{buf.getvalue()}out of memory ({e})"
    except Exception as e:  # noqa: BLE001 - one instruction's failure is its verdict, reported as a bug
        return "error", f"{buf.getvalue()}unexpected failure ({type(e).__name__}: {e})"
    compared = s.reference != "none" and not hooks.is_own_reference(s.platform, s.reference)
    if rc == EXIT_MISMATCH:
        return "mismatch", buf.getvalue()
    if rc != EXIT_OK:
        return "error", buf.getvalue()
    return ("matched" if compared else "ran"), buf.getvalue()


def run_isolated_instructions(module, s, hooks: RunHooks) -> int:
    """``--isolate-instructions``: see the module docstring."""
    from ..hlo.extract import extract
    from ..hlo.fingerprint import computation_fingerprint
    from ..hlo.verifier import verify_module
    alone_settings = dataclasses.replace(s, isolate_instructions=False, output_literals=None, dump_to=None)
    insts = isolated_instructions(module)
    verdicts: list[Verdict] = []
    first_of: dict[str, Any] = {}
    stopped = False
    for inst in insts:
        if stopped:
            verdicts.append(Verdict(inst, "didn't run"))
            continue
        try:
            extracted = extract(inst, module)
            verify_module(extracted)
        except HloError as e:
            verdicts.append(Verdict(inst, "not isolated", f"it cannot stand alone: {e.message}"))
            continue
        key = computation_fingerprint(extracted.entry)
        if key in first_of:
            verdicts.append(Verdict(inst, f"same as %{first_of[key].name}"))
            continue
        first_of[key] = inst
        result, report = _run_alone(extracted, alone_settings, hooks)
        verdicts.append(Verdict(inst, result, report.strip()))
        stopped = result == "error"  # as XLA: only a mismatch lets the runs go on
    return _report(module, s, verdicts, hooks)


def _report(module, s, verdicts: list[Verdict], hooks: RunHooks) -> int:
    against = "not compared" if s.reference == "none" or hooks.is_own_reference(s.platform, s.reference) else \
        f"{s.platform} against the {s.reference} reference"
    click.echo(f"{module.name}: {len(verdicts)} instructions run one by one ({against}; generated inputs):")
    width = max((len(v.inst.name) for v in verdicts), default=0) + 1
    for v in verdicts:
        line = f"line {v.inst.location.line}" if v.inst.location else ""
        why = f" ({v.detail})" if v.result == "not isolated" else ""
        click.echo(f"  %{v.inst.name:<{width}} {v.inst.opcode:<20} {line:<10} {v.result}{why}")
    counts: dict[str, int] = {}
    for v in verdicts:
        kind = "same as an earlier one" if v.result.startswith("same as") else v.result
        counts[kind] = counts.get(kind, 0) + 1
    click.echo(f"{module.name}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    failed = next((v for v in verdicts if v.result in ("mismatch", "error")), None)
    if failed is None:
        return EXIT_OK
    click.echo(f"{module.name}: first failing instruction: {failed.inst.opcode} {_where(failed.inst)}: "
               f"{failed.result}", err=True)
    if failed.detail:
        click.echo(failed.detail, err=True)
    if any(v.result == "didn't run" for v in verdicts):
        click.echo(f"{module.name}: the runs stopped at that error (as run_hlo_module's); the instructions after "
                   "it did not run", err=True)
    return EXIT_ERROR if any(v.result == "error" for v in verdicts) else EXIT_MISMATCH
