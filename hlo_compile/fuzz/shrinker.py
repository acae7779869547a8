"""Shrink a failing module to a small reproducer while the failure persists.

``shrink(text, interesting)`` applies reductions greedily, keeping each candidate that still
verifies and for which ``interesting(candidate_text)`` holds (the same failure: see
``runner.Outcome.signature``), until none applies or the budget is spent:

1. a smaller root (one output of a tuple root, or any earlier instruction);
2. an instruction replaced by a new ENTRY parameter (inside a loop body or branch: by a
   broadcast constant; inside a fusion: by a new fusion parameter);
3. an instruction bypassed (its users read an operand of the same shape instead);
4. fusions and calls inlined, conditionals turned into a call of one branch;
5. layouts made default, array constants made scalar broadcasts;
6. dimensions shrunk (every dimension of size N, and the attributes that mention N, set
   to a smaller M), element types narrowed to f32/s32.

Dead instructions, parameters and computations are removed after each step. Works on any
module our front end parses, not only generated ones.
"""
from __future__ import annotations

import re
import time
from typing import Callable, Iterator

from ..hlo import parse_module
from ..hlo.attributes import Attribute
from ..hlo.errors import HloError
from ..hlo.ir import HloComputation, HloInstruction, HloModule

Candidate = Callable[[HloModule], bool]  # edits a fresh copy in place; False: not applicable


def _parse(text: str) -> HloModule:
    return parse_module(text, "<shrink>", verify=False)


def render(module: HloModule) -> str:
    module.attributes.pop("entry_computation_layout", None)
    return module.to_text("short")


