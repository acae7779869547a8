"""Check that a host object's external symbols resolve before MCJIT links it.

MCJIT does not raise on an unresolved symbol: the process crashes while relocating. The
symbols that matter are not all visible in the IR either, because the backend introduces
library calls of its own (``__truncsfbf2``, ``memcpy``, ``fmodf`` for ``frem``...). So we emit
the object ourselves, read the undefined symbols from its ELF symbol table, and look each one
up in the process before handing the same object to MCJIT.
"""
from __future__ import annotations

import struct

import llvmlite.binding as llvm

from ...codegen.errors import CodegenError

_SHT_SYMTAB = 2
_SHN_UNDEF = 0
# resolved by the runtime linker itself, never through the process's symbol table
_LINKER_SYMBOLS = frozenset({"_GLOBAL_OFFSET_TABLE_"})


class UnresolvedSymbolError(CodegenError):
    """A host kernel calls a function that neither the module nor the process defines."""


def elf_undefined_symbols(obj: bytes) -> list[str] | None:
    """Names of the undefined global symbols of a 64-bit little-endian ELF object.

    Returns None for anything else (another object format): the caller then falls back to
    the declarations it can see in the IR.
    """
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for sh in sections:
        if sh[1] != _SHT_SYMTAB:
            continue
        offset, size, link, entsize = sh[4], sh[5], sh[6], sh[9]
        strtab = sections[link]
        str_off = strtab[4]
        for i in range(1, size // entsize):  # entry 0 is the null symbol
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", obj, offset + i * entsize)
            if st_shndx != _SHN_UNDEF or st_name == 0 or (st_info >> 4) == 0:  # skip locals
                continue
            end = obj.index(b"\0", str_off + st_name)
            names.append(obj[str_off + st_name:end].decode())
    return names


def check_symbols_resolve(obj: bytes, module: llvm.ModuleRef, kernel_name: str) -> None:
    """Raise ``UnresolvedSymbolError`` naming every external symbol the process lacks."""
    names = elf_undefined_symbols(obj)
    if names is None:
        names = [f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")]
    missing = sorted({n for n in names if n and n not in _LINKER_SYMBOLS and not llvm.address_of_symbol(n)})
    if missing:
        raise UnresolvedSymbolError(
            f"host kernel {kernel_name!r} calls {', '.join(missing)}, which this process does not "
            "define (no library loaded exports it); MCJIT would crash linking it")
