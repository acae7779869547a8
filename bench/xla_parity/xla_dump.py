"""Reading XLA:GPU's dump files (``xla_gpu_dump.py``'s ``xla_dump/``) and PTX text.

- ``parse_thunk_sequence``: ``*.thunk_sequence.txt``, one ``Thunk`` per line (``kCustomKernel``
  lines carry the kernel, grid, threads and shared memory of the launch; nested thunks of a
  ``kWhile``'s condition/body or a ``kConditional``'s branches keep their enclosing thunk);
- ``parse_thunk_metadata``: ``*.thunk_metadata.txt`` (protobuf text), thunk id -> profile
  annotation (the fusion or instruction name) and kind;
- ``ptx_entries``: each ``.entry`` of a PTX text, cut out by its braces;
- ``access_widths``: the widest global load and store of a PTX text (``ld.global.v4.f32`` is
  128 bits; ``cp.async`` global->shared copies count as loads of their size; generic-space
  ``ld``/``st`` count too, as LLVM emits them where it cannot prove the space);
- ``ptx_target``: the ``.target`` of a PTX text (``sm_90a``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Thunk:
    """One line of a thunk sequence."""

    id: int
    kind: str                               # kCustomKernel, kCopy, kWhile, kConvolution...
    kernel: str | None = None               # the kernel launched (None: not a launch)
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    shared_bytes: int | None = None         # dynamic shared memory of the launch
    parent: int | None = None               # the enclosing kWhile/kConditional thunk
    region: str | None = None               # "condition", "body", "branch_0"...

    @property
    def is_launch(self) -> bool:
        return self.grid is not None


_THUNK = re.compile(r"^(?P<indent>\s*)(?P<id>\d+):\s+(?P<kind>k\w+)\s*(?:\[[^\]]*\])?\s*(?P<rest>.*)$")
_LAUNCH = re.compile(r"(?P<kernel>\S+)\s+grid:\s*\[(?P<grid>[\d,\s]+)\]\s+threads:\s*\[(?P<block>[\d,\s]+)\]"
                     r"\s+shared_memory:\s*(?P<shared>\d+)\s*bytes")
_REGION = re.compile(r"^(?P<indent>\s*)(?P<label>[A-Za-z_]\w*):\s*$")


def _dims(text: str) -> tuple[int, int, int]:
    values = [int(v) for v in text.replace(",", " ").split()]
    values = (values + [1, 1, 1])[:3]
    return values[0], values[1], values[2]


def parse_thunk_sequence(text: str) -> list[Thunk]:
    """Every thunk of the sequence, in order (nested ones after their parent)."""
    out: list[Thunk] = []
    # (indent of the thunk line, thunk id) of the enclosing thunks; a region label belongs to
    # the innermost thunk not more indented than the label
    stack: list[tuple[int, int]] = []
    region: dict[int, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _THUNK.match(line)
        if m is None:
            r = _REGION.match(line)
            if r is not None:
                indent = len(r.group("indent"))  # XLA prints "condition:" at the while's own indent
                while stack and stack[-1][0] > indent:
                    stack.pop()
                if stack:
                    region[stack[-1][1]] = r.group("label")
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        tid, kind, rest = int(m.group("id")), m.group("kind"), m.group("rest")
        launch = _LAUNCH.search(rest)
        if launch is not None:
            out.append(Thunk(tid, kind, launch.group("kernel"), _dims(launch.group("grid")),
                             _dims(launch.group("block")), int(launch.group("shared")), parent,
                             region.get(parent) if parent is not None else None))
        else:
            out.append(Thunk(tid, kind, None, parent=parent,
                             region=region.get(parent) if parent is not None else None))
        stack.append((indent, tid))
    return out


@dataclass(frozen=True)
class ThunkInfo:
    annotation: str      # profile_annotation: the fusion's (or instruction's) name
    kind: str


_META_BLOCK = re.compile(r"\bthunk_metadata\s*\{")
_ANNOTATION = re.compile(r'profile_annotation:\s*"((?:[^"\\]|\\.)*)"')
_THUNK_ID = re.compile(r"thunk_id:\s*(\d+)")
_THUNK_KIND = re.compile(r'thunk_kind:\s*"([^"]*)"')


def parse_thunk_metadata(text: str) -> dict[int, ThunkInfo]:
    """thunk id -> (profile annotation, kind), from ``*.thunk_metadata.txt``."""
    out: dict[int, ThunkInfo] = {}
    starts = [m.start() for m in _META_BLOCK.finditer(text)] + [len(text)]
    for a, b in zip(starts, starts[1:]):
        block = text[a:b]
        tid, ann = _THUNK_ID.search(block), _ANNOTATION.search(block)
        if tid is None or ann is None:
            continue
        kind = _THUNK_KIND.search(block)
        name = re.sub(r"\\(.)", r"\1", ann.group(1))
        out[int(tid.group(1))] = ThunkInfo(name, kind.group(1) if kind else "")
    return out


# ---- PTX --------------------------------------------------------------------------------------

_ENTRY = re.compile(r"^[^\n/]*\.entry\s+([\w$.]+)\s*\(", re.M)
_TARGET = re.compile(r"^\s*\.target\s+(\w+)", re.M)


def ptx_target(text: str) -> str | None:
    m = _TARGET.search(text)
    return m.group(1) if m else None


def _strip_comments(text: str) -> str:
    """PTX with ``//`` and ``/* */`` comments blanked out (same length: offsets hold)."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.S)