def _valid(text: str) -> bool:
    try:
        parse_module(text, "<shrink>")
        return True
    except (HloError, ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
        return False


_LAYOUT = re.compile(r"\b[a-z]+\d*\[([\d,]*)\]\{([\d,]*)(:[^}]*)?\}")
_WIDE = re.compile(r"\b(f64|bf16|f16|s64|u64|s16|u16|s8|u8)\[")


def size_of(text: str) -> tuple[int, int, int]:
    """How big a module is: (instructions, complexity, elements of every array), compared in
    that order; complexity counts non-default layouts, fusions and calls, and narrow or wide
    element types."""
    n = sum(1 for line in text.splitlines() if " = " in line)
    elems = 0
    for m in _SHAPE.finditer(text):
        p = 1
        for d in (int(x) for x in m.group(2).split(",") if x):
            p *= d
        elems += p
    odd = 0
    for m in _LAYOUT.finditer(text):
        m2m = [int(x) for x in m.group(2).split(",") if x]
        if m.group(3) or m2m != sorted(m2m, reverse=True):
            odd += 1
    odd += text.count(" fusion(") + text.count(" call(") + len(_WIDE.findall(text))
    return n, odd, elems


class _Names:
    def __init__(self, module: HloModule):
        self.taken = {i.name for c in module.computations for i in c.instructions}
        self.n = 0

    def fresh(self, prefix: str) -> str:
        while True:
            self.n += 1
            name = f"{prefix}.s{self.n}"
            if name not in self.taken:
                self.taken.add(name)
                return name


# ---- IR helpers ---------------------------------------------------------------------------------

def _users_map(comp: HloComputation) -> dict[int, list[HloInstruction]]:
    users: dict[int, list[HloInstruction]] = {}
    for inst in comp.instructions:
        for o in inst.operands:
            users.setdefault(id(o), []).append(inst)
    return users


def _replace_uses(comp: HloComputation, old: HloInstruction, new: HloInstruction) -> None:
    for inst in comp.instructions:
        if any(o is old for o in inst.operands):
            inst.operands = [new if o is old else o for o in inst.operands]
    if comp.root is old:
        comp.root = new


def _callers(module: HloModule) -> dict[int, list[tuple[HloComputation, HloInstruction]]]:
    out: dict[int, list] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            for c in inst.called_computations():
                out.setdefault(id(c), []).append((comp, inst))
    return out


def dce(module: HloModule, keep_dead: frozenset = frozenset()) -> None:
    """Remove dead instructions (except in the computations named in ``keep_dead``), unused
    ENTRY/fusion parameters and unreachable computations."""
    changed = True
    while changed:
        changed = False
        callers = _callers(module)
        for comp in module.computations:
            used = {id(comp.root)} | {id(o) for i in comp.instructions for o in i.operands}
            keep = [i for i in comp.instructions if i.opcode == "parameter" or id(i) in used or comp.name in keep_dead]
            if len(keep) != len(comp.instructions):
                comp.instructions = keep
                changed = True
            fusion_callers = callers.get(id(comp), [])
            removable = comp is module.entry or (
                len(fusion_callers) == 1 and fusion_callers[0][1].opcode in ("fusion", "call"))
            if not removable:
                continue
            params = comp.parameters
            dead = [p for p in params if id(p) not in used]
            if not dead:
                continue
            caller = fusion_callers[0][1] if comp is not module.entry else None
            live = [p for p in params if id(p) in used]
            if caller is not None:
                caller.operands = [caller.operands[p.parameter_number] for p in live]
            comp.instructions = [i for i in comp.instructions if i.opcode != "parameter" or id(i) in used]
            for k, p in enumerate(live):
                p.parameter_number = k
            changed = True
        changed = _drop_unused_outputs(module, callers) or changed
        reachable: set[int] = set()
        stack = [module.entry]
        while stack:
            c = stack.pop()
            if id(c) in reachable:
                continue
            reachable.add(id(c))
            for i in c.instructions:
                stack.extend(i.called_computations())
        kept = [c for c in module.computations if id(c) in reachable]
        if len(kept) != len(module.computations):
            module.computations = kept
            changed = True
    for comp in module.computations:
        comp.rebuild_users()


def _drop_unused_outputs(module: HloModule, callers) -> bool:
    """A fusion/call whose tuple root has elements no get-tuple-element reads loses them."""
    from ..hlo.shape import Shape
    changed = False
    for comp in module.computations:
        users = _users_map(comp)
        for inst in comp.instructions:
            if inst.opcode not in ("fusion", "call") or not inst.shape.is_tuple or inst is comp.root:
                continue
            body = inst.called_computations()[0]
            if body.root.opcode != "tuple" or len(callers.get(id(body), [])) != 1:
                continue
            us = users.get(id(inst), [])
            if any(u.opcode != "get-tuple-element" for u in us):
                continue
            live = sorted({u.tuple_index for u in us})
            if len(live) == len(body.root.operands) or not live:
                continue
            root = body.root
            root.operands = [root.operands[k] for k in live]
            root.shape = Shape.tuple_of([o.shape for o in root.operands])
            inst.shape = root.shape
            for u in us:
                k = live.index(u.tuple_index)
                u.attributes["index"] = Attribute("index", str(k), k)
            changed = True
    return changed


def _entry_param(module: HloModule, names: _Names, shape) -> HloInstruction:
    entry = module.entry
    p = HloInstruction(names.fresh("arg"), "parameter", shape, parameter_number=len(entry.parameters))
    p.parent = entry
    entry.instructions.insert(len(entry.parameters), p)
    return p


def _scalar_broadcast(comp: HloComputation, names: _Names, shape, before: HloInstruction) -> HloInstruction:
    from ..hlo.shape import Shape
    et = shape.element_type
    zero = "false" if et == "pred" else "0"
    c = HloInstruction(names.fresh("zero"), "constant", Shape.array(et, ()), literal_text=zero)
    b = HloInstruction(names.fresh("bcast"), "broadcast", shape, [c],
                       {"dimensions": Attribute("dimensions", "{}", ())})
    at = comp.instructions.index(before)
    comp.instructions[at:at] = [c, b]
    c.parent = b.parent = comp
    return b


# ---- candidates ---------------------------------------------------------------------------------

def _root_candidates(module: HloModule) -> Iterator[Candidate]:
    entry = module.entry
    root = entry.root
    if root.opcode == "tuple":
        for k in range(len(root.operands)):
            def pick(m: HloModule, k=k) -> bool:
                m.entry.root = m.entry.root.operands[k]
                return True
            yield pick
        if len(root.operands) > 2:
            for k in range(len(root.operands)):
                def drop(m: HloModule, k=k) -> bool:
                    r = m.entry.root
                    r.operands = [o for i, o in enumerate(r.operands) if i != k]
                    from ..hlo.shape import Shape
                    r.shape = Shape.tuple_of([o.shape for o in r.operands])
                    return True
                yield drop
    names = [i.name for i in entry.instructions if i.opcode != "parameter" and i is not root and i.shape.is_array]
    for name in reversed(names):
        def as_root(m: HloModule, name=name) -> bool:
            m.entry.root = m.entry.instruction(name)
            return True
        yield as_root


_EDITABLE_CALLERS = frozenset({"fusion", "call", "while", "conditional", "map"})


def editable(module: HloModule) -> list[HloComputation]:
    """Computations whose instructions may be edited: ENTRY and the bodies of fusions, calls,
    loops, branches and maps. Reducers, comparators and combiners keep their semantics (a
    reduce with a non-associative reducer is not a smaller case of the same bug)."""
    callers = _callers(module)
    return [c for c in module.computations if c is module.entry or
            (callers.get(id(c)) and all(i.opcode in _EDITABLE_CALLERS for _, i in callers[id(c)]))]


def _dead_candidates(module: HloModule) -> Iterator[Candidate]:
    """One dead instruction removed (when dead code is part of the failure, one at a time)."""
    for comp in editable(module):
        used = {id(comp.root)} | {id(o) for i in comp.instructions for o in i.operands}
        for inst in comp.instructions:
            if inst.opcode != "parameter" and id(inst) not in used:
                def drop(m: HloModule, cn=comp.name, n=inst.name) -> bool:
                    c = m.computation(cn)
                    c.instructions = [i for i in c.instructions if i.name != n]
                    c.rebuild_users()
                    return True
                yield drop


def _where(module: HloModule) -> list[tuple[str, str]]:
    """(computation, instruction) names of every non-parameter array instruction, ENTRY's last
    instructions first (replacing those removes the most)."""
    out = []
    for comp in [module.entry] + [c for c in editable(module) if c is not module.entry]:
        insts = [i for i in comp.instructions if i.opcode not in ("parameter",) and i.shape.is_array]
        out += [(comp.name, i.name) for i in reversed(insts)]
    return out


def _replace_candidates(module: HloModule) -> Iterator[Candidate]:
    callers = _callers(module)
    for cname, iname in _where(module):
        comp = module.computation(cname)
        inst = comp.instruction(iname)
        if inst.opcode == "constant" and inst.shape.rank == 0:
            continue
        kind = "entry" if comp is module.entry else None
        if kind is None:
            cs = callers.get(id(comp), [])
            if len(cs) == 1 and cs[0][1].opcode == "fusion" and cs[0][0] is module.entry:
                kind = "fused"
            else:
                kind = "nested"

        def replace(m: HloModule, cname=cname, iname=iname, kind=kind) -> bool:
            names = _Names(m)
            c = m.computation(cname)
            old = c.instruction(iname)
            if kind == "entry":
                new = _entry_param(m, names, old.shape)
            elif kind == "fused":
                fusion = next(i for i in m.entry.instructions if c in i.called_computations())
                outer = _entry_param(m, names, old.shape)
                new = HloInstruction(names.fresh("param"), "parameter", old.shape,
                                     parameter_number=len(c.parameters))
                new.parent = c
                c.instructions.insert(len(c.parameters), new)
                fusion.operands.append(outer)
            else:
                if old.opcode == "broadcast" and old.operands[0].opcode == "constant":
                    return False
                new = _scalar_broadcast(c, names, old.shape, old)
            _replace_uses(c, old, new)
            return True
        yield replace


def _bypass_candidates(module: HloModule) -> Iterator[Candidate]:
    for comp in editable(module):
        for inst in comp.instructions:
            for k, o in enumerate(inst.operands):
                same = o.shape == inst.shape or (o.shape.is_array and inst.shape.is_array and inst is not comp.root
                                                 and o.shape.without_layout() == inst.shape.without_layout())
                if not same or inst.opcode == "parameter":
                    continue

                def bypass(m: HloModule, cname=comp.name, iname=inst.name, k=k) -> bool:
                    c = m.computation(cname)
                    old = c.instruction(iname)
                    _replace_uses(c, old, old.operands[k])
                    return True
                yield bypass


def _inline_candidates(module: HloModule) -> Iterator[Candidate]:
    for comp in editable(module):
        for inst in comp.instructions:
            if inst.opcode in ("fusion", "call"):
                yield lambda m, cn=comp.name, n=inst.name: _inline(m, cn, n)
            elif inst.opcode == "conditional":
                for k in range(len(inst.called_computations())):
                    yield lambda m, cn=comp.name, n=inst.name, k=k: _conditional_to_call(m, cn, n, k)


def _inline(m: HloModule, cname: str, iname: str) -> bool:
    from ..hlo.ir import clone_instruction
    comp = m.computation(cname)
    call = comp.instruction(iname)
    body = call.called_computations()[0]
    names = _Names(m)
    mapping: dict[int, HloInstruction] = {}
    new: list[HloInstruction] = []
    for i in body.instructions:
        if i.opcode == "parameter":
            mapping[id(i)] = call.operands[i.parameter_number]
            continue
        c = clone_instruction(i, [mapping[id(o)] for o in i.operands])
        c.name = names.fresh(i.name)
        c.parent = comp
        mapping[id(i)] = c
        new.append(c)
    at = comp.instructions.index(call)
    comp.instructions[at:at] = new
    _replace_uses(comp, call, mapping[id(body.root)])
    return True


def _conditional_to_call(m: HloModule, cname: str, iname: str, k: int) -> bool:
    comp = m.computation(cname)
    cond = comp.instruction(iname)
    branch = cond.called_computations()[k]
    call = HloInstruction(_Names(m).fresh("branch_call"), "call", cond.shape, [cond.operands[k + 1]],
                          {"to_apply": Attribute("to_apply", branch.name, branch)})
    call.parent = comp
    comp.instructions[comp.instructions.index(cond)] = call
    _replace_uses(comp, cond, call)
    return True


def _layout_candidates(module: HloModule) -> Iterator[Candidate]:
    def all_default(m: HloModule) -> bool:
        changed = False
        for c in m.computations:
            for i in c.instructions:
                s = i.shape.without_layout()
                if s != i.shape:
                    i.shape, changed = s, True
        return changed
    yield all_default
    for comp in module.computations:
        def comp_default(m: HloModule, cn=comp.name) -> bool:
            changed = False
            for i in m.computation(cn).instructions:
                s = i.shape.without_layout()
                if s != i.shape:
                    i.shape, changed = s, True
            return changed
        yield comp_default


def _constant_candidates(module: HloModule) -> Iterator[Candidate]:
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "constant" and inst.shape.is_array and inst.shape.rank > 0:
                def scalarize(m: HloModule, cn=comp.name, n=inst.name) -> bool:
                    c = m.computation(cn)
                    old = c.instruction(n)
                    new = _scalar_broadcast(c, _Names(m), old.shape, old)
                    _replace_uses(c, old, new)
                    return True
                yield scalarize


# ---- text-level candidates (dimensions, element types) --------------------------------------

_SHAPE = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_SIZE_ATTRS = re.compile(r"(slice=\{[^}]*\}|dynamic_slice_sizes=\{[^}]*\}|slice_sizes=\{[^}]*\}|"
                         r"window=\{[^}]*\}|padding=[\d_x-]+)")


def _dim_texts(text: str) -> Iterator[str]:
    sizes = sorted({int(d) for m in _SHAPE.finditer(text) for d in m.group(2).split(",") if d}, reverse=True)
    for n in sizes:
        if n < 2:
            continue
        for new in sorted({1, n // 2, n - 1}):
            if new >= n:
                continue
            for with_attrs in (False, True):
                yield _replace_dim(text, n, new, with_attrs)


def _replace_dim(text: str, n: int, new: int, with_attrs: bool) -> str:
    def dims(m: re.Match) -> str:
        ds = [str(new) if d == str(n) else d for d in m.group(2).split(",")] if m.group(2) else []
        return f"{m.group(1)}[{','.join(ds)}]"
    out = _SHAPE.sub(dims, text)
    if with_attrs:
        out = _SIZE_ATTRS.sub(lambda m: re.sub(rf"(?<![\d.]){n}(?![\d.])", str(new), m.group(0)), out)
    return out


def _type_texts(text: str) -> Iterator[str]:
    present = {m.group(1) for m in _SHAPE.finditer(text)}
    for et, to in (("f64", "f32"), ("bf16", "f32"), ("f16", "f32"), ("s64", "s32"), ("u64", "u32"),
                   ("s16", "s32"), ("u16", "u32"), ("s8", "s32"), ("u8", "u32"), ("u32", "s32")):
        if et in present:
            yield re.sub(rf"\b{et}\[", f"{to}[", text)


# ---- the driver ---------------------------------------------------------------------------------

class Shrinker:
    def __init__(self, text: str, interesting: Callable[[str], bool], *, budget_s: float = 600,
                 max_checks: int = 400, log: Callable[[str], None] | None = None):
        self.best = text
        self.interesting = interesting
        self.deadline = time.monotonic() + budget_s
        self.max_checks = max_checks
        self.checks = 0
        self.log = log or (lambda s: None)
        self.seen: set[str] = set()
        self.keep_dead: frozenset = frozenset()  # computations whose dead code the failure needs

    def _out_of_budget(self) -> bool:
        return self.checks >= self.max_checks or time.monotonic() > self.deadline

    def _try_text(self, text: str) -> bool:
        if text in self.seen or size_of(text) >= size_of(self.best):
            return False
        self.seen.add(text)
        if not _valid(text):
            return False
        self.checks += 1
        if self.interesting(text):
            n, odd, elems = size_of(text)
            self.log(f"  shrunk to {n} instructions, {elems} elements, complexity {odd}")
            self.best = text
            return True
        return False

    def _try(self, edit: Candidate) -> bool:
        m = _parse(self.best)
        try:
            if not edit(m):
                return False
            dce(m, self.keep_dead)
            text = render(m)
        except (HloError, ValueError, KeyError, IndexError, StopIteration, AttributeError, TypeError):
            return False
        return self._try_text(text)

    def _pass(self, make: Callable[[HloModule], Iterator[Candidate]]) -> bool:
        """Try each candidate of ``make`` on the current best (restarting after a success)."""
        progress = False
        restart = True
        while restart and not self._out_of_budget():
            restart = False
            for edit in make(_parse(self.best)):
                if self._out_of_budget():
                    break
                if self._try(edit):
                    progress = restart = True
                    break
        return progress

    def _text_pass(self, make: Callable[[str], Iterator[str]]) -> bool:
        progress = False
        restart = True
        while restart and not self._out_of_budget():
            restart = False
            for text in make(self.best):
                if self._out_of_budget():
                    break
                m = None
                try:
                    m = _parse(text)
                    dce(m, self.keep_dead)
                    text = render(m)
                except (HloError, ValueError, KeyError, IndexError, AttributeError, TypeError):
                    continue
                if self._try_text(text):
                    progress = restart = True
                    break
        return progress

    def _find_needed_dead_code(self) -> None:
        """Dead code is part of the failure (e.g. instructions after a ROOT): keep it only in the
        computations where removing it loses the failure."""
        m = _parse(self.best)
        names = [c.name for c in m.computations
                 if len({id(c.root)} | {id(o) for i in c.instructions for o in i.operands} |
                        {id(i) for i in c.instructions if i.opcode == "parameter"}) < len(c.instructions)]
        keep = set(names)
        for name in names:
            trial = frozenset(keep - {name})
            m = _parse(self.best)
            dce(m, trial)
            text = render(m)
            self.checks += 1
            if _valid(text) and self.interesting(text):
                keep.discard(name)
                self.best = text
        self.keep_dead = frozenset(keep)
        self.log(f"  the failure needs the dead code of {', '.join(sorted(keep)) or 'nothing'}")

    def run(self) -> str:
        try:  # normalise first (dead code out, short form): kept if it still fails
            m = _parse(self.best)
            dce(m)
            text = render(m)
            if text != self.best and _valid(text):
                self.checks += 1
                if self.interesting(text):
                    self.best = text
                else:
                    self._find_needed_dead_code()
        except HloError:
            pass
        passes = [lambda: self._pass(_root_candidates), lambda: self._pass(_dead_candidates),
                  lambda: self._pass(_replace_candidates),
                  lambda: self._pass(_inline_candidates), lambda: self._pass(_bypass_candidates),
                  lambda: self._pass(_constant_candidates), lambda: self._pass(_layout_candidates),
                  lambda: self._text_pass(_type_texts), lambda: self._text_pass(_dim_texts)]
        progress = True
        while progress and not self._out_of_budget():
            progress = False
            for p in passes:
                if self._out_of_budget():
                    break
                progress = p() or progress
        return self.best


def shrink(text: str, interesting: Callable[[str], bool], **kw) -> str:
    """The smallest variant of ``text`` found for which ``interesting`` still holds."""
    return Shrinker(text, interesting, **kw).run()
