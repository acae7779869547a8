"""The persistent compile cache: a stage's output on disk, keyed on everything it depends on.

A key is the SHA-256 of what an entry depends on (a whole result: the input text and the
flags that decide the output; a kernel: its structure, launch and names, ``driver/stages.py``), the
``CompileOptions`` (frozen: their ``repr`` is their value) and the versions of what produces
the bytes: this project (its version and its files' sizes and mtimes), llvmlite (which fixes
LLVM's) and libdevice (its path, size and mtime). Entries live under the cache directory
(``--cache-dir``, else ``$HLO_COMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo-compile``, else
``~/.cache/hlo-compile``), one file per key in two-letter fan-out folders, as Triton's and
ccache's caches are laid out. Writes are atomic (a temporary file in the same folder, then
``os.replace``), so concurrent compiles never see half an entry; an entry whose checksum does not
match is ignored and rewritten; past ``max_bytes`` (default 1 GiB, ``HLO_COMPILE_CACHE_MAX_MB``)
the least recently used entries are removed.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import zlib
from pathlib import Path

ENV_DIR = "HLO_COMPILE_CACHE_DIR"
ENV_MAX_MB = "HLO_COMPILE_CACHE_MAX_MB"
DEFAULT_MAX_BYTES = 1 << 30
_MAGIC = b"hlo-compile-cache-1\n"
_SUFFIX = ".entry"


def default_cache_dir() -> Path:
    """``$HLO_COMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo-compile``, else ``~/.cache/hlo-compile``."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "hlo-compile"


def tool_versions() -> str:
    """The versions of what makes the cached bytes (a new one misses every old entry)."""
    from .. import __version__  # (equal to pyproject's: tests/driver/test_start_up.py; importlib.metadata costs ~20 ms)
    parts = [f"hlo-compile={__version__}"]
    try:
        import llvmlite
        parts.append(f"llvmlite={llvmlite.__version__}")
    except (ImportError, AttributeError):
        parts.append("llvmlite=?")
    # (llvmlite's version fixes the LLVM it bundles: not loading LLVM keeps a warm start fast)
    try:
        from ..targets.nvptx.toolkit import find_libdevice
        lib = find_libdevice()
        st = lib.stat()
        parts.append(f"libdevice={lib}:{st.st_size}:{int(st.st_mtime)}")
    except Exception:
        parts.append("libdevice=none")
    parts.append(f"source={_source_digest()}")
    return ";".join(parts)


_SOURCE_DIGEST: str | None = None


def _source_digest() -> str:
    """A digest of this package's code generator files (sizes and mtimes): an edited emitter
    in a development checkout misses the cache as a new release would."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parents[1]  # the package, not only the driver
        for p in sorted(root.rglob("*.py")):
            st = p.stat()
            h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _SOURCE_DIGEST = h.hexdigest()[:16]
    return _SOURCE_DIGEST


def cache_key(*parts: str | bytes) -> str:
    """The hex SHA-256 of ``parts`` (each length-prefixed, so no two splits collide)."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class KernelCache:
    """Entries (bytes) by key under ``root``; every failure to read or write is a miss."""

    def __init__(self, root: Path | str, max_bytes: int | None = None):
        self.root = Path(root)
        if max_bytes is None:
            mb = os.environ.get(ENV_MAX_MB)
            max_bytes = int(float(mb) * (1 << 20)) if mb else DEFAULT_MAX_BYTES
        self.max_bytes = max_bytes
        self.hits = self.misses = 0

    def path(self, key: str) -> Path:
        return self.root / key[:2] / (key + _SUFFIX)

    def get(self, key: str) -> bytes | None:
        """The entry's payload, or None (absent, unreadable or corrupt: a corrupt one is removed)."""
        p = self.path(key)
        try:
            data = p.read_bytes()
        except OSError:
            self.misses += 1
            return None
        payload = _unwrap(data)
        if payload is None:
            self.misses += 1
            try:
                p.unlink()
            except OSError:
                pass
            return None
        try:
            os.utime(p)  # recently used: evicted last
        except OSError:
            pass
        self.hits += 1
        return payload

    def put(self, key: str, payload: bytes, evict: bool = True) -> bool:
        """Write the entry atomically; False if the directory cannot be written (never raises).
        ``evict=False``: the caller writes many and calls ``evict`` once after them."""
        p = self.path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=_SUFFIX)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_wrap(payload))
                os.replace(tmp, p)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError:
            return False
        if evict:
            self.evict()
        return True

    def entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every entry, oldest first."""
        out = []
        for p in self.root.glob(f"??/*{_SUFFIX}"):
            if p.name.startswith(".tmp-"):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((st.st_mtime, st.st_size, p))
        return sorted(out)

    def evict(self) -> int:
        """Remove the least recently used entries until the total is within ``max_bytes``;
        returns how many were removed."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, p in entries:
            if total <= self.max_bytes:
                break
            try:
                p.unlink()
            except OSError:
                continue
            total -= size
            removed += 1
        return removed


