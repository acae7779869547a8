"""What both command lines share: one error format, XLA's flag spellings, reading the input,
``XLA_FLAGS``, ``--version`` and the environment variables they read.

Errors: ``file:line:col: error: message`` (the line and a caret below) when there is a place
in the input, ``<program>: error: message`` otherwise; exit status 2. Usage errors (an unknown
flag, a bad value) are said the same way, before any work is done.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import click

from ..hlo.errors import HloError, HloParseError, SourceLocation

if TYPE_CHECKING:  # pragma: no cover
    from ..hlo import HloModule

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2
STDIN = "-"
LLVMLITE_FLOOR = (0, 48)

# (variable, what it does); shown by --help and the README
ENVIRONMENT: list[tuple[str, str]] = [
    ("HLO_COMPILE_ARCH", "default of hlo-compile --arch (e.g. sm_90); what hlo-run plans and dumps for on the host"),
    ("HLO_COMPILE_TENSOR_CORES", "default of --tensor-cores (1/true or 0/false)"),
    ("HLO_HOST_THREADS", "OS threads one launch on the host platform may use (default: the CPUs this process may use)"),
    ("HLO_COMPILE_CACHE_DIR", "the compile cache (default $XDG_CACHE_HOME/hlo-compile, else ~/.cache/hlo-compile)"),
    ("HLO_COMPILE_CACHE_MAX_MB", "the compile cache's size bound in MiB (default 1024; oldest entries go first)"),
    ("HLO_COMPILE_LARK_ONLY", "1: parse with the Lark parser only, without the hand-written fast path"),
    ("HLO_COMPILE_CUDA_HOME", "a CUDA toolkit to take libdevice and ptxas from before anything else"),
    ("CUDA_HOME, CUDA_PATH", "CUDA toolkit roots, searched after NVIDIA's pip wheels"),
    ("XLA_FLAGS", "read as flags given before the command line's: --xla_dump_to=DIR (--dump-to DIR), "
                  "--xla_dump_hlo_pass_re, --xla_disable_hlo_passes, --xla_enable_hlo_passes_only, "
                  "--xla_gpu_llvm_ir_file, --xla_gpu_ptx_file are honoured, "
                  "dump/log/autotuning flags accepted with a note, any other --xla_* flag refused"),
]

# XLA's debug flags that cannot change what runs here: accepted with a note naming the reason.
# Every other --xla_* flag we do not honour is refused (``xla_flag_refusal``): it may change
# what XLA compiles or runs, and a flag that does must never be silently ignored.
XLA_OBSERVATIONAL_FLAGS: dict[str, str] = {
    # what a dump holds, or how it is written: dumps here are HLO text under XLA's names
    "xla_dump_hlo_as_text": "dumps are HLO text here already",
    "xla_dump_hlo_as_long_text": "dumps are HLO text in the long form here already",
    "xla_dump_hlo_as_proto": "a dump format: dumps are HLO text here, HloProto is not written",
    "xla_dump_hlo_as_dot": "a dump format: graph renderings are not written here",
    "xla_dump_hlo_as_html": "a dump format: graph renderings are not written here",
    "xla_dump_hlo_as_url": "a dump format: graph renderings are not written here",
    "xla_dump_fusion_visualization": "a dump format: graph renderings are not written here",
    "xla_dump_hlo_snapshots": "HLO snapshots are not written here (hlo-run --output-literals keeps results)",
    "xla_dump_hlo_unoptimized_snapshots": "HLO snapshots are not written here",
    "xla_dump_hlo_module_re": "a dump filter: every module of the input is dumped here",
    "xla_dump_hlo_pipeline_re": "a dump filter: there is one pass pipeline here, dumped by --xla_dump_hlo_pass_re",
    "xla_dump_include_timestamp": "a dump file-name detail: names carry no timestamp here",
    "xla_dump_max_hlo_modules": "a dump limit: every module of the input is dumped here",
    "xla_dump_module_metadata": "a dump detail: module metadata protos are not written here",
    "xla_dump_compress_protos": "a dump detail: no protos are written here",
    "xla_dump_disable_metadata": "a dump detail: metadata is printed as the module holds it",
    "xla_dump_large_constants": "a dump detail: constants are printed as the module holds them",
    "xla_dump_full_hlo_config": "a dump detail: no HloModuleConfig is written here",
    "xla_dump_enable_mlir_pretty_form": "a dump detail: no MLIR is written here",
    "xla_dump_latency_hiding_schedule": "a dump detail: there is no latency-hiding scheduler here",
    "xla_enable_dumping": "dumping here is on exactly when --dump-to/--xla_dump_to is given",
    "xla_gpu_dump_llvmir": "the LLVM IR is always in the dump here (*.ir-no-opt.ll, *.ir-with-opt.ll)",
    # logging and profiling
    "xla_detailed_logging": "XLA's logging: there is none here",
    "xla_hlo_profile": "XLA's per-instruction profiling; hlo-run --iterations times runs",
    # XLA's autotuner and its caches: nothing here autotunes, the kernels come from our emitters
    "xla_gpu_autotune_level": "steers XLA's autotuner only; nothing here autotunes",
    "xla_gpu_exhaustive_tiling_search": "steers XLA's autotuner only; nothing here autotunes",
    "xla_gpu_dump_autotune_results_to": "XLA's autotuning results: nothing here autotunes",
    "xla_gpu_load_autotune_results_from": "XLA's autotuning results: nothing here autotunes",
    "xla_gpu_dump_autotune_logs_to": "XLA's autotuning logs: nothing here autotunes",
    "xla_gpu_dump_autotuned_gemm_fusions": "XLA's autotuning dumps: nothing here autotunes",
    "xla_gpu_per_fusion_autotune_cache_dir": "XLA's autotuning cache: nothing here autotunes",
    "xla_gpu_experimental_autotune_cache_mode": "XLA's autotuning cache: nothing here autotunes",
    # XLA's own scheduling and compile parallelism: the results do not depend on them
    "xla_gpu_enable_latency_hiding_scheduler": "orders XLA's async work only; the runtime here runs the module's "
                                               "instructions in its own order, with the same results",
    "xla_gpu_enable_analytical_latency_estimator": "a cost model of XLA's latency-hiding scheduler only",
    "xla_gpu_force_compilation_parallelism": "XLA's compile threads; here -j N (the output is the same)",
    "xla_force_host_platform_device_count": "the number of XLA:CPU devices; here the participants come from the "
                                            "module (--num-replicas/--num-partitions)",
}

# --xla_* flags another change will honour: refused until then
XLA_NOT_YET: dict[str, str] = {}

# what to use instead of a refused --xla_* flag, by a word of its name
_XLA_INSTEAD = (("fusion", "--no-fusion or --xla_disable_hlo_passes=fusion"),
                ("pass", "--passes, --xla_disable_hlo_passes or --xla_enable_hlo_passes_only"),
                ("dump", "--dump-to with --xla_dump_hlo_pass_re"), ("cuda_data_dir", "HLO_COMPILE_CUDA_HOME"),
                ("triton_gemm", "--gemm"), ("cublas", "--gemm"), ("cudnn", "--conv"),
                ("command_buffer", "hlo-run --use-cuda-graph"), ("graph_level", "hlo-run --use-cuda-graph"))

# XLA's flags honoured here (besides --xla_dump_to): XLA flag → our option
XLA_HONOURED = {"xla_disable_hlo_passes": "--disable-passes", "xla_enable_hlo_passes_only": "--enable-passes-only",
                "xla_dump_hlo_pass_re": "--dump-pass-re",
                "xla_gpu_llvm_ir_file": "--llvm-ir-file", "xla_gpu_ptx_file": "--ptx-file"}


def xla_flag_refusal(arg: str, source: str = "") -> str:
    """The one-line refusal of ``arg`` (``--xla_name[=value]``), a flag neither honoured nor
    observational; ``source``: where it came from (``XLA_FLAGS``), empty for the command line."""
    name = arg.partition("=")[0]
    key = name[2:]
    where = f" (from {source})" if source else ""
    if key in XLA_NOT_YET:
        return f"{name}{where} is not supported yet: {XLA_NOT_YET[key]}"
    instead = next((what for word, what in _XLA_INSTEAD if word in key), None)
    hint = f"; use {instead} instead" if instead else ""
    return (f"{name}{where} may change what XLA compiles or runs and is not supported here, so it is refused "
            f"rather than ignored{hint}")


def environment_help() -> str:
    width = max(len(name) for name, _ in ENVIRONMENT)
    lines = ["\b", "Environment variables:"]  # \b: click keeps the lines as they are
    lines += [f"  {name:<{width}}  {what}" for name, what in ENVIRONMENT]
    return "\n".join(lines)


class UserError(Exception):
    """Something the user typed or gave cannot be used; the message says what and why."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


