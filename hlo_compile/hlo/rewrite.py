"""Editing the IR in place: the operations every pass is built from.

A pass makes new instructions with ``new_instruction`` (or ``clone_instruction`` in ``ir.py``),
named by a ``NameScope``; puts them in a computation with ``insert_instructions``; points the
users of a value at another with ``replace_uses``, or puts a new instruction in an old one's
place with ``replace_instructions``; and drops what nothing reads any more with
``remove_dead``. Uses are operands, the computation's ROOT, and ``control-predecessors`` lists
(an instruction that waits for the old one waits for the new one). Each operation leaves the
``users`` lists of the computation right. Attribute objects are never changed in place (copies
of a module or an instruction share them): a changed attribute is a new ``Attribute``.
"""
from __future__ import annotations

import weakref
from typing import Collection, Iterable, Mapping, Sequence, TypeVar

from .attributes import Attribute
from .errors import HloError
from .ir import HloComputation, HloInstruction, HloModule
from .shape import Shape

CONTROL_PREDECESSORS = "control-predecessors"

Target = TypeVar("Target", HloModule, HloComputation)


def computation_of(target: HloModule | HloComputation) -> HloComputation:
    """The computation a pass given ``target`` rewrites: a module's ENTRY, or the computation."""
    return target.entry if isinstance(target, HloModule) else target


def module_of(comp: HloComputation) -> HloModule:
    """The module ``comp`` belongs to (a pass that adds computations needs it)."""
    if comp.parent is None:
        raise HloError(f"computation {comp.name} belongs to no module")
    return comp.parent


# ---- names --------------------------------------------------------------------------------

class NameScope:
    """Names already taken; ``fresh`` hands out new ones as XLA's name uniquer does
    (``base``, then ``base.1``, ``base.2``...)."""

    def __init__(self, taken: Iterable[str] = ()):
        self._taken = set(taken)

    @classmethod
    def of_instructions(cls, computations: Iterable[HloComputation]) -> "NameScope":
        """The instruction names of ``computations``."""
        return cls(i.name for c in computations for i in c.instructions)

    @classmethod
    def of_computations(cls, module: HloModule) -> "NameScope":
        """The computation names of ``module``."""
        return cls(c.name for c in module.computations)

    def fresh(self, base: str) -> str:
        """A name not taken yet (``base`` itself when it is free), now taken."""
        name, i = base, 0
        while name in self._taken:
            i += 1
            name = f"{base}.{i}"
        self._taken.add(name)
        return name

    def release(self, name: str) -> None:
        """``name`` is free again (its instruction left or took another name)."""
        self._taken.discard(name)

    def __contains__(self, name: str) -> bool:
        return name in self._taken


def take_name(new: HloInstruction, old: HloInstruction, names: NameScope) -> None:
    """``new`` takes ``old``'s name, so that dumps and users keep naming what the user wrote;
    ``new``'s own name is released. ``old`` is about to leave its computation."""
    names.release(new.name)
    new.name = old.name


def rename(inst: HloInstruction, name: str) -> None:
    """Rename ``inst``; the text of control-predecessor lists naming it is rebuilt."""
    inst.name = name
    for other in (inst.parent.instructions if inst.parent is not None else ()):
        preds = control_predecessors(other)
        if any(p is inst for p in preds):
            set_control_predecessors(other, preds)


# ---- making and placing instructions ------------------------------------------------------

def new_instruction(name: str, opcode: str, shape: Shape, operands: Sequence[HloInstruction] = (),
                    attributes: dict[str, Attribute] | None = None, *, like: HloInstruction | None = None,
                    literal_text: str | None = None, parameter_number: int | None = None) -> HloInstruction:
    """A new instruction whose declared operand shapes are its operands' shapes and whose
    source location is that of ``like`` (the instruction it stands for or derives from)."""
    inst = HloInstruction(name, opcode, shape, operands, attributes, literal_text=literal_text,
                          parameter_number=parameter_number, location=like.location if like is not None else None)
    inst.declared_operand_shapes = [op.shape for op in operands]
    if CONTROL_PREDECESSORS in inst.attributes:
        _control_changed()
    return inst