def _wrap(payload: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def _unwrap(data: bytes) -> bytes | None:
    if not data.startswith(_MAGIC):
        return None
    rest = data[len(_MAGIC):]
    digest, sep, payload = rest.partition(b"\n")
    if not sep or hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return payload


# ---- whole results -------------------------------------------------------------------------
# A warm ``hlo-compile`` (same input text, flags and tool versions) prints, writes and dumps
# what the first run did without parsing or compiling: the result is one entry, its texts and
# files packed as zlib-compressed JSON (bytes, the cubin, as base64).

RESULT_FORMAT = "compile-result-1"


def result_key(source: str, flags: list[str]) -> str:
    """The key of a whole compile's result: the input text, the flags that decide what is
    produced (not where it is written) and ``tool_versions``."""
    return cache_key(RESULT_FORMAT, tool_versions(), *flags, source)


def _encode(value):
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"list": [_encode(v) for v in value]}
    return value


def _decode(value):
    if isinstance(value, dict):
        if "b64" in value:
            return base64.b64decode(value["b64"])
        if "dict" in value:
            return {k: _decode(v) for k, v in value["dict"].items()}
        if "list" in value:
            return [_decode(v) for v in value["list"]]
        raise ValueError("not a packed value")
    return value


def pack(value) -> bytes:
    """``value`` (str, bytes, numbers, lists and dicts of them) as compressed bytes."""
    return zlib.compress(json.dumps(_encode(value)).encode(), 1)


def unpack(data: bytes):
    """``pack``'s value again (ValueError if ``data`` is not one)."""
    try:
        return _decode(json.loads(zlib.decompress(data)))
    except (zlib.error, json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"not a packed result: {e}") from None


# ---- the stores: every lookup and write of an entry ----------------------------------------
# The driver is the only user of the cache: ``run_pipeline`` lends its per-kernel stages a
# ``KernelStore`` (``StageEnv.store``) and ``pipeline.compile_source`` (what ``hlo-compile``
# calls) decides when a whole result is looked up and kept, through a ``ResultStore``. No stage
# and no command computes a key or touches an entry itself.

KERNEL_ENTRY = "kernel-3"  # a kernel's entry under its names: IR, optimised IR, PTX
CANONICAL_ENTRY = "kernel-canonical-1"  # under its canonical IR (``kernel_names``): optimised IR, PTX


