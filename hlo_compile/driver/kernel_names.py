"""A kernel's LLVM IR with its names made canonical, and its outputs named again (issue 17:
a renamed fusion hits the kernel cache).

XLA renumbers ``%fusion.123`` between dumps of one model, and our kernels' IR is named after
the HLO (the kernel after its fusion, helpers after instructions, arguments after parameters).
``canonical_ir`` replaces each name the module defines (a function or global it defines, a
local value, argument or block) by a placeholder numbered in order of first appearance
(``__hlo_g3__`` for a global, ``__hlo_v7__`` for a local): two kernels whose IR differs only in
names get the same canonical text, which keys the cache entry, and which is what LLVM
optimises and turns into PTX, with or without a cache. llvmlite's numbered values (``%".5"``)
keep theirs: numbered by position, they are the same in both, and renaming them would change
how LLVM numbers the names it derives (``%.5`` + 1 would no longer meet ``%.51``); so do
declared functions (libdevice, intrinsics), ``llvm.*`` globals and named types. (Renaming
only the names that hold an HLO name would make the key depend on them: ``%x`` makes
``%tid.x`` one, ``%xx`` does not.) ``restore_ir`` and ``restore_ptx`` put the names back into
LLVM's output: the optimised IR keeps each derived name (``%__hlo_v7__.i`` →
``%in0.param_0.i``), and PTX gets each global's name as LLVM's NVPTX back end spells it
(``NVPTXAssignValidGlobalNames``: a character other than a letter, digit, ``_`` or ``$`` becomes
``_$_``). The result has been the bytes LLVM makes for the named module (ResNet-50's 81
kernels, Llama 8B's); it could differ in how LLVM numbers a derived name
(``%.6.i2`` where the named module's has ``%.6.i9``: LLVM's counter of name clashes).

Both ways refuse (None) where the renaming could not be exact, and the kernel is then compiled
with its own names, as before: a name that LLVM prints in quotes, or that already holds
``__hlo_``; a restored name equal to another name of the output (LLVM would have renamed one
apart); a placeholder left where it cannot be named (a local in PTX).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = "__hlo_"
PLACEHOLDER = re.compile(r"__hlo_([gv])(\d+)__")
# an identifier LLVM prints without quotes (``AsmWriter``'s ``PrintLLVMName``)
_BARE = re.compile(r"[-A-Za-z._][-A-Za-z0-9._]*\Z")
# A kernel's text cut into tokens (the odd items of ``_TOKENS.split``), in order of precedence:
# a comment, a block label at the start of a line, a named value (%/@, quoted or bare), any
# other string literal (c"...", !"...", inline assembly: never names)
_TOKENS = re.compile(r'(;[^\n]*|^(?:"[^"]*"|[-A-Za-z$._0-9]+):|[%@](?:"[^"]*"|[-A-Za-z$._][-A-Za-z$._0-9]*)'
                     r'|"[^"]*")', re.M)
_DEFINED_GLOBAL = re.compile(r'^(?:define\b[^\n]*?@|@)(?:"([^"]*)"|([-A-Za-z$._][-A-Za-z$._0-9]*))'
                             r'(?:\(|\s*=)', re.M)
_NAMED_TYPE = re.compile(r'^%(?:"([^"]*)"|([-A-Za-z$._][-A-Za-z$._0-9]*))\s*=\s*type\b', re.M)
_AUTO = re.compile(r"\.?\d+\Z")  # llvmlite's numbered values (".5") and numbered blocks
_MODULE_ID = re.compile(r"\A; ModuleID = [^\n]*")
# identifiers of the outputs, for the check that restoring names kept them apart
_IR_NAME = re.compile(r'[%@](?:"[^"]*"|[-A-Za-z$._0-9]+)|^[-A-Za-z$._0-9]+(?=:)', re.M)
_PTX_NAME = re.compile(r"%?[A-Za-z0-9_$]+")


@dataclass(frozen=True)
class CanonicalKernel:
    """A kernel's IR with canonical names (``text``), its kernel's placeholder (``kernel``)
    and the names the placeholders stand for (``names[("g", 3)]`` is ``__hlo_g3__``'s)."""

    text: str
    kernel: str
    names: dict[tuple[str, int], str]


def canonical_ir(text: str, kernel: str) -> CanonicalKernel | None:
    """``text`` (one kernel's module as emitted) with the names it defines replaced by
    placeholders, or None where that could not be undone exactly (see the module docstring)."""
    if _PREFIX in text:
        return None
    def is_renamed(name: str) -> bool:
        return not name.startswith("llvm.") and _AUTO.match(name) is None
    defined = {q if q is not None else b for q, b in _DEFINED_GLOBAL.findall(text)}
    types = {q if q is not None else b for q, b in _NAMED_TYPE.findall(text)}
    if kernel not in defined:
        return None
    numbers: dict[tuple[str, str], str] = {}
    names: dict[tuple[str, int], str] = {}
    bad = False

    def placeholder(kind: str, name: str) -> str:
        nonlocal bad
        got = numbers.get((kind, name))
        if got is None:
            if not _BARE.match(name):
                bad = True
            n = len(names)
            got = numbers[(kind, name)] = f"{_PREFIX}{kind}{n}__"
            names[(kind, n)] = name
        return got

    def replace(token: str) -> str:
        first = token[0]
        if first == ";" or (first == '"' and token[-1] != ":"):
            return token  # a comment or a string: as it is
        if first in "%@":
            name = token[2:-1] if token[1] == '"' else token[1:]
            if not is_renamed(name):
                return token
            if first == "@":
                return "@" + placeholder("g", name) if name in defined else token
            return token if name in types else "%" + placeholder("v", name)
        label = token[1:-2] if first == '"' else token[:-1]
        return placeholder("v", label) + ":" if is_renamed(label) else token

    pieces = _TOKENS.split(_MODULE_ID.sub("", text, count=1))
    table: dict[str, str] = {}
    for i in range(1, len(pieces), 2):  # (placeholders numbered in order of first appearance)
        token = pieces[i]
        got = table.get(token)
        if got is None:
            got = table[token] = replace(token)
        pieces[i] = got
    if bad:
        return None
    body = "".join(pieces)
    return CanonicalKernel("; ModuleID = \"kernel\"" + body if _MODULE_ID.match(text) else body,
                           numbers[("g", kernel)], names)


def _restored(text: str, names: dict[tuple[str, int], str], spell, tokens: re.Pattern) -> str | None:
    """``text`` with each placeholder replaced by ``spell(kind, name)``, or None if a
    placeholder is not one of ``names`` or two distinct ``tokens`` became one."""
    try:
        out = PLACEHOLDER.sub(lambda m: spell(m.group(1), names[(m.group(1), int(m.group(2)))]), text)
    except KeyError:
        return None
    if _PREFIX in out:
        return None
    before = set(tokens.findall(text))
    after = {PLACEHOLDER.sub(lambda m: spell(m.group(1), names[(m.group(1), int(m.group(2)))]), t)
             if _PREFIX in t else t for t in before}
    return out if len(after) == len(before) else None


def restore_ir(text: str, kernel: CanonicalKernel) -> str | None:
    """LLVM's optimised IR of ``kernel.text`` with the kernel's names again (None: not exactly);
    a block's ``; preds`` comment padded to column 50 again, as LLVM's printer pads it."""
    out = _restored(text, kernel.names, lambda kind, name: name, _IR_NAME)
    return None if out is None else _PREDS.sub(_pad_preds, out)


_PREDS = re.compile(r"^(\S[^\n;]*:)( +)(; preds = )", re.M)
_PREDS_COLUMN = 50  # ``AssemblyWriter::printBasicBlock``: ``Out.PadToColumn(50)``, at least one space


def _pad_preds(m: re.Match) -> str:
    return m.group(1) + " " * max(_PREDS_COLUMN - len(m.group(1)), 1) + m.group(3)


def ptx_symbol(name: str) -> str:
    """``name`` as LLVM's NVPTX back end writes a global's name in PTX."""
    return re.sub(r"[^A-Za-z0-9_$]", "_$_", name)


def restore_ptx(text: str, kernel: CanonicalKernel) -> str | None:
    """The PTX of ``kernel.text`` with the kernel's global names again (None: not exactly;
    a local's placeholder has no place in PTX)."""
    def spell(kind: str, name: str) -> str:
        if kind != "g":
            raise KeyError(name)
        return ptx_symbol(name)
    return _restored(text, kernel.names, spell, _PTX_NAME)