def insert_instructions(comp: HloComputation, insts: Sequence[HloInstruction], *,
                        before: HloInstruction | None = None, after: HloInstruction | None = None) -> None:
    """Put ``insts`` (in order, operands first) into ``comp``: before ``before``, after
    ``after``, or at the end."""
    if before is not None and after is not None:
        raise ValueError("insert_instructions: give before or after, not both")
    if not insts:
        return
    if before is not None:
        at = _position(comp, before)
    elif after is not None:
        at = _position(comp, after) + 1
    else:
        at = len(comp.instructions)
    before_len = len(comp.instructions)
    comp.instructions[at:at] = insts
    if any(CONTROL_PREDECESSORS in i.attributes for i in insts):
        _control_changed()
    else:
        _kept_holders(comp, before_len)
    touched: dict[int, HloInstruction] = {}
    for inst in insts:
        inst.parent = comp
        for op in inst.operands:
            op.users.append(inst)
            touched[id(op)] = op
    for op in touched.values():  # each user once, first use first (linear, whatever the fan-out)
        op.users = list({id(u): u for u in op.users}.values())


def _position(comp: HloComputation, inst: HloInstruction) -> int:
    try:
        return comp.instructions.index(inst)  # instructions compare by identity: a scan in C
    except ValueError:
        raise HloError(f"'{inst.name}' is not an instruction of computation {comp.name}") from None


def remove_instructions(comp: HloComputation, insts: Collection[HloInstruction]) -> None:
    """Take ``insts`` out of ``comp`` (whoever still reads them is the caller's business)."""
    gone = set(insts)
    before, before_len = comp.instructions, len(comp.instructions)
    comp.instructions = [i for i in comp.instructions if i not in gone]
    _kept_holders(comp, before_len, before)
    for inst in gone:
        if inst.parent is comp:
            inst.parent = None
    comp.rebuild_users()


# ---- control predecessors -----------------------------------------------------------------

def control_predecessors(inst: HloInstruction) -> list[HloInstruction]:
    """The instructions ``inst`` must run after besides its operands."""
    value = inst.attr(CONTROL_PREDECESSORS, ())
    return list(value) if isinstance(value, tuple) else []


def set_control_predecessors(inst: HloInstruction, preds: Iterable[HloInstruction]) -> None:
    """Set ``inst``'s control predecessors (duplicates dropped; none removes the attribute),
    the attribute text rebuilt from their current names."""
    preds = _distinct(preds)
    if not preds:
        inst.attributes.pop(CONTROL_PREDECESSORS, None)
        return
    text = "{" + ", ".join(f"%{p.name}" for p in preds) + "}"
    inst.attributes[CONTROL_PREDECESSORS] = Attribute(CONTROL_PREDECESSORS, text, tuple(preds))
    _control_changed()


# Which instructions of a computation have control predecessors, kept so that replacing a
# few instructions does not scan the whole computation for them each time (Llama 8B: 15.6 M
# instructions looked at, 9 s). An entry is good while no control predecessor was set
# anywhere (``_control_epoch``: every operation here that gives an instruction control
# predecessors, or places one that has them, counts) and the computation's instruction
# list is the same list of the same length (the operations here that insert, replace or
# remove instructions carry a good index over: ``_kept_holders``); else it is scanned again.
_control_epoch = 0
_CONTROL_HOLDERS: "weakref.WeakKeyDictionary[HloComputation, tuple]" = weakref.WeakKeyDictionary()


def _control_changed() -> None:
    global _control_epoch
    _control_epoch += 1


def _kept_holders(comp: HloComputation, before_len: int, before: list | None = None) -> None:
    """After an operation here changed ``comp``'s instructions without adding one that has
    control predecessors: its index, if it was good before (``before``: the list it was for,
    when the operation replaced the list), stays good."""
    got = _CONTROL_HOLDERS.get(comp)
    if got is None or got[0] != _control_epoch or got[2] != before_len \
            or got[1] is not (comp.instructions if before is None else before):
        return
    _CONTROL_HOLDERS[comp] = (got[0], comp.instructions, len(comp.instructions), got[3])


