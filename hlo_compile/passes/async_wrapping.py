"""The async sugar ``X-start``/``X-update``/``X-done`` as ``async-start(..., calls=%wrapped)``.

XLA's parser reads ``fusion-start(a, b), kind=kLoop, calls=%f`` as an ``async-start`` whose
wrapped computation holds one instruction, ``fusion(a', b'), kind=kLoop, calls=%f``, over
parameters standing for the start's operands (``HloAsyncInstruction``: the sugar is only its
printed form). We make that explicit for every op X whose async form is sugar (``fusion``,
``call``, ``custom-call``, ``dynamic-update-slice``, ``all-to-all``, ``reduce-scatter``... every
opcode but those with native start/done opcodes, ``hlo.opcodes.ASYNC_SUGAR_EXCLUDED``), so the
runtime's ``async-start`` step runs it: the wrapped computation is prepared like a ``while``
body (``prepare_control_flow``: its ``call`` inlined, a lone op wrapped into a fusion, a
wrapped fusion compiled as a kernel, a custom call kept as its library step or lowered, a
collective run as its step). Shapes are XLA's and unchanged: the start's
``((operands...), result, context...)``, the done's ``result``.

X keeps the start's attributes (its ``calls``, ``kind``, ``custom_call_target``, dimensions...)
and the start's source location, so a refusal of X names the user's line; the ``async-start``
keeps ``async_execution_thread``, control predecessors and metadata. Operands bound late (on an
``X-update``, or a start whose operand tuple is shorter than its operand list) and an output
bound only at the done (a start whose result is ``()`` but whose done is not) are refused by
name.
"""
from __future__ import annotations

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.opcodes import ASYNC_SUGAR_EXCLUDED, OPCODES
from hlo_compile.hlo.rewrite import CONTROL_PREDECESSORS, NameScope, add_computation, new_instruction
from hlo_compile.hlo.verifier import verify_instruction

_PHASES = ("start", "update", "done")
_OUTER = frozenset({"async_execution_thread", CONTROL_PREDECESSORS, "metadata"})


def sugar_of(inst: HloInstruction) -> tuple[str, str] | None:
    """(X, phase) of an ``X-start``/``X-update``/``X-done`` sugar instruction, else None."""
    base, _, phase = inst.opcode.rpartition("-")
    if phase not in _PHASES or base in ("async", "") or base in ASYNC_SUGAR_EXCLUDED or base not in OPCODES:
        return None
    return base, phase


def _refuse(inst: HloInstruction, why: str) -> HloUnsupportedError:
    where = f" (line {inst.location.line})" if inst.location else ""
    return HloUnsupportedError(f"{inst.opcode} '%{inst.name}'{where}: {why}", inst.location)


def _check_binding(start: HloInstruction) -> None:
    s = start.shape
    if not (s.is_tuple and len(s.tuple_shapes) >= 2 and s.tuple_shapes[0].is_tuple):
        raise _refuse(start, "expected the start shape ((operands...), result, context...)")
    if len(s.tuple_shapes[0].tuple_shapes) != len(start.operands):
        raise _refuse(start, "operands bound later than the start (late binding) are not supported")
    result = s.tuple_shapes[1]
    for user in start.users:
        if (sugar_of(user) or ("", ""))[1] == "done" and result.is_tuple and not result.tuple_shapes \
                and not (user.shape.is_tuple and not user.shape.tuple_shapes):
            raise _refuse(start, "an output bound only at the done (the start's result is ()) is not supported")


def _wrap_start(start: HloInstruction, base: str, module: HloModule, comp: HloComputation,
                names: NameScope) -> HloInstruction:
    """Turn ``start`` into ``async-start`` over a new computation holding ``base`` (in place)."""
    _check_binding(start)
    params = [new_instruction(names.fresh(f"param_{k}"), "parameter", op.shape, parameter_number=k, like=start)
              for k, op in enumerate(start.operands)]
    inner_attrs = {n: a for n, a in start.attributes.items() if n not in _OUTER or n == "metadata"}
    inner = new_instruction(names.fresh(f"wrapped_{start.name}"), base, start.shape.tuple_shapes[1], params,
                            inner_attrs, like=start)
    wrapped = HloComputation(names.fresh(f"async_wrapped_{start.name}"), params + [inner], inner,
                             location=start.location)
    add_computation(module, wrapped, before=comp)
    outer = {n: a for n, a in start.attributes.items() if n in _OUTER}
    start.attributes = {"calls": Attribute("calls", f"%{wrapped.name}", wrapped), **outer}
    start.opcode = "async-start"
    return inner


def wrap_async_sugar(module: HloModule) -> HloModule:
    """Every ``X-start``/``X-update``/``X-done`` of every computation as ``async-start``/
    ``async-update``/``async-done`` with a wrapped computation holding X; in place."""
    names: NameScope | None = None
    wrapped: list[HloInstruction] = []
    for comp in list(module.computations):
        for inst in comp.instructions:
            sugar = sugar_of(inst)
            if sugar is None:
                continue
            base, phase = sugar
            if phase == "start":
                if names is None:
                    names = NameScope([c.name for c in module.computations]
                                      + [i.name for c in module.computations for i in c.instructions])
                wrapped.append(_wrap_start(inst, base, module, comp, names))
            else:
                if len(inst.operands) != 1:
                    raise _refuse(inst, "operands bound at an update or done (late binding) are not supported")
                inst.opcode = f"async-{phase}"
    # the sugar's shape says nothing of X's own: X is checked as XLA would (a dot-start's dot),
    # after the refusals of forms we do not run, which name the form
    for inner in wrapped:
        verify_instruction(inner)
    return module
