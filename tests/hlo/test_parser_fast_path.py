"""The parser's fast path (hlo_compile/hlo/fast_path.py) against the Lark grammar: wherever it
does not decline, it gives exactly the records Lark's transformer gives, so the IR, the
printed text and every error are the same whichever path read the text."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from lark.exceptions import UnexpectedInput

import hlo_compile
from hlo_compile import HloError
from hlo_compile.hlo import fast_path as fast_path_mod
from hlo_compile.hlo import lark_reader
from hlo_compile.hlo import parser as parser_mod
from hlo_compile.hlo.ir import HloComputation, HloInstruction
from hlo_compile.hlo.records import PositionedError
from mutation import mutate

_SPLIT = re.compile(r"^// -----[ \t]*$", re.M)


def _lark():
    return lark_reader.lark_parser()


def _lark_records(text: str):
    """The transformer's result, or None where Lark rejects the text."""
    try:
        return _lark().parse(text, start="start")
    except (UnexpectedInput, PositionedError, RecursionError):
        return None


def _chunks(text: str) -> list[str]:
    """The modules of a ``// -----`` split file, each on its own."""
    bounds = [0] + [x for m in _SPLIT.finditer(text) for x in (m.start(), m.end())] + [len(text)]
    return [text[bounds[i]:bounds[i + 1]] for i in range(0, len(bounds), 2)]


def _corpus_files(corpus: Path) -> list[Path]:
    return sorted(corpus.rglob("*.hlo"))


def _check_records(text: str) -> tuple[bool, str | None]:
    """Whether the fast path accepted ``text``, and what went wrong (None if it declined or
    agreed with Lark)."""
    fast = parser_mod._fast_path().parse(text)
    if fast is None:
        return False, None
    lark = _lark_records(text)
    if lark is None:
        return True, "the fast path accepted text that Lark rejects"
    if fast != lark:
        return True, "the fast path's records differ from Lark's"
    return True, None


@pytest.mark.slow
def test_fast_path_gives_lark_records_on_the_whole_corpus(corpus: Path) -> None:
    problems, accepted = [], 0
    for f in _corpus_files(corpus):
        for chunk in _chunks(f.read_text()):
            took, problem = _check_records(chunk)
            accepted += took
            if problem is not None:
                problems.append(f"{f.relative_to(corpus)}: {problem}")
    assert not problems, "\n".join(problems[:20])
    assert accepted > 1000  # the fast path reads most of the corpus


def test_fast_path_reads_real_modules(corpus: Path) -> None:
    """Real compiler output (JAX modules with stack frames, the large benchmark model) takes the
    fast path: if it declined, parse throughput would silently drop to Lark's."""
    files = sorted((corpus / "jax").glob("*/*.hlo"))
    files.append(corpus / "xla/repo/xla/tools/benchmarks/hlo/hlo_llama31_8b_bf16_1x8.hlo")
    declined = [str(f.relative_to(corpus)) for f in files
                if f.exists() and parser_mod._fast_path().parse(f.read_text()) is None]
    assert not declined, declined


def _normalize(value):
    if isinstance(value, (HloComputation, HloInstruction)):
        return (type(value).__name__, value.name)
    if isinstance(value, (tuple, list)):
        return tuple(_normalize(v) for v in value)
    return value


def _summary(module) -> list:
    out = [module.name, module.has_header, module.stack_frames, module.to_text("long"), module.to_text("short"),
           [(a.name, a.raw, _normalize(a.value)) for a in module.attributes.values()]]
    for comp in module.computations:
        out.append((comp.name, comp.is_entry, comp.has_signature, comp.root.name, str(comp.location),
                    [(a.name, a.raw, _normalize(a.value)) for a in comp.attributes.values()]))
        for inst in comp.instructions:
            out.append((inst.name, inst.opcode, inst.shape, [o.name for o in inst.operands],
                        [(a.name, a.raw, _normalize(a.value)) for a in inst.attributes.values()],
                        inst.literal_text, inst.parameter_number, inst.location, inst.declared_operand_shapes))
    return out