def control_holders(comp: HloComputation) -> list[HloInstruction]:
    """The instructions of ``comp`` that have control predecessors, in order."""
    insts = comp.instructions
    got = _CONTROL_HOLDERS.get(comp)
    if got is not None and got[0] == _control_epoch and got[1] is insts and got[2] == len(insts):
        return [i for i in got[3] if CONTROL_PREDECESSORS in i.attributes]
    holders = [i for i in insts if CONTROL_PREDECESSORS in i.attributes]
    _CONTROL_HOLDERS[comp] = (_control_epoch, insts, len(insts), holders)
    return holders


def _distinct(insts: Iterable[HloInstruction]) -> list[HloInstruction]:
    out: list[HloInstruction] = []
    for i in insts:
        if all(i is not o for o in out):
            out.append(i)
    return out


def _retarget_control(inst: HloInstruction, replacements: Mapping[HloInstruction, HloInstruction]) -> None:
    """Control predecessors of ``inst`` that are keys of ``replacements`` become their values;
    the attribute text is kept verbatim when the names it lists do not change."""
    old = control_predecessors(inst)
    if not any(p in replacements for p in old):
        return
    new = [replacements.get(p, p) for p in old]
    if [p.name for p in _distinct(new)] == [p.name for p in old]:
        raw = inst.attributes[CONTROL_PREDECESSORS].raw
        inst.attributes[CONTROL_PREDECESSORS] = Attribute(CONTROL_PREDECESSORS, raw, tuple(_distinct(new)))
    else:
        set_control_predecessors(inst, new)


# ---- redirecting uses ---------------------------------------------------------------------

def replace_uses(comp: HloComputation, replacements: Mapping[HloInstruction, HloInstruction]) -> None:
    """In ``comp``, every use of a key of ``replacements`` (as an operand, as ROOT, as a
    control predecessor) becomes a use of its value. One sweep over ``comp`` for any number
    of replacements; the values' own operands are rewritten too, so build a replacement that
    reads the old value before it joins ``comp``."""
    if not replacements:
        return
    if len(replacements) <= _FEW and not any(v in replacements for v in replacements.values()):
        _replace_few_uses(comp, replacements)
        return
    for inst in comp.instructions:
        if any(op in replacements for op in inst.operands):
            inst.operands = [replacements.get(op, op) for op in inst.operands]
        _retarget_control(inst, replacements)
    comp.root = replacements.get(comp.root, comp.root)
    comp.rebuild_users()


# Up to this many replacements, uses are found through the ``users`` lists (kept right by
# every operation here) rather than by a sweep of the computation: a pass that replaces one
# instruction at a time (a split reduce) stays linear in the module.
_FEW = 4


def _replace_few_uses(comp: HloComputation, replacements: Mapping[HloInstruction, HloInstruction]) -> None:
    for inst in control_holders(comp):
        _retarget_control(inst, replacements)
    members = None
    for new in replacements.values():  # a value may read another key (a sweep would see it too)
        if new.parent is comp and any(op in replacements for op in new.operands):
            new.operands = [replacements.get(op, op) for op in new.operands]
    for old, new in replacements.items():
        for u in list(old.users):
            if u is new:  # a value built to read its key keeps reading it
                continue
            u.operands = [new if op is old else op for op in u.operands]
            if all(x is not u for x in new.users):
                new.users.append(u)
        old.users = [u for u in old.users if u is new]
        if old.parent is not comp:  # it left (replace_instructions): it reads nothing here now
            for op in old.operands:
                op.users = [u for u in op.users if u is not old]
        if comp.root is old:
            comp.root = new
        if new.parent is comp:  # a value that just joined: it reads its operands now
            for op in new.operands:
                if all(x is not new for x in op.users):
                    if members is None:
                        members = {id(i) for i in comp.instructions}
                    if id(op) in members:
                        op.users.append(new)


