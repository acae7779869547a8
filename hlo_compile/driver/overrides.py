"""A kernel's code from a file instead of from our emitters (issue "One fusion in an engineer's hands").

Two ways in, both checked before anything runs and never silently unused:

- ``--override-dir DIR`` (hlo-compile, hlo-run): files named exactly as ``--dump-to`` writes a
  kernel's code, ``module_NNNN.<module>.<kernel>.ir-no-opt.ll`` (its LLVM IR as emitted: it is
  optimised and compiled to PTX again for cuda, translated and JIT-compiled on the host) or
  ``module_NNNN.<module>.<kernel>.ptx`` (its PTX: cuda only). A file that names no kernel of the
  run is an error naming it and listing the kernels; the idea is Triton's
  ``TRITON_KERNEL_OVERRIDE`` directory.
- XLA's ``--xla_gpu_llvm_ir_file=F1,F2`` and ``--xla_gpu_ptx_file=F`` (``--llvm-ir-file``,
  ``--ptx-file``), as XLA's nvptx_compiler reads them: a file belongs to the module whose dump
  prefix ``module_NNNN.<module>`` begins its base name (any suffix, so a file of either dump
  stage, or renamed ``...ir-no-opt.edited.ll``, matches), and it replaces the *whole* module's
  IR (re-optimised) or PTX. Unlike XLA, a file that matches no module is an error (XLA logs it
  at VLOG(1)), and so is a second file for one module; the prefix must end at a ``.``.

An override keeps the kernel's name and signature: the IR must define ``@<kernel>`` with the
kernel's parameters (one ``ptr`` per buffer), the PTX an ``.entry <kernel>`` with as many
``.param``s. Overridden kernels never go through the compile cache (neither read nor written),
and the dump (``summary.json``'s ``override``, the fusions text) and hlo-run's verdict name
the file each came from.

On the host an IR override is NVPTX IR (as dumped) made runnable on the CPU
(``host_ir``): the kernel takes the host's trailing context pointer and reads its ids from
it, libdevice's ``__nv_*`` math calls libm. Kernels that need barriers, warp shuffles or shared
memory run on the host only as coroutines of our own emitter; their override is refused there
(by name of what they use): run it on cuda.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..hlo.errors import HloUnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from ..codegen.compiler import ModulePlan
    from ..hlo import HloModule

IR_SUFFIX = "ir-no-opt.ll"
PTX_SUFFIX = "ptx"
KINDS = {IR_SUFFIX: "ll", PTX_SUFFIX: "ptx"}


class OverrideError(HloUnsupportedError):
    """An override file that cannot be used: the message names it and says why (exit 2)."""


@dataclass(frozen=True)
class OverrideFile:
    path: Path
    text: str
    kind: str  # "ll" or "ptx"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def _read(path: Path, kind: str) -> OverrideFile:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise OverrideError(f"cannot read the override {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OverrideError(f"override {path}: not UTF-8 text") from None
    if not text.strip():
        raise OverrideError(f"override {path} is empty")
    return OverrideFile(path, text, kind)


@dataclass
class ModuleOverrides:
    """What replaces compiled code in one module: per kernel, or the whole module's IR/PTX."""

    kernels: dict[str, OverrideFile] = field(default_factory=dict)  # kernel name → its file
    module_ir: OverrideFile | None = None
    module_ptx: OverrideFile | None = None

    def sources(self, kernel_names: Sequence[str]) -> dict[str, str]:
        """kernel → the file its code comes from (``path`` or ``path (IR)``, ``path (PTX)``)."""
        out = {}
        for k in kernel_names:
            where = [str(f.path) for f in (self.kernels.get(k), self.module_ir, self.module_ptx) if f is not None]
            if where:
                out[k] = " and ".join(where)
        return out

    def ir(self, kernel: str) -> OverrideFile | None:
        f = self.kernels.get(kernel)
        return f if f is not None and f.kind == "ll" else None

    def ptx(self, kernel: str) -> OverrideFile | None:
        f = self.kernels.get(kernel)
        return f if f is not None and f.kind == "ptx" else None

    def __bool__(self) -> bool:
        return bool(self.kernels) or self.module_ir is not None or self.module_ptx is not None