def ptx_entries(text: str) -> dict[str, str]:
    """``.entry`` name -> its text, from the start of its line to its closing brace (its
    parameter list, directives and body). An entry without a body is left out."""
    clean = _strip_comments(text)
    out: dict[str, str] = {}
    for m in _ENTRY.finditer(clean):
        start = clean.rfind("\n", 0, m.start()) + 1
        close = clean.find(")", m.end())  # the parameter list holds no parentheses or braces
        body = clean.find("{", close if close >= 0 else m.end())
        if body < 0:
            continue
        depth, i = 0, body
        while i < len(clean):
            c = clean[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out[m.group(1)] = text[start:i + 1]
    return out


@dataclass
class AccessWidths:
    """The widest global (or generic) load and store of a PTX text, in bits (None: none)."""

    load_bits: int | None = None
    store_bits: int | None = None
    load_op: str | None = None      # the spelling of a widest load (``ld.global.nc.v4.f32``)
    store_op: str | None = None
    bulk_copies: int = 0            # cp.async.bulk (TMA) copies: no per-thread width
    ops: dict[str, int] = field(default_factory=dict)  # every global/generic ld/st spelling -> count

    @property
    def load_bytes(self) -> int:
        """Bytes of every global/generic load instruction of the text (each counted once, as
        written: an unrolled body's loads, not a loop's trips), cp.async copies included."""
        total = 0
        for op, n in self.ops.items():
            if op.startswith("st"):
                continue
            bits = int(op.rsplit(".", 1)[1]) * 8 if op.startswith("cp.async") else access_bits(op)
            total += n * (bits or 0) // 8
        return total

    def to_json(self) -> dict:
        return {"load_bits": self.load_bits, "store_bits": self.store_bits, "load_op": self.load_op,
                "store_op": self.store_op, "bulk_copies": self.bulk_copies, "load_bytes": self.load_bytes}


_SPACES = {"global", "shared", "local", "param", "const", "tex", "shared::cta", "shared::cluster"}
_TYPE = re.compile(r"^(?:b|u|s|f|bf|e4m3|e5m2)(\d+)(?:x(\d+))?$")
_LDST = re.compile(r"(?<![\w.])(ldu?|st)((?:\.[\w:]+)+)\s")
_CP_ASYNC = re.compile(r"(?<![\w.])cp\.async((?:\.[\w:]+)+)\s+([^;]*);")


def access_bits(op: str) -> int | None:
    """Bits moved by one ``ld``/``st`` spelled ``op`` (``ld.global.nc.v4.f32`` -> 128), None if
    its type cannot be read."""
    parts = op.split(".")[1:]
    vector, bits = 1, None
    for p in parts:
        if p.startswith("v") and p[1:].isdigit():
            vector = int(p[1:])
            continue
        t = _TYPE.match(p)
        if t:
            bits = int(t.group(1)) * (int(t.group(2)) if t.group(2) else 1)
    return None if bits is None else vector * bits


def access_space(op: str) -> str:
    """The state space of an ``ld``/``st`` spelling ("generic" when it names none)."""
    for p in op.split(".")[1:]:
        if p in _SPACES:
            return p.split("::")[0]
    return "generic"


def access_widths(text: str) -> AccessWidths:
    """The widest global/generic load and store in ``text`` (an entry's PTX)."""
    out = AccessWidths()
    clean = _strip_comments(text)
    for m in _LDST.finditer(clean):
        op = m.group(1) + m.group(2)
        if access_space(op) not in ("global", "generic"):
            continue
        bits = access_bits(op)
        out.ops[op] = out.ops.get(op, 0) + 1
        if bits is None:
            continue
        if m.group(1) == "st":
            if out.store_bits is None or bits > out.store_bits:
                out.store_bits, out.store_op = bits, op
        elif out.load_bits is None or bits > out.load_bits:
            out.load_bits, out.load_op = bits, op
    for m in _CP_ASYNC.finditer(clean):
        mods = m.group(1)
        op = "cp.async" + mods
        if ".bulk" in mods:
            out.bulk_copies += 1
            continue
        if ".shared" not in mods or ".global" not in mods:
            continue
        operands = [o.strip() for o in m.group(2).split(",")]
        size = operands[2] if len(operands) > 2 else ""
        if not size.isdigit():
            continue
        bits = int(size) * 8
        out.ops[f"{op}.{size}"] = out.ops.get(f"{op}.{size}", 0) + 1   # the bytes in the key: load_bytes
        if out.load_bits is None or bits > out.load_bits:
            out.load_bits, out.load_op = bits, op
    return out


# ---- a case folder ----------------------------------------------------------------------------

@dataclass
class XlaKernels:
    """XLA's side of one case: its thunks, their names, and each kernel's PTX."""

    thunks: list[Thunk]
    info: dict[int, ThunkInfo]
    entries: dict[str, str]            # kernel -> its .entry text
    entry_file: dict[str, Path]        # kernel -> the PTX file holding it
    ptx_files: dict[Path, str]         # every PTX file -> its text
    target: str | None                 # the PTX's .target (sm_90a)

    def annotation(self, thunk: Thunk) -> str | None:
        info = self.info.get(thunk.id)
        return info.annotation if info is not None else None


def read_xla_dump(folder: Path) -> XlaKernels:
    """XLA's kernels from ``folder`` (a case's ``xla_dump/``). A missing thunk sequence is an
    error (``FileNotFoundError``); missing metadata leaves annotations unknown."""
    seq = sorted(folder.glob("*.thunk_sequence.txt"))
    if not seq:
        raise FileNotFoundError(f"{folder}: no *.thunk_sequence.txt")
    thunks = parse_thunk_sequence(seq[0].read_text())
    meta = sorted(folder.glob("*.thunk_metadata.txt"))
    info = parse_thunk_metadata(meta[0].read_text()) if meta else {}
    entries: dict[str, str] = {}
    entry_file: dict[str, Path] = {}
    files: dict[Path, str] = {}
    target = None
    for path in sorted(folder.glob("*.ptx")):
        text = path.read_text(errors="replace")
        files[path] = text
        target = target or ptx_target(text)
        for name, body in ptx_entries(text).items():
            entries.setdefault(name, body)
            entry_file.setdefault(name, path)
    return XlaKernels(thunks, info, entries, entry_file, files, target)
