"""`hlo-compile`: parse, analyse and emit an HLO module, printing one stage or dumping all."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..hlo import HloError, parse_modules
from ..pipeline import STAGE_NAMES, CompileOptions, run_pipeline


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dump-to", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write every stage of the pipeline into this directory.")
@click.option("--emit", type=click.Choice(STAGE_NAMES), default=None,
              help="Print this stage (default: the module after passes, in XLA's long form).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the emitted stage to this file instead of stdout.")
@click.option("--arch", default="sm_80", show_default=True, envvar="HLO_COMPILE_ARCH",
              help="Target GPU architecture (sm_80, sm_90).")
@click.option("--tensor-cores/--no-tensor-cores", "tensor_cores", default=False, show_default=True,
              envvar="HLO_COMPILE_TENSOR_CORES",
              help="f16/bf16 dots through mma.sync tensor cores on sm_80+ (experimental).")
@click.option("--fusion/--no-fusion", "fusion", default=True, show_default=True,
              help="Group lone instructions into fusions (--no-fusion: one kernel per instruction).")
@click.option("--split-input-file", is_flag=True, help="Treat '// -----' lines as module separators.")
@click.option("--short", "short_form", is_flag=True, help="Print HLO in the short form (no operand shapes).")
@click.option("--as-fusion", is_flag=True,
              help="The file is a bare fused computation (XLA's emitter test files): compile it as one fusion.")
def main(file: Path, dump_to: Path | None, emit: str | None, output: Path | None, arch: str,
         tensor_cores: bool, fusion: bool, split_input_file: bool, short_form: bool, as_fusion: bool) -> None:
    """Compile an XLA HLO text module."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        click.echo(f"error: cannot read {file}: {e}", err=True)
        sys.exit(2)
    options = CompileOptions(arch=arch, dot_tensor_cores=tensor_cores, fusion=fusion)
    try:
        if split_input_file:
            modules = parse_modules(text, str(file))
        else:
            from ..hlo import parse_module
            modules = [parse_module(text, str(file))]
        if as_fusion:
            from ..passes.wrap_fusions import wrap_entry_as_fusion
            modules = [wrap_entry_as_fusion(m) for m in modules]
        outputs: list[str | bytes] = []
        for i, module in enumerate(modules):
            target = None
            if dump_to is not None:
                target = dump_to if len(modules) == 1 else dump_to / f"module_{i:04d}"
            result = run_pipeline(module, options, emit=emit or ("hlo" if dump_to is None else None),
                                  dump_to=target)
            stage_name = emit or "hlo"
            if stage_name == "hlo" and short_form:
                outputs.append(result.compilation.module.to_text("short"))
            elif emit is not None or dump_to is None:
                outputs.append(result.artifacts[stage_name])
    except HloError as e:
        click.echo(str(e), err=True)
        sys.exit(2)
    except (MemoryError, RecursionError, ValueError, KeyError, IndexError, TypeError, NotImplementedError,
            ArithmeticError, AssertionError, AttributeError, RuntimeError) as e:
        # a case the compiler does not handle: still a message, never a traceback
        click.echo(f"hlo-compile: internal error on {file}: {type(e).__name__}: {e} "
                   "(please report it with the file)", err=True)
        sys.exit(2)
    if any(isinstance(o, bytes) for o in outputs):
        if output is None or len(outputs) != 1:
            click.echo("error: the cubin stage is binary: write one module's cubin with -o FILE", err=True)
            sys.exit(2)
        output.write_bytes(outputs[0])
        return
    text_out = "// -----\n".join(outputs)
    if output is not None:
        output.write_text(text_out)
    elif text_out:
        click.echo(text_out, nl=False)
    if dump_to is not None:
        click.echo(f"wrote {dump_to}", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
