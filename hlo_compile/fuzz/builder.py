"""A small module builder: computations as lists of instruction records, printed as HLO text.

The generator appends instructions (``Comp.add``) and the fusion outliner moves them between
computations, so records are plain mutable objects: a ``Value`` is what an instruction
defines (name, shape, whether its value is bit-reproducible), an ``Inst`` how it is computed.
Names are unique in the whole module. Computations print in the order they were finished
(every computation before its users), ENTRY last.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .shapes import FShape, FTuple


@dataclass(eq=False)
class Value:
    name: str
    shape: FShape | FTuple
    exact: bool = True       # bit-reproducible: compared bit for bit (see exactness.py)
    uses: int = 0

    @property
    def is_array(self) -> bool:
        return not self.shape.is_tuple


@dataclass(eq=False)
class Inst:
    value: Value
    opcode: str
    operands: list[Value]
    attrs: list[str] = field(default_factory=list)
    payload: str = ""        # parameter number or constant literal

    def text(self, is_root: bool = False) -> str:
        head = ("ROOT " if is_root else "") + f"{self.value.name} = {self.value.shape.text()} {self.opcode}("
        if self.opcode in ("parameter", "constant"):
            head += self.payload
        else:
            head += ", ".join(o.name for o in self.operands)
        return head + ")" + "".join(", " + a for a in self.attrs)


class Comp:
    """One computation under construction. ``kind``: entry, body, cond, branch, fused, call, scalar."""

    def __init__(self, module: "ModuleBuilder", name: str, kind: str):
        self.module = module
        self.name = name
        self.kind = kind
        self.insts: list[Inst] = []
        self.params: list[Value] = []
        self.root: Value | None = None

    def param(self, shape: FShape | FTuple, exact: bool = True, name: str | None = None) -> Value:
        v = Value(name or self.module.fresh("p"), shape, exact)
        self.insts.insert(len(self.params), Inst(v, "parameter", [], payload=str(len(self.params))))
        self.params.append(v)
        return v

    def add(self, opcode: str, shape: FShape | FTuple, operands: Sequence[Value] = (), attrs: Sequence[str] = (),
            payload: str = "", exact: bool | None = None, name: str | None = None) -> Value:
        if exact is None:
            exact = all(o.exact for o in operands)
        v = Value(name or self.module.fresh(_short(opcode)), shape, exact)
        for o in operands:
            o.uses += 1
        self.insts.append(Inst(v, opcode, list(operands), list(attrs), payload))
        return v

    def values(self) -> list[Value]:
        return [i.value for i in self.insts]

    def inst_of(self, v: Value) -> Inst:
        for i in self.insts:
            if i.value is v:
                return i
        raise KeyError(v.name)

    def text(self) -> str:
        prefix = "ENTRY " if self.kind == "entry" else ""
        lines = [f"{prefix}{self.name} {{"]
        for inst in self.insts:
            lines.append("  " + inst.text(inst.value is self.root))
        lines.append("}")
        return "\n".join(lines)


def _short(opcode: str) -> str:
    return {"get-tuple-element": "gte", "dynamic-update-slice": "dus", "dynamic-slice": "ds",
            "bitcast-convert": "bcc", "select-and-scatter": "sas", "reduce-window": "rw",
            "broadcast": "bcast", "constant": "c", "parameter": "p"}.get(opcode, opcode.replace("-", "_"))


class ModuleBuilder:
    def __init__(self, name: str = "fuzz"):
        self.name = name
        self.finished: list[Comp] = []
        self.entry: Comp | None = None
        self._counter = 0
        self.cache: dict = {}   # shared scalar computations by key
        self.world: tuple[int, int] | None = None  # (replicas, partitions) of an SPMD module
        self._channels = 0

    def next_channel(self) -> int:
        """A channel id no other instruction of the module uses."""
        self._channels += 1
        return self._channels

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}.{self._counter}"

    def comp(self, prefix: str, kind: str) -> Comp:
        c = Comp(self, self.fresh(prefix) if kind != "entry" else "main", kind)
        if kind == "entry":
            self.entry = c
        return c

    def finish(self, comp: Comp, root: Value, root_last: bool = True) -> None:
        """Make ``root`` the root of ``comp``; with ``root_last``, instructions after it (which
        it cannot read) are dropped, so the ROOT is the last instruction, as XLA prints."""
        comp.root = root
        root.uses += 1
        if root_last:
            at = next(k for k, i in enumerate(comp.insts) if i.value is root)
            del comp.insts[at + 1:]
        if comp.kind != "entry":
            self.finished.append(comp)

    def text(self) -> str:
        header = f", replica_count={self.world[0]}, num_partitions={self.world[1]}" if self.world else ""
        parts = [f"HloModule {self.name}{header}", ""]
        for c in self.finished:
            parts += [c.text(), ""]
        parts += [self.entry.text(), ""]
        return "\n".join(parts)