# ---- error output ---------------------------------------------------------------------------

def error_text(prog: str, e: BaseException) -> str:
    """The one error format: the diagnostic's own place when it has one, else ``prog: error:``."""
    if isinstance(e, HloError):
        if e.location is not None:
            return str(e)
        return f"{prog}: error: {e.message}"
    return f"{prog}: error: {e}"


def stderr_is_tty() -> bool:
    """Whether stderr is a terminal: where the live progress lines of both tools are drawn."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def echo_error(prog: str, e: BaseException) -> None:
    click.echo(error_text(prog, e), err=True)


def note(prog: str, message: str) -> None:
    click.echo(f"{prog}: note: {message}", err=True)


TRACEBACK_ENV = "HLO_COMPILE_TRACEBACK"


def traceback_wanted() -> bool:
    """``HLO_COMPILE_TRACEBACK=1``: internal errors (the ``bug_text`` cases) are re-raised with
    their traceback instead of folded into one line."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def bug_text(prog: str, what: str, e: BaseException) -> str:
    """A failure of ours that no input should cause: still one line, never a traceback (unless
    ``traceback_wanted()``: the callers re-raise then)."""
    return (f"{prog}: error: {what}: unexpected failure ({type(e).__name__}: {e}); this is a bug in "
            f"{prog}, please report it with the input and the command line")