def module_prefix(module_name: str, index: int) -> str:
    """``module_NNNN.<module>``: the dump's (and XLA's ``FilenameFor``) prefix of a module."""
    from .dump import DumpWriter
    return DumpWriter(Path("."), module_name, index).file_name("x")[:-2]


class OverrideSpec:
    """The overrides of one run (``--override-dir``, ``--llvm-ir-file``, ``--ptx-file``),
    bound to each module as it is planned (``bind``); ``finish`` refuses any file left unused."""

    def __init__(self, override_dir: Path | None = None, llvm_ir_files: Sequence[Path] = (),
                 ptx_files: Sequence[Path] = (), platform: str = "cuda"):
        self.dir = override_dir
        self.platform = platform
        self.dir_files: list[Path] = []
        if override_dir is not None:
            if not override_dir.is_dir():
                raise OverrideError(f"--override-dir {override_dir}: not a directory")
            self.dir_files = sorted(p for p in override_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        self.ir_files = [_read(Path(p), "ll") for p in llvm_ir_files]
        self.ptx_files = [_read(Path(p), "ptx") for p in ptx_files]
        if platform == "host":
            for f in self.ptx_files:
                raise OverrideError(f"--xla_gpu_ptx_file {f.path}: PTX runs on cuda only; on --platform=host "
                                    "give the module's LLVM IR (--xla_gpu_llvm_ir_file)")
        self.used: set[Path] = set()
        self.bound: dict[int, ModuleOverrides] = {}
        self.kernel_lists: dict[int, tuple[str, list[str]]] = {}  # module index → (prefix, kernels)

    def __bool__(self) -> bool:
        return bool(self.dir_files or self.ir_files or self.ptx_files)

    def digest(self) -> str:
        """The contents of every override: a compile result depending on them is keyed by it."""
        h = hashlib.sha256()
        for p in self.dir_files:
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        for f in self.ir_files + self.ptx_files:
            h.update(f.kind.encode() + f.path.name.encode() + b"\0" + f.digest.encode())
        return h.hexdigest()

    def check_module_count(self, names: Sequence[str]) -> None:
        """Refuse, before anything is compiled, files that match none of ``names`` (the run's
        modules, in order) by their prefix."""
        prefixes = [module_prefix(n, i) for i, n in enumerate(names)]
        numbered = re.compile(r"module_\d{4}\.")  # (other names: refused by ``bind`` with the kernels)
        for p in self.dir_files:
            if numbered.match(p.name) and not any(p.name.startswith(pre + ".") for pre in prefixes):
                raise OverrideError(self._unmatched_dir_file(p, prefixes))
        for f in self.ir_files + self.ptx_files:
            if numbered.match(f.path.name) and not any(_matches(f.path.name, pre) for pre in prefixes):
                raise OverrideError(self._unmatched_xla_file(f, prefixes))

    def _flag(self, f: OverrideFile) -> str:
        return "--xla_gpu_llvm_ir_file" if f.kind == "ll" else "--xla_gpu_ptx_file"

    def _unmatched_dir_file(self, p: Path, prefixes: Sequence[str], kernels: Sequence[str] = ()) -> str:
        shown = ", ".join(kernels) if kernels else "; ".join(
            f"{pre}: {', '.join(self.kernel_lists[i][1])}" for i, (pre, _) in sorted(self.kernel_lists.items()))
        module_file = any(p.name in (f"{pre}.{IR_SUFFIX}", f"{pre}.{PTX_SUFFIX}", f"{pre}.ir-with-opt.ll")
                          for pre in prefixes)
        hint = (" (a whole module's IR or PTX is given with --xla_gpu_llvm_ir_file/--xla_gpu_ptx_file)"
                if module_file else "")
        expected = f"<prefix>.<kernel>.{IR_SUFFIX} or <prefix>.<kernel>.{PTX_SUFFIX}, <prefix> " + \
                   " or ".join(prefixes)
        kernels_text = f"; kernels: {shown}" if shown else ""
        return (f"--override-dir: {p} matches no kernel of this run{hint}: override files are named as "
                f"--dump-to writes them, {expected}{kernels_text}")

    def _unmatched_xla_file(self, f: OverrideFile, prefixes: Sequence[str]) -> str:
        return (f"{self._flag(f)}={f.path}: its name begins with no module's dump prefix "
                f"({', '.join(prefixes)}), so it would be unused")

    def bind(self, module: HloModule, index: int, plan: ModulePlan) -> ModuleOverrides:
        """The overrides of module number ``index`` (its kernels planned): every file of its
        prefix must name one of its kernels."""
        from .dump import DumpWriter
        kernels = [k.kernel_name for k in plan.unique_kernels]
        prefix = module_prefix(module.name, index)
        self.kernel_lists[index] = (prefix, kernels)
        writer = DumpWriter(Path("."), module.name, index)
        by_name = {writer.file_name(suffix, k): (k, suffix) for k in kernels for suffix in KINDS}
        out = ModuleOverrides()
        for p in self.dir_files:  # a name of no module at all: refused with the first module's kernels
            if not re.match(r"module_\d{4}\.", p.name):
                raise OverrideError(self._unmatched_dir_file(p, [prefix], kernels))
        for f in self.ir_files + self.ptx_files:
            if not re.match(r"module_\d{4}\.", f.path.name):
                raise OverrideError(self._unmatched_xla_file(f, [prefix]))
        for p in self.dir_files:
            if not p.name.startswith(prefix + "."):
                continue
            hit = by_name.get(p.name)
            if hit is None:
                raise OverrideError(self._unmatched_dir_file(p, [prefix], kernels))
            kernel, suffix = hit
            if kernel in out.kernels:
                raise OverrideError(f"--override-dir: kernel {kernel} has both {out.kernels[kernel].path.name} and "
                                    f"{p.name}; give one")
            if suffix == PTX_SUFFIX and self.platform == "host":
                raise OverrideError(f"--override-dir: {p} is PTX, which runs on cuda only; on --platform=host "
                                    f"override the kernel's LLVM IR ({writer.file_name(IR_SUFFIX, kernel)})")
            out.kernels[kernel] = _read(p, KINDS[suffix])
            self.used.add(p)
        for files, attr in ((self.ir_files, "module_ir"), (self.ptx_files, "module_ptx")):
            for f in files:
                if _matches(f.path.name, prefix):
                    if getattr(out, attr) is not None:
                        raise OverrideError(f"{self._flag(f)}: both {getattr(out, attr).path} and {f.path} are for "
                                            f"module {prefix}; give one (XLA would use the first silently)")
                    setattr(out, attr, f)
                    self.used.add(f.path)
        if out.module_ir is not None and out.kernels:
            raise OverrideError(f"--xla_gpu_llvm_ir_file {out.module_ir.path} replaces the whole module {prefix}: it "
                                f"cannot be combined with --override-dir's files for its kernels")
        if out.module_ptx is not None and (out.kernels or out.module_ir is not None):
            raise OverrideError(f"--xla_gpu_ptx_file {out.module_ptx.path} replaces the whole module {prefix}'s PTX: "
                                "nothing else can be overridden in it")
        self.bound[index] = out
        return out

    def finish(self) -> None:
        """After the last module: a file no module used is an error."""
        prefixes = [pre for _, (pre, _) in sorted(self.kernel_lists.items())]
        for p in self.dir_files:
            if p not in self.used:
                raise OverrideError(self._unmatched_dir_file(p, prefixes))
        for f in self.ir_files + self.ptx_files:
            if f.path not in self.used:
                raise OverrideError(self._unmatched_xla_file(f, prefixes))

    def sources(self, index: int) -> dict[str, str]:
        """kernel → override file, for module number ``index`` (empty before ``bind``)."""
        bound = self.bound.get(index)
        if not bound:
            return {}
        return bound.sources(self.kernel_lists[index][1])


def _matches(file_name: str, prefix: str) -> bool:
    return file_name == prefix or file_name.startswith(prefix + ".")


def describe(sources: dict[str, str]) -> str:
    """``kernel fusion: from override /path/fusion.ll; kernel ...`` (empty without overrides)."""
    return "; ".join(f"kernel {k}: from override {where}" for k, where in sources.items())


# ---- checks ---------------------------------------------------------------------------------------

def _ir_params(text: str, what: str, kernels: Sequence[str]) -> dict[str, list[str]]:
    """The parameter types of each of ``kernels`` defined in IR ``text`` (LLVM's parser)."""
    import llvmlite.binding as llvm
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise OverrideError(f"{what}: LLVM rejected it: {str(e).strip()}") from None
    out = {}
    for k in kernels:
        try:
            fn = mod.get_function(k)
        except NameError:
            continue
        if not fn.is_declaration:
            out[k] = [str(a.type) for a in fn.arguments]
    return out


def check_ir(f: OverrideFile, expected: dict[str, list[str]]) -> None:
    """``f`` defines every kernel of ``expected`` (kernel → its parameter types) with them."""
    got = _ir_params(f.text, f"override {f.path}", list(expected))
    for k, params in expected.items():
        sig = f"define ptx_kernel void @{k}({', '.join(params)})"
        if k not in got:
            raise OverrideError(f"override {f.path} does not define the kernel's entry point @{k}: it must keep "
                                f"the kernel's name and signature, {sig}")
        if got[k] != params:
            raise OverrideError(f"override {f.path}: @{k} takes ({', '.join(got[k])}), the kernel's signature is "
                                f"({', '.join(params)}): keep it, {sig}")


_ENTRY = r"\.entry\s+{name}\s*\(([^)]*)\)"


def ptx_params(ptx: str, kernel: str) -> int | None:
    m = re.search(_ENTRY.format(name=re.escape(kernel)), ptx)
    return None if m is None else len(re.findall(r"\.param\b", m.group(1)))


def check_ptx(f: OverrideFile, expected: dict[str, int]) -> None:
    """``f`` has an ``.entry`` of every kernel of ``expected`` (kernel → its parameter count)."""
    for k, n in expected.items():
        got = ptx_params(f.text, k)
        if got is None:
            raise OverrideError(f"override {f.path} has no '.entry {k}(': it must keep the kernel's name and its "
                                f"{n} .param(s)")
        if got != n:
            raise OverrideError(f"override {f.path}: .entry {k} has {got} .param(s), the kernel takes {n}")


# ---- the host: NVPTX IR made runnable on the CPU ------------------------------------------------

_SREG = re.compile(r'call\s+i32\s+@"?llvm\.nvvm\.read\.ptx\.sreg\.(tid|ctaid|ntid|nctaid)\.([xyz])"?\s*\(\s*\)')
_SREG_DECL = re.compile(r'^declare[^\n]*@"?llvm\.nvvm\.read\.ptx\.sreg\.[\w.]+"?\([^\n]*\n?', re.M)
_NV_CALLEE = re.compile(r'@"?__nv_(\w+)"?(?=\s*\()')
_CTX = '%"__hlo_ctx"'
_SREG_FN = "__hlo_override_sreg"


def _kernel_span(text: str, kernel: str) -> tuple[int, int, int, int]:
    """(index of the parameter list's ``(``, of its ``)``, body start, body end) of ``@kernel``'s definition."""
    m = re.search(rf'^define\b[^\n]*@(?:"{re.escape(kernel)}"|{re.escape(kernel)})\(', text, re.M)
    if m is None:
        raise OverrideError(f"no definition of @{kernel}")
    depth, i = 1, m.end()
    while depth and i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    close = i - 1
    start = text.index("{", close)
    end = text.find("\n}", start)
    return m.end() - 1, close, start, (len(text) if end < 0 else end + 2)


def host_ir(text: str, kernels: Sequence[str], path: Path) -> str:
    """NVPTX IR defining ``kernels`` as host IR the host driver calls: each kernel gets the
    trailing context pointer and reads its ids and dims from it, ``ptx_kernel`` goes, and
    libdevice's math calls libm. What the host cannot run this way is refused by name."""
    from ..targets.host.context import CTAID, NCTAID, NTID, TID
    from ..targets.host.linked_names import BINARY_MATH, LIBM_OTHER, UNARY_MATH
    base = {"tid": TID, "ctaid": CTAID, "ntid": NTID, "nctaid": NCTAID}
    text = re.sub(r"\bptx_kernel\s+", "", text)
    text = re.sub(r"^target (triple|datalayout) = [^\n]*\n", "", text, flags=re.M)
    spans = sorted(((_kernel_span(text, k), k) for k in kernels), reverse=True)  # edit from the end
    for (open_, close, start, end), _k in spans:
        body = _SREG.sub(lambda m: f"call i32 @{_SREG_FN}(ptr {_CTX}, i32 {base[m.group(1)] + 'xyz'.index(m.group(2))})",
                         text[start:end])
        sep = ", " if text[open_ + 1:close].strip() else ""
        text = text[:close] + f"{sep}ptr {_CTX}" + text[close:start] + body + text[end:]
    text = _SREG_DECL.sub("", text)
    if "llvm.nvvm.read.ptx.sreg" in text:
        raise OverrideError(f"override {path}: reads a thread/block id outside the kernel's own function; on the "
                            "host only the kernel function may (run it on --platform=cuda)")
    libm = set(UNARY_MATH + BINARY_MATH + LIBM_OTHER)
    helpers: list[str] = []

    def libm_name(m: re.Match) -> str:
        name = m.group(1)
        plain = name[:-1] if name.endswith("f") and name[:-1] in libm | {"rsqrt"} else name
        if plain == "rsqrt":
            ty = "float" if name.endswith("f") else "double"
            helpers.append(f'define internal {ty} @"__hlo_override_{name}"({ty} %x) alwaysinline {{\n'
                           f'  %s = call {ty} @llvm.sqrt.{"f32" if ty == "float" else "f64"}({ty} %x)\n'
                           f'  %r = fdiv {ty} 1.0, %s\n  ret {ty} %r\n}}\n'
                           f'declare {ty} @llvm.sqrt.{"f32" if ty == "float" else "f64"}({ty})\n')
            return f'@"__hlo_override_{name}"'
        if plain not in libm:
            raise OverrideError(f"override {path}: calls libdevice's __nv_{name}, which has no libm counterpart "
                                "on the host (run it on --platform=cuda)")
        return f'@"{name}"'
    text = _NV_CALLEE.sub(libm_name, text)
    text = re.sub(r'^declare[^\n]*@"__hlo_override_\w+"\([^\n]*\n?', "", text, flags=re.M)
    for what, why in (("llvm.nvvm.barrier", "a barrier"), ("llvm.nvvm.shfl", "a warp shuffle"),
                      ("addrspace(3)", "shared memory"), ("llvm.nvvm.", "an NVVM intrinsic")):
        if what in text:
            name = re.search(rf'{re.escape(what)}[\w.]*', text).group(0)
            raise OverrideError(f"override {path}: uses {why} ({name}), which an overridden kernel cannot do on "
                                "--platform=host (our host runs such kernels as coroutines of its own emitter "
                                "only); run the override on --platform=cuda")
    sreg = (f"define internal i32 @{_SREG_FN}(ptr %ctx, i32 %i) alwaysinline {{\n"
            "  %p = getelementptr inbounds i32, ptr %ctx, i32 %i\n  %v = load i32, ptr %p\n  ret i32 %v\n}\n")
    return text + "\n" + sreg + "".join(dict.fromkeys(helpers))
