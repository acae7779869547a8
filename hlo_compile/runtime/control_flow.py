"""Thunk sequences of computations, and the host-side control flow between them (DESIGN §4).

Every computation the runtime runs (ENTRY, and the conditions, bodies and branches that
``while`` and ``conditional`` run, transitively) becomes a ``ComputationProgram`` at compile
time: its instructions in order, each a thunk. A program is run with its parameters as values
(a ``Buffer`` for an array, a list of values for a tuple) and returns its root's value, so a
sub-program takes and gives buffers with no round trip through numpy; only a ``while``'s
predicate and a ``conditional``'s predicate or branch index are copied back to the host.

Thunks: ``parameter`` (the caller's value), ``constant`` (uploaded once per executable and
reused: constants are never written), ``bitcast``, ``get-tuple-element``, ``tuple`` and
``opt-barrier`` (aliases: no work), ``fusion`` (one kernel launch into fresh output buffers,
or, for an in-place kernel whose operand buffer the plan donated, into that buffer),
``while`` (run the condition program, read its predicate, run the body program on the state,
until the predicate is false) and ``conditional`` (read the predicate or index, run one branch
program; an s32 index out of range runs the last branch, as XLA).

Buffers are never written after the kernel that produced them, so values may alias freely
(a body passing a tuple element through returns the very same buffer), with one exception:
an in-place kernel (scatter, dynamic-update-slice) writes into its operand's buffer when
``plan_module`` donated it, which it does only for a buffer a fusion of the same program
allocated and nothing reads afterwards (through any alias) nor returns. That buffer stays in
``owned`` under the same key: it is now the in-place kernel's output, freed once with it
(``run`` checks that a donated buffer is one the program owns). Ownership decides
when memory is given back (``Platform.free``, a no-op on the host): a program owns the buffers
its kernels allocated and those its while/conditional thunks handed to it; at its end it frees
the ones its result does not hold and hands the rest to its caller. A ``while`` frees a state
buffer it owns as soon as the next state no longer holds it, so a long loop runs in bounded
memory.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

from ..hlo import HloComputation, HloInstruction
from ..hlo.errors import HloUnsupportedError

_PARAMETER, _CONSTANT, _BITCAST, _GTE, _TUPLE, _PASS, _FUSION, _WHILE, _CONDITIONAL = range(9)
_KINDS = {"parameter": _PARAMETER, "constant": _CONSTANT, "bitcast": _BITCAST, "get-tuple-element": _GTE,
          "tuple": _TUPLE, "opt-barrier": _PASS, "fusion": _FUSION, "while": _WHILE,
          "conditional": _CONDITIONAL}
SUPPORTED = "fusions, parameters, constants, bitcasts, tuples, while and conditional"


def unsupported(inst: HloInstruction, platform: str) -> HloUnsupportedError:
    where = f" (line {inst.location.line})" if inst.location else ""
    return HloUnsupportedError(f"platform '{platform}' cannot run {inst.opcode} '%{inst.name}'{where}: "
                               f"only {SUPPORTED} are supported so far")


def leaves(value: Any) -> Iterator[Any]:
    """The buffers of a value (a ``Buffer`` or nested lists of them)."""
    if isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


class ComputationProgram:
    """One computation as a thunk sequence of ``exe`` (an ``Executable``)."""

    def __init__(self, exe: Any, comp: HloComputation):
        self.exe = exe
        self.comp = comp
        self.steps: list[tuple[HloInstruction, int]] = []
        # id(fusion) → the operands whose buffers its kernel takes over as outputs
        self.donating: dict[int, tuple[int, ...]] = {}
        for inst in comp.instructions:
            kind = _KINDS.get(inst.opcode)
            if kind is None:
                raise unsupported(inst, exe.platform.name)
            if kind == _CONDITIONAL and not inst.has_attr("branch_computations") and len(inst.operands) != 3:
                raise unsupported(inst, exe.platform.name)
            self.steps.append((inst, kind))
            if kind == _FUSION:
                try:
                    donated = exe.plan.kernel_for(inst).donated
                except KeyError:  # not planned: _launch reports it
                    donated = {}
                if donated:
                    self.donating[id(inst)] = tuple(donated.values())

    def run(self, params: Sequence[Any]) -> tuple[Any, dict[int, Any]]:
        """(the root's value, the buffers of it this run allocated: id(data) → data, now the
        caller's to free)."""
        exe = self.exe
        values: dict[HloInstruction, Any] = {}
        owned: dict[int, Any] = {}
        for inst, kind in self.steps:
            if kind == _FUSION:
                for k in self.donating.get(id(inst), ()):
                    data = values[inst.operands[k]].data
                    if owned.get(id(data)) is not data:
                        raise RuntimeError(f"fusion '%{inst.name}' was planned to take over the buffer of "
                                           f"'%{inst.operands[k].name}', which this program does not own")
                v = exe._launch(inst, values)
                for b in leaves(v):
                    owned[id(b.data)] = b.data
            elif kind == _GTE:
                v = values[inst.operands[0]][inst.tuple_index]
            elif kind == _PARAMETER:
                v = params[inst.parameter_number]
            elif kind == _CONSTANT:
                v = exe.constant(inst)
            elif kind == _BITCAST:
                v = type(values[inst.operands[0]])(inst.shape, values[inst.operands[0]].data)
            elif kind == _TUPLE:
                v = [values[o] for o in inst.operands]
            elif kind == _PASS:
                v = values[inst.operands[0]]
            elif kind == _WHILE:
                v, handed = run_while(exe, inst, values[inst.operands[0]])
                owned.update(handed)
            else:
                v, handed = run_conditional(exe, inst, [values[o] for o in inst.operands])
                owned.update(handed)
            values[inst] = v
        result = values[self.comp.root]
        return result, _settle(exe.platform, owned, result)


def _settle(platform: Any, owned: dict[int, Any], result: Any) -> dict[int, Any]:
    """Free the owned buffers ``result`` does not hold; return those it does."""
    live = {id(b.data) for b in leaves(result)}
    kept = {}
    for key, data in owned.items():
        if key in live:
            kept[key] = data
        else:
            platform.free(data)
    return kept


def run_while(exe: Any, inst: HloInstruction, init: Any) -> tuple[Any, dict[int, Any]]:
    cond = exe.programs[id(inst.attr("condition"))]
    body = exe.programs[id(inst.attr("body"))]
    platform = exe.platform
    state, owned = init, {}
    while True:
        pred, pred_owned = cond.run([state])
        go = bool(exe.read_scalar(pred))
        for data in pred_owned.values():
            platform.free(data)
        if not go:
            return state, owned
        state, handed = body.run([state])
        owned = _settle(platform, owned, state)
        owned.update(handed)


def run_conditional(exe: Any, inst: HloInstruction, operands: list[Any]) -> tuple[Any, dict[int, Any]]:
    selector = exe.read_scalar(operands[0])
    if inst.has_attr("branch_computations"):
        branches = inst.attr("branch_computations")
        i = int(selector)
        if i < 0 or i >= len(branches):
            i = len(branches) - 1  # out-of-range index runs the last branch
        comp, arg = branches[i], operands[1 + i]
    elif bool(selector):
        comp, arg = inst.attr("true_computation"), operands[1]
    else:
        comp, arg = inst.attr("false_computation"), operands[2]
    return exe.programs[id(comp)].run([arg])