def _outcome(text: str, name: str, fast: bool):
    try:
        return [_summary(m) for m in hlo_compile.parse_modules(text, name, fast_path=fast)]
    except HloError as e:
        return (type(e).__name__, str(e))


@pytest.mark.slow
def test_parse_modules_is_the_same_both_ways(corpus: Path) -> None:
    """Modules (printed text, instructions, attributes, locations) and errors, with and without
    the fast path, on every corpus file, valid or not."""
    differ = []
    for f in _corpus_files(corpus):
        text = f.read_text()
        if _outcome(text, f.name, True) != _outcome(text, f.name, False):
            differ.append(str(f.relative_to(corpus)))
    assert not differ, differ[:20]


_INSERTS = ["/*c*/", " /* x */ ", "//c\n", "\x0b", "\u00a0", "\t", "\r\n", "ROOT ", "ENTRY ", "HloModule ", "%",
            "#0", "-", "constant", "(", ")", "{", "}", ",", ", a=b", "=", "->", ":", "f32[] ", "(f32[], s32[]) ",
            "b(", "FileNames ", "0", "'x'", '"', "\\", "\n", "s32[2]{0}", "constant(0)", "T(2)", "<=", "parameter"]


def _token_mutation(text: str, rng: random.Random) -> str:
    """Insertions and deletions of whitespace, comments, keywords and punctuation: where the
    fast path and the lexer could disagree about token boundaries."""
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(text) + 1)
        if rng.random() < 0.7:
            text = text[:i] + rng.choice(_INSERTS) + text[i:]
        else:
            text = text[:i] + text[i + rng.randint(1, 3):]
    return text


def test_fast_path_agrees_with_lark_on_mutated_inputs(corpus: Path) -> None:
    files = sorted((corpus / "xla" / "parser_tests").glob("*.hlo")) + sorted((corpus / "jax").glob("*/*.hlo"))
    texts = [t for f in files if f.stat().st_size < 20000 and parser_mod._fast_path().parse(t := f.read_text())]
    assert len(texts) > 100
    rng = random.Random(99)
    problems, accepted = [], 0
    for i in range(3000):
        base = rng.choice(texts)
        text = mutate(base, rng) if i % 2 else _token_mutation(base, rng)
        took, problem = _check_records(text)
        accepted += took
        if problem is not None:
            problems.append(f"{problem}: {text[:200]!r}")
    assert not problems, "\n".join(problems[:5])
    assert accepted > 300  # the comparison saw many accepted mutants


def test_lark_only_by_keyword_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n"
    monkeypatch.delenv(parser_mod.LARK_ONLY_ENV, raising=False)
    calls = []
    real = fast_path_mod.FastPath.parse
    monkeypatch.setattr(fast_path_mod.FastPath, "parse", lambda self, t: calls.append(t) or real(self, t))
    hlo_compile.parse_module(text)
    assert len(calls) == 1
    hlo_compile.parse_module(text, fast_path=False)
    monkeypatch.setenv(parser_mod.LARK_ONLY_ENV, "1")
    hlo_compile.parse_module(text)
    hlo_compile.parse_modules(text)
    assert len(calls) == 1
    hlo_compile.parse_module(text, fast_path=True)  # the keyword wins over the environment
    assert len(calls) == 2