def replace_instructions(comp: HloComputation, replacements: Mapping[HloInstruction, HloInstruction]) -> None:
    """Each key of ``replacements`` leaves ``comp`` and its value stands for it: the value
    takes the key's place in the instruction order (unless it is in ``comp`` already), its
    control predecessors (the key keeps none) and all its uses. A value must not read its key."""
    if any(CONTROL_PREDECESSORS in v.attributes for v in replacements.values()):
        _control_changed()
    if len(replacements) <= _FEW and not any(v in replacements for v in replacements.values()):
        insts = comp.instructions  # a few: found and placed by scans in C, not a rebuilt list
        before_len = len(insts)
        deleted = 0  # in order of place, each found once: a deletion shifts only the later ones
        for pos, old in sorted(((insts.index(old), old) for old in replacements), key=lambda t: t[0]):
            new, at = replacements[old], pos - deleted
            if new in insts:
                del insts[at]
                deleted += 1
            else:
                insts[at] = new
        _kept_holders(comp, before_len)  # (a value with control predecessors moved the epoch)
    else:
        placed = {id(i) for i in comp.instructions if i not in replacements}  # stay where they are
        order = []
        for inst in comp.instructions:
            new = replacements.get(inst)
            if new is None:
                order.append(inst)
            elif id(new) not in placed:
                placed.add(id(new))
                order.append(new)
        comp.instructions = order
    for old, new in replacements.items():
        _move_control_predecessors(old, new)
        if old.parent is comp:
            old.parent = None
        new.parent = comp
    replace_uses(comp, replacements)


def _move_control_predecessors(old: HloInstruction, new: HloInstruction) -> None:
    preds = control_predecessors(old)
    if not preds:
        return
    attr = old.attributes.pop(CONTROL_PREDECESSORS)
    if control_predecessors(new):
        set_control_predecessors(new, control_predecessors(new) + preds)
    else:
        new.attributes[CONTROL_PREDECESSORS] = attr
        _control_changed()


def remove_dead(comp: HloComputation, candidates: Iterable[HloInstruction]) -> list[HloInstruction]:
    """Remove the ``candidates`` that nothing in ``comp`` reads (as an operand, as ROOT, as a
    control predecessor), transitively: removing one may leave another candidate unread.
    Instructions that are not candidates always stay. Returns the removed ones, in the
    computation's order. Linear: one count of the reads, then a worklist."""
    pending = {id(c): c for c in candidates}
    if not pending:
        return []
    reads: dict[int, int] = {id(comp.root): 1}
    for inst in comp.instructions:
        for r in (*inst.operands, *control_predecessors(inst)):
            reads[id(r)] = reads.get(id(r), 0) + 1
    members = {id(i) for i in comp.instructions}
    work = [c for c in pending.values() if id(c) in members and not reads.get(id(c))]
    dead: set[int] = set()
    while work:
        inst = work.pop()
        if id(inst) in dead:
            continue
        dead.add(id(inst))
        for r in (*inst.operands, *control_predecessors(inst)):
            reads[id(r)] -= 1
            if not reads[id(r)] and id(r) in pending and id(r) in members:
                work.append(r)
    removed = [i for i in comp.instructions if id(i) in dead]
    if removed:
        remove_instructions(comp, removed)
    else:
        comp.rebuild_users()
    return removed


# ---- computations -------------------------------------------------------------------------

def add_computation(module: HloModule, comp: HloComputation, *, before: HloComputation | None = None,
                    after: HloComputation | None = None) -> None:
    """Add ``comp`` to ``module``: before ``before``, after ``after``, or at the end (text
    order: a computation is printed before the computations that call it)."""
    if before is not None and after is not None:
        raise ValueError("add_computation: give before or after, not both")
    comps = module.computations
    at = len(comps)
    if before is not None or after is not None:
        anchor = before if before is not None else after
        at = next(k for k, c in enumerate(comps) if c is anchor) + (after is not None)
    comps.insert(at, comp)
    comp.parent = module


def add_computations(module: HloModule, comps: Sequence[HloComputation], *, before: HloComputation) -> None:
    """Add ``comps`` (in order) to ``module`` just before ``before``: one search, however many
    (a pass adding a fused computation per fusion)."""
    if not comps:
        return
    at = next(k for k, c in enumerate(module.computations) if c is before)
    module.computations[at:at] = comps
    for comp in comps:
        comp.parent = module


def remove_computations(module: HloModule, comps: Iterable[HloComputation]) -> None:
    """Drop ``comps`` from ``module`` (nothing may call them any more)."""
    gone = {id(c) for c in comps}
    module.computations = [c for c in module.computations if id(c) not in gone]


def set_entry(module: HloModule, comp: HloComputation) -> None:
    """Make ``comp`` (already in ``module``) its ENTRY."""
    module.entry.is_entry = False
    comp.is_entry = True
    module.entry = comp