class KernelStore:
    """The per-kernel entries of one compile (``options``), in ``cache`` (None: nothing is
    kept and every lookup misses).

    Two entries per kernel: under its names (``find_named`` before the kernel is emitted; the
    key is what its IR depends on: ``kernel_reuse_key``, its name and its instructions' names,
    the options and the tool versions), and under its canonical IR (``find_canonical`` once
    emitted: the IR with every HLO name a placeholder, so a fusion renamed between two
    compiles finds the other's). The keys are remembered between the two stages that use
    them; ``put_*`` writes without evicting and ``flush`` evicts once."""

    def __init__(self, cache: KernelCache | None, options) -> None:
        self.cache = cache
        self.options = options
        self._versions: str | None = None
        self._named: dict[str, str] = {}
        self._canonical: dict[str, str] = {}

    @property
    def enabled(self) -> bool:
        return self.cache is not None

    def _key(self, *parts: str) -> str:
        if self._versions is None:
            self._versions = tool_versions()
        return cache_key(parts[0], self._versions, repr(self.options), *parts[1:])

    def _entry(self, key: str, fields: tuple[str, ...]) -> tuple[str, ...] | None:
        """The texts ``fields`` of an entry, or None (absent, damaged or another layout)."""
        data = self.cache.get(key) if self.cache is not None else None
        if data is None:
            return None
        try:
            d = unpack(data)
            out = tuple(d[f] for f in fields)
        except (ValueError, KeyError, TypeError):
            return None
        return out if all(isinstance(x, str) for x in out) else None

    def find_named(self, kernels, skip=frozenset()) -> dict:
        """Each kernel of ``kernels`` (``KernelPlan``s, not in ``skip``: they are never kept)
        found under its names: name → (its IR, its ``PtxResult``)."""
        if self.cache is None:
            return {}
        from ..codegen.compiler import kernel_reuse_key
        from ..targets.nvptx.ptx import PtxResult
        memo: dict = {}
        hits = {}
        for k in kernels:
            if k.kernel_name in skip:
                continue
            key = self._key(KERNEL_ENTRY, k.kernel_name, repr(kernel_reuse_key(k, memo)), _names_text(k.fusion))
            self._named[k.kernel_name] = key
            got = self._entry(key, ("ir", "llvm_opt", "ptx"))
            if got is not None:
                hits[k.kernel_name] = (got[0], PtxResult(llvm_opt=got[1], ptx=got[2]))
        return hits

    def find_canonical(self, canonical: dict) -> dict[str, tuple[str, str]]:
        """Each kernel of ``canonical`` (name → ``kernel_names.CanonicalKernel``, or None where
        it is compiled under its own names and never kept) found under its canonical IR:
        name → (optimised IR, PTX), both under the canonical names."""
        if self.cache is None:
            return {}
        hits = {}
        for n, c in canonical.items():
            if c is None:
                continue
            self._canonical[n] = key = self._key(CANONICAL_ENTRY, c.text)
            got = self._entry(key, ("llvm_opt", "ptx"))
            if got is not None:
                hits[n] = (got[0], got[1])
        return hits

    def put_canonical(self, name: str, result) -> None:
        """LLVM's result for kernel ``name`` under its canonical names (a ``PtxResult``)."""
        key = self._canonical.get(name)
        if self.cache is not None and key is not None:
            self.cache.put(key, pack({"llvm_opt": result.llvm_opt, "ptx": result.ptx}), evict=False)

    def put_named(self, name: str, ir: str, result) -> None:
        """Kernel ``name``'s IR and its ``PtxResult`` under its names (looked up by ``find_named``)."""
        key = self._named.get(name)
        if self.cache is not None and key is not None:
            self.cache.put(key, pack({"ir": ir, "llvm_opt": result.llvm_opt, "ptx": result.ptx}), evict=False)

    def kept_by_name(self, name: str) -> bool:
        return name in self._named

    def flush(self) -> None:
        """Evict once after the writes (it lists the whole cache)."""
        if self.cache is not None:
            self.cache.evict()


def _names_text(fusion) -> str:
    """The names of the fused computation's instructions and of those it calls, in order."""
    from ..hlo.ir import called_closure
    return "\n".join(comp.name + ":" + ",".join(i.name for i in comp.instructions) for comp in called_closure(fusion))


class ResultStore:
    """Whole ``hlo-compile`` results (what it printed, its notes, its dump files) by the input
    text and the flags that decide them (``pipeline.compile_source``); results over ``max_bytes`` are not kept (packing a
    large model's dump would cost more than the compile it saves)."""

    MAX_BYTES = 64 << 20  # Llama 8B's dump is 305 MB, mostly indexing maps: not kept

    def __init__(self, cache: KernelCache | None) -> None:
        self.cache = cache

    def key(self, source: str, flags: list[str]) -> str | None:
        return None if self.cache is None else result_key(source, flags)

    def load(self, key: str | None) -> dict | None:
        """The stored result (a dict of ``outputs``, ``notes``, ``files``, ``modules``), or None
        (absent, damaged or another layout: a miss)."""
        data = self.cache.get(key) if self.cache is not None and key is not None else None
        if data is None:
            return None
        try:
            stored = unpack(data)
            return {f: stored[f] for f in ("outputs", "notes", "files", "modules")}
        except (ValueError, KeyError, TypeError):
            return None

    def save(self, key: str | None, record: dict, files: dict[str, Path]) -> bool:
        """Keep ``record`` with the bytes of the dump ``files`` (name → path) unless the whole is
        over ``MAX_BYTES``; True when kept."""
        if self.cache is None or key is None:
            return False
        size = sum(len(o) for o in record["outputs"]) + sum(p.stat().st_size for p in files.values())
        if size > self.MAX_BYTES:
            return False
        record = dict(record, files={name: _text_or_bytes(p.read_bytes()) for name, p in files.items()})
        return self.cache.put(key, pack(record))


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data