def test_fast_path_lexes_in_larks_order_and_states() -> None:
    """The fast path's terminal order and the accepted sets it uses come from Lark's lexer; if
    the grammar changes, its states must be revisited (this test says so)."""
    lark = _lark()
    contextual = getattr(lark.parser, "lexer", None)
    if not hasattr(contextual, "root_lexer") or not hasattr(contextual, "lexers"):
        pytest.skip("this Lark version's lexer internals differ")
    fast = parser_mod._fast_path()
    assert fast.order == [t.name for t in contextual.root_lexer.terminals]
    ignored = set(lark.ignore_tokens)
    state_sets = {frozenset(t.name for t in lexer.terminals) - ignored for lexer in contextual.lexers.values()}
    used = {name: value for name, value in vars(fast_path_mod).items()
            if isinstance(value, frozenset) and name.startswith("_")}
    assert len(used) > 15
    for name, accepted in used.items():
        assert accepted in state_sets, f"fast_path.{name} is not the accepted set of any parser state"


def test_declined_inputs_still_parse() -> None:
    """Syntax the fast path leaves to Lark: a nested instruction, a single instruction."""
    nested = "HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(f32[4] abs(p))\n}\n"
    single = "%n = f32[4] negate(f32[4] %p)"
    for text in (nested, single):
        assert parser_mod._fast_path().parse(text) is None
        assert hlo_compile.parse_module(text, verify=False).entry.root.opcode == "negate"


def test_parser_loaded_from_its_cache_file(tmp_path):
    """The second process loads Lark's analysed grammar from the cache file; such a Lark object
    lacks attributes a freshly built one has (``ignore_tokens``): parsing must still work."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "HLO_COMPILE_CACHE_DIR": str(tmp_path / "cache")}
    code = ("from hlo_compile.hlo import parse_module\n"
            "m = parse_module('HloModule m\\nENTRY e {\\n  p = f32[4] parameter(0)\\n"
            "  ROOT n = f32[4] negate(p)\\n}\\n')\n"
            "print(m.entry.root.opcode)\n")
    for run in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "negate", (run, r.stderr[-2000:])
    assert any(p.name.startswith("lark-") for p in (tmp_path / "cache").iterdir())


def test_fast_path_terminals_kept_as_json_equal_larks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminals the fast path reads from its JSON file are those of the built parser; a
    damaged file is made again from Lark; without Lark's version no file is trusted blindly."""
    from hlo_compile.hlo import grammar
    monkeypatch.setenv("HLO_COMPILE_CACHE_DIR", str(tmp_path))
    built = []

    def build():
        built.append(1)
        return _lark()
    first = grammar.fast_path_terminals(build)
    assert built == [1]
    files = list(tmp_path.glob("lark-terminals-*.json"))
    assert len(files) == 1
    assert {k: v for k, v in first.items() if k != "format"} == grammar.terminals_of(_lark())
    again = grammar.fast_path_terminals(build)
    assert built == [1] and again == first  # read from the file
    files[0].write_text('{"format": "lalr-contextual-1", "order": ["NAME"]}')
    assert grammar.fast_path_terminals(build) == first and built == [1, 1]
    fast = fast_path_mod.FastPath(first)
    assert fast.order == grammar.terminals_of(_lark())["order"]
    assert "ROOT" in fast.keywords.values()


def test_a_fast_path_module_loads_no_lark(tmp_path: Path) -> None:
    """Parsing and preparing a module the fast path reads imports neither Lark nor the
    library-call lowerings (the terminals' file made first by another process)."""
    import subprocess
    import sys
    text = "HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n"
    code = ("import sys\nfrom hlo_compile.hlo import parse_module\nfrom hlo_compile.passes import run_passes\n"
            f"m = parse_module({text!r})\nrun_passes(m, arch='sm_90')\n"
            "print(sorted(n for n in ('lark', 'hlo_compile.hlo.lark_reader', 'hlo_compile.passes.gemm_lowering',"
            " 'hlo_compile.hlo.calls.conv', 'hlo_compile.passes.triangular_solve_lowering') if n in sys.modules))\n")
    env = {**__import__("os").environ, "HLO_COMPILE_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    assert "'lark'" in runs[0].stdout  # the first run made the file from the built parser
    assert runs[1].stdout.strip() == "[]", runs[1].stdout + runs[1].stderr