# ---- the click command: XLA's spellings in, one error format out ------------------------------

class Command(click.Command):
    """A click command whose usage errors read ``prog: error: ...`` (exit status 2) and whose
    arguments first go through ``translate`` (XLA's spellings to ours)."""

    def __init__(self, *args, translate: Callable[[list[str]], list[str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.translate = translate

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        prog = self.name or "hlo-compile"
        argv = list(sys.argv[1:] if args is None else args)
        try:
            if self.translate is not None:
                argv = self.translate(argv)
            return super().main(args=argv, prog_name=prog, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo(f"{prog}: error: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            hint = f" (see '{prog} --help')" if isinstance(e, click.UsageError) else ""
            click.echo(f"{prog}: error: {e.format_message()}{hint}", err=True)
            sys.exit(EXIT_ERROR)
        except UserError as e:
            click.echo(f"{prog}: error: {e}", err=True)
            sys.exit(e.code)


def bool_value(text: str, flag: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "t", "yes", "y", "on"):
        return True
    if low in ("0", "false", "f", "no", "n", "off"):
        return False
    raise UserError(f"{flag} takes true or false, got '{text}'")


def translate_xla_flags(argv: list[str], command: click.Command, *, values: dict[str, str],
                        booleans: dict[str, tuple[str, str]], ignored: dict[str, str],
                        refused: dict[str, str], prog: str) -> list[str]:
    """XLA's spellings to ours, before click sees them.

    ``values``: XLA flag → our option taking a value (``--abs_error_bound=0.1``);
    ``booleans``: XLA flag → (our on flag, our off flag), accepting ``--f``, ``--f=true|false``;
    ``ignored``: flags accepted with a note saying why they change nothing here;
    ``refused``: flags that get an error saying why. Any other ``--a_b`` is ``--a-b`` when that
    is one of our options. ``--xla_dump_to=DIR`` is ``--dump-to DIR``; other ``--xla_*`` flags
    are ignored with a note (``XLA_FLAGS`` is read the same way)."""
    ours = {opt for p in command.params for opt in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            out.extend(argv[i:])
            break
        name, eq, value = arg.partition("=")
        if name in ("-o", "--o") and eq:  # hlo-opt's -o=FILE
            out += ["-o", value]
            continue
        if not arg.startswith("--") or name in ours:
            out.append(arg)
            continue
        key = name[2:]
        if key == "xla_dump_to":
            if not eq:
                raise UserError("--xla_dump_to takes a directory: --xla_dump_to=DIR")
            out += ["--dump-to", value]
            continue
        if key in booleans:
            on, off = booleans[key]
            out.append(on if (not eq or bool_value(value, name)) else off)
            continue
        if key in values:
            if eq:
                out += [values[key], value]
            else:
                out.append(values[key])  # the value follows as the next argument
            continue
        if key in ignored:
            note(prog, f"{arg} is ignored: {ignored[key]}")
            continue
        if key in refused:
            raise UserError(f"{name} is not supported: {refused[key]}")
        if key.startswith("xla_"):
            out += _xla_flag(arg, prog)
            continue
        dashed = "--" + key.replace("_", "-")
        if "_" in key and dashed in ours:
            out.append(dashed + (eq + value if eq else ""))
            continue
        out.append(arg)
    return _from_xla_flags(prog) + out


def _xla_flag(arg: str, prog: str, source: str = "") -> list[str]:
    """An ``--xla_*`` flag other than --xla_dump_to: our options honouring it, or [] with a
    note for an observational one; any other is refused (UserError)."""
    name, eq, value = arg.partition("=")
    key = name[2:]
    where = f" (from {source})" if source else ""
    if key in XLA_HONOURED:
        if not eq or not value.strip():
            raise UserError(f"{name}{where} takes a value: {name}=" +
                            ("REGEX" if key == "xla_dump_hlo_pass_re" else "A,B,..."))
        return [XLA_HONOURED[key], value]
    if key in XLA_OBSERVATIONAL_FLAGS:
        note(prog, f"{arg}{where} is ignored: it cannot change what runs here ({XLA_OBSERVATIONAL_FLAGS[key]})")
        return []
    raise UserError(xla_flag_refusal(arg, source))


def _from_xla_flags(prog: str) -> list[str]:
    """``XLA_FLAGS`` as our options, to go before the command line's (whose options then win;
    --xla_disable_hlo_passes adds up): --xla_dump_to is read by ``dump_dir``, observational
    flags get a note, any other flag is refused."""
    out: list[str] = []
    for name, value in xla_flags(with_bare=True).items():
        if name == "xla_dump_to":
            continue
        if not name.startswith("xla_"):
            raise UserError(f"XLA_FLAGS: {name} is not an XLA flag (XLA_FLAGS holds --xla_* flags)")
        out += _xla_flag(f"--{name}" + ("" if value is None else f"={value}"), prog, "XLA_FLAGS")
    return out


# ---- XLA_FLAGS --------------------------------------------------------------------------------

def xla_flags(with_bare: bool = False) -> dict:
    """``XLA_FLAGS`` as {flag name: value} (``--name=value`` or ``--name``: ""); with
    ``with_bare``, a ``--name`` without ``=`` has the value None and a word that is not a flag
    is kept under its own text."""
    raw = os.environ.get("XLA_FLAGS", "")
    try:
        words = shlex.split(raw)
    except ValueError:
        words = raw.split()
    flags: dict = {}
    for w in words:
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            flags[name] = value if eq or not with_bare else None
        elif with_bare:
            flags[w] = None
    return flags


def dump_dir(explicit: Path | None) -> Path | None:
    """``--dump-to``, else ``XLA_FLAGS=--xla_dump_to=DIR`` (XLA's special destinations
    ``-``, ``sponge`` and ``test_undeclared_outputs_dir`` are not directories here)."""
    if explicit is not None:
        return explicit
    value = xla_flags().get("xla_dump_to", "")
    if value and value not in ("-", "sponge", "test_undeclared_outputs_dir"):
        return Path(value)
    return None


def prepare_dump_dir(path: Path | None) -> None:
    if path is None:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the dump directory {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"cannot write into the dump directory {path}")


def check_output_file(path: Path | None) -> None:
    """``-o FILE`` must be writable before anything is compiled."""
    if path is None or str(path) == STDIN:
        return
    if path.is_dir():
        raise UserError(f"-o {path}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"-o {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"-o {path}: not writable")


# ---- input ------------------------------------------------------------------------------------

def read_source(path: str) -> tuple[str, str]:
    """(text, name for messages) of an input file, ``-`` being standard input. Refuses, with a
    place when there is one, what is not HLO text: a missing file, a directory, bytes that are
    not UTF-8, NUL bytes (a binary file, e.g. an HloProto)."""
    if path == STDIN:
        name = "<stdin>"
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    else:
        name = path
        p = Path(path)
        if p.is_dir():
            raise UserError(f"cannot read {path}: it is a directory")
        try:
            data = p.read_bytes()
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    hint = ("; binary HloProto files (.pb) are not read here, only HLO text (e.g. XLA's "
            "*.before_optimizations.txt dumps)")
    nul = data.find(b"\x00")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HloParseError(f"not UTF-8 text (byte 0x{data[e.start]:02x}){hint}",
                            _byte_location(data, e.start, name)) from None
    if nul >= 0:
        raise HloParseError(f"a NUL byte: this is a binary file, not HLO text{hint}",
                            _byte_location(data, nul, name))
    return text.removeprefix("\ufeff"), name


def read_modules(path: str, split_input_file: bool = False, as_fusion: bool = False) -> list[HloModule]:
    """The modules of an input file (``-``: standard input): one, or those between
    ``// -----`` lines; with ``as_fusion``, each a bare fused computation wrapped as one fusion."""
    text, name = read_source(path)
    return modules_of_text(text, name, split_input_file, as_fusion)


def modules_of_text(text: str, name: str, split_input_file: bool = False,
                    as_fusion: bool = False) -> list[HloModule]:
    """``read_modules`` on text already read (``read_source``)."""
    from ..hlo import parse_module, parse_modules  # the parser (and numpy): only when parsing
    modules = parse_modules(text, name) if split_input_file else [parse_module(text, name)]
    if not modules:
        raise UserError(f"{name}: no HLO module in the file (only comments and '// -----' lines)")
    if as_fusion:
        from ..passes.wrap_fusions import wrap_entry_as_fusion
        modules = [wrap_entry_as_fusion(m) for m in modules]
    return modules


def _byte_location(data: bytes, offset: int, name: str) -> SourceLocation:
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    return SourceLocation(name, line, offset - start + 1)


# ---- versions, architectures -------------------------------------------------------------------

def _version(dist: str) -> str | None:
    """``dist``'s installed version, or None. llvmlite's from its module (every compile checks
    it: ``importlib.metadata`` costs ~20 ms of start-up), the others' from their metadata."""
    if dist == "llvmlite":
        try:
            import llvmlite
        except ImportError:
            return None
        return getattr(llvmlite, "__version__", None)
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def version_text(prog: str) -> str:
    from .. import __version__
    own = _version("hlo-compile") or __version__
    parts = [f"Python {sys.version.split()[0]}"]
    for dist in ("llvmlite", "numpy", "lark", "click", "cuda-pathfinder", "nvidia-nvvm", "nvidia-cuda-nvcc",
                 "cuda-python"):
        v = _version(dist)
        if v:
            parts.append(f"{dist} {v}")
    try:
        import llvmlite.binding as llvm
        parts.insert(2, "LLVM " + ".".join(str(x) for x in llvm.llvm_version_info))
    except Exception:  # noqa: BLE001 - a version line must never fail
        pass
    return f"{prog} {own} ({', '.join(parts)})"


def library_call_options(fn):
    """``--gemm`` and ``--conv``: whether XLA:GPU's library calls run through NVIDIA's libraries
    or are compiled by our emitters (``CompileOptions.gemm``/``conv``)."""
    fn = click.option("--conv", type=click.Choice(["library", "generated"]), default="library", show_default=True,
                      help="cuDNN calls (convolutions, fused attention): run by cuDNN on cuda, or lowered to "
                           "our kernels (always on host).")(fn)
    return click.option("--gemm", type=click.Choice(["library", "generated"]), default="library",
                        show_default=True,
                        help="cuBLAS/cuBLASLt GEMM calls: run by cuBLAS on cuda, or lowered to our GEMM "
                             "kernels (always on host).")(fn)


def pass_options(fn):
    """``--disable-passes``, ``--enable-passes-only`` (XLA's --xla_disable_hlo_passes and
    --xla_enable_hlo_passes_only) and ``--dump-pass-re`` (--xla_dump_hlo_pass_re)."""
    fn = click.option("--dump-pass-re", default=None, metavar="REGEX",
                      help="With --dump-to: also dump the module after each of our passes whose name (or the "
                           "next one's) the regex matches, with XLA's names (module_NNNN.<module>.NNNN.passes."
                           "after_<pass>.before_<next>.txt); XLA's --xla_dump_hlo_pass_re.")(fn)
    fn = click.option("--enable-passes-only", multiple=True, metavar="A,B,...",
                      help="Skip every pass not named (see --list-passes; the required ones must be named); "
                           "XLA's --xla_enable_hlo_passes_only.")(fn)
    return click.option("--disable-passes", multiple=True, metavar="A,B,...",
                        help="Skip these passes (see --list-passes: only 'fusion' can be); XLA's "
                             "--xla_disable_hlo_passes (also in XLA_FLAGS: the lists add up).")(fn)


def override_options(fn):
    """``--override-dir`` and XLA's --xla_gpu_llvm_ir_file/--xla_gpu_ptx_file (``driver/overrides.py``)."""
    fn = click.option("--ptx-file", "ptx_files", multiple=True, metavar="F,...",
                      help="XLA's --xla_gpu_ptx_file: the PTX of the module whose dump prefix "
                           "(module_NNNN.<module>) begins the file's name replaces its whole PTX (cuda only).")(fn)
    fn = click.option("--llvm-ir-file", "llvm_ir_files", multiple=True, metavar="F1,F2,...",
                      help="XLA's --xla_gpu_llvm_ir_file: the LLVM IR of the module whose dump prefix "
                           "(module_NNNN.<module>) begins the file's name replaces its whole IR, then optimised "
                           "and compiled again.")(fn)
    return click.option("--override-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        metavar="DIR",
                        help="Kernels' code from DIR, in files named as --dump-to writes them: "
                             "module_NNNN.<module>.<kernel>.ir-no-opt.ll (its LLVM IR, optimised and compiled "
                             "again; on the host too) or module_NNNN.<module>.<kernel>.ptx (its PTX, cuda only). "
                             "Every file must name a kernel; it keeps the kernel's name and signature.")(fn)


def override_spec(override_dir: Path | None, llvm_ir_files: Iterable[str], ptx_files: Iterable[str],
                  platform: str = "cuda"):
    """The run's ``overrides.OverrideSpec``, or None when none is given (comma-separated lists
    split, every file checked now: a file that cannot be read is an error before any work)."""
    ir = [Path(f) for v in llvm_ir_files for f in v.split(",") if f.strip()]
    ptx = [Path(f) for v in ptx_files for f in v.split(",") if f.strip()]
    if override_dir is None and not ir and not ptx:
        return None
    from ..driver.overrides import OverrideError, OverrideSpec
    try:
        return OverrideSpec(override_dir, ir, ptx, platform)
    except OverrideError as e:
        raise UserError(e.message) from None


def check_dump_pass_re(regex: str | None, dump: Path | None):
    """``--dump-pass-re``'s compiled regex (None without it); it needs a dump directory."""
    if regex is None:
        return None
    import re
    if dump is None:
        raise UserError("--xla_dump_hlo_pass_re (--dump-pass-re) needs a dump directory: --dump-to DIR or "
                        "--xla_dump_to=DIR")
    try:
        return re.compile(regex)
    except re.error as e:
        raise UserError(f"--xla_dump_hlo_pass_re={regex}: not a regular expression ({e})") from None


def version_option(prog: str):
    def show(ctx: click.Context, _param, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(version_text(prog))
            ctx.exit(0)
    return click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=show,
                        help="Print the version (and of the libraries it uses) and exit.")


def check_llvmlite() -> None:
    """llvmlite before 0.48 fails inside LLVM on our IR: say so instead."""
    v = _version("llvmlite")
    if v is None:
        return
    try:
        major, minor = (int(x) for x in v.split(".")[:2])
    except ValueError:
        return
    if (major, minor) < LLVMLITE_FLOOR:
        raise UserError(f"llvmlite {v} is too old: code generation needs llvmlite >= "
                        f"{LLVMLITE_FLOOR[0]}.{LLVMLITE_FLOOR[1]} (pip install -U 'llvmlite>=0.48')")


def supported_archs() -> list[str]:
    from ..gpu.archs import SUPPORTED_ARCHS
    return list(SUPPORTED_ARCHS)


def check_arch(arch: str, flag: str = "--arch") -> str:
    """``arch`` normalised (``SM_90`` → ``sm_90``), or an error listing what is supported."""
    key = arch.strip().lower()
    if key.startswith("sm") and not key.startswith("sm_"):
        key = "sm_" + key[2:]
    known = supported_archs()
    if key in known:
        return key
    raise UserError(f"{flag}={arch}: unsupported GPU architecture; supported: {', '.join(known)} "
                    "(Ampere and newer)")


def default_arch() -> str:
    """The GPU to plan for when no --arch is given: ``HLO_COMPILE_ARCH`` (checked), else sm_80.
    hlo-run's host platform plans and dumps for it; the cuda platform uses its own GPU's."""
    value = os.environ.get("HLO_COMPILE_ARCH", "").strip()
    return check_arch(value, flag="HLO_COMPILE_ARCH") if value else "sm_80"


