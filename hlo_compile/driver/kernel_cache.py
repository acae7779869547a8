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
