"""Lazy libdevice linking (notes/nvptx.md §2).

libdevice is 350 functions of bitcode; a kernel uses a handful. Linking all of it and letting
O3 drop the rest costs about a second per module, so instead:

- libdevice is read once per process, only when a module first calls an ``__nv_*``
  function; it is parsed (with every definition given ``linkonce_odr`` linkage: the IR
  linker then copies a definition only when something references it) only when a name never
  seen before appears, and that parse is consumed by the link: parsing the bitcode again
  (~35 ms) is cheaper than cloning a parsed copy (~47 ms), and the signatures of the names
  asked for are read from it, not those of all 350 functions (issue 17: start-up);
- for each distinct set of ``__nv_*`` names, a small "snippet" is built once: a stub module
  that only declares those names, with libdevice linked into it (so it holds exactly those
  functions and what they call). Its bitcode, a few KB, is cached (see ``_snippet``);
- every module using that set parses the cached snippet and links it in (2-3 ms).

Snippet definitions stay ``linkonce_odr``, so two snippets sharing a helper merge cleanly;
``compile_to_ptx`` internalises them afterwards. A module with no ``__nv_*`` call never
touches libdevice, so integer-only kernels compile without a CUDA toolkit.
"""
from __future__ import annotations

import threading

import llvmlite.binding as llvm

from ...codegen.errors import CodegenError
from .toolkit import find_libdevice

PREFIX = "__nv_"


def read_libdevice_bitcode() -> bytes:
    """The raw libdevice bitcode (a seam for tests: patch it to prove it is not called)."""
    return find_libdevice().read_bytes()


def used_libdevice_functions(module: llvm.ModuleRef) -> frozenset[str]:
    """Names of the ``__nv_*`` functions ``module`` declares (and so may call)."""
    return frozenset(f.name for f in module.functions if f.is_declaration and f.name.startswith(PREFIX))


class LibDeviceLinker:
    """Parses libdevice on first need and links per-name-set snippets into modules.

    One instance per process is enough (``default_linker()``); all state is guarded by a lock
    because LLVM's global context is shared by every thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bitcode: bytes | None = None
        self._signatures: dict[str, tuple[str, str]] = {}  # name -> (return type, params)
        # (triple, datalayout, names) -> snippet bitcode
        self._snippets: dict[tuple[str, str, frozenset[str]], bytes] = {}
        # (triple, datalayout) -> (names, module with their definitions): see _snippet
        self._unions: dict[tuple[str, str], tuple[frozenset[str], llvm.ModuleRef]] = {}

    @property
    def loaded(self) -> bool:
        """Whether libdevice has been read in this process (by this linker)."""
        return self._bitcode is not None

    def _fresh_library(self, triple: str, data_layout: str) -> llvm.ModuleRef:
        """A new parse of libdevice, its definitions ``linkonce_odr``, with our triple and
        datalayout (libdevice declares an old triple and datalayout: so the link is clean)."""
        if self._bitcode is None:
            self._bitcode = read_libdevice_bitcode()
        library = llvm.parse_bitcode(self._bitcode)
        for fn in library.functions:
            if not fn.is_declaration and fn.linkage == llvm.Linkage.external:
                fn.linkage = llvm.Linkage.linkonce_odr
        library.triple = triple
        library.data_layout = data_layout
        return library

    def _read_signatures(self, library: llvm.ModuleRef, names: frozenset[str]) -> None:
        """Record the signatures of ``names`` as ``library`` defines them; a name it does not
        define is not a libdevice function."""
        unknown = []
        for name in sorted(names - self._signatures.keys()):
            try:
                fn = library.get_function(name)
            except NameError:
                fn = None
            if fn is None or fn.is_declaration:
                unknown.append(name)
                continue
            ty = fn.global_value_type
            params = ", ".join(str(p) for p in ty.get_function_parameters())
            self._signatures[name] = (str(ty.get_function_return()), params)
        if unknown:
            raise CodegenError(f"not a libdevice function: {', '.join(unknown)}")

    def _stub(self, names: frozenset[str], triple: str, data_layout: str) -> llvm.ModuleRef:
        """A module that only declares ``names`` (with libdevice's signatures)."""
        declarations = "\n".join(
            f"declare {self._signatures[n][0]} @{n}({self._signatures[n][1]})" for n in sorted(names))
        return llvm.parse_assembly(f'target triple = "{triple}"\ntarget datalayout = "{data_layout}"\n'
                                   f"{declarations}\n")

    def _snippet(self, names: frozenset[str], triple: str, data_layout: str) -> bytes:
        key = (triple, data_layout, names)
        cached = self._snippets.get(key)
        if cached is not None:
            return cached
        # A name never seen before needs libdevice itself: it goes into a "union" module holding
        # every function needed so far (built from a fresh parse, which the link consumes), and
        # each set's snippet is cut from that small module instead.
        seen, union = self._unions.get((triple, data_layout), (frozenset(), None))
        if union is None or not names <= seen:
            library = self._fresh_library(triple, data_layout)
            self._read_signatures(library, names)
            seen = seen | names
            union = self._stub(seen, triple, data_layout)
            union.link_in(library)
            self._unions[(triple, data_layout)] = (seen, union)
        stub = self._stub(names, triple, data_layout)
        stub.link_in(union, preserve=True)  # linkonce_odr: only what ``names`` reach comes in
        snippet = stub.as_bitcode()
        self._snippets[key] = snippet
        return snippet

    def link_into(self, module: llvm.ModuleRef) -> frozenset[str]:
        """Link the libdevice functions ``module`` declares into it; returns their names.

        ``module``'s triple and datalayout must already be the target machine's.
        """
        names = used_libdevice_functions(module)
        if not names:
            return names
        with self._lock:
            snippet = self._snippet(names, module.triple, module.data_layout)
            self._check_signatures(module, names)
        try:
            module.link_in(llvm.parse_bitcode(snippet))
        except RuntimeError as e:
            raise CodegenError(f"linking libdevice failed: {e}") from None
        return names

    def _check_signatures(self, module: llvm.ModuleRef, names: frozenset[str]) -> None:
        """A declaration whose type differs from libdevice's would link into a call with the
        wrong arguments; report it instead."""
        for name in names:
            ty = module.get_function(name).global_value_type
            got = (str(ty.get_function_return()), ", ".join(str(p) for p in ty.get_function_parameters()))
            if got != self._signatures[name]:
                want = self._signatures[name]
                raise CodegenError(
                    f"{name} is declared as {got[0]} ({got[1]}) but libdevice defines {want[0]} ({want[1]})"
                )


_DEFAULT: LibDeviceLinker | None = None


def default_linker() -> LibDeviceLinker:
    """The process-wide linker (libdevice parsed at most once per process)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = LibDeviceLinker()
    return _DEFAULT
