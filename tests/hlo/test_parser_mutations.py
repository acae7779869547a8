"""A few hundred mutated corpus files: the parser returns a module or raises HloError only."""
from __future__ import annotations

from pathlib import Path

from mutation import check, mutations


def _small_corpus_files(corpus: Path) -> list[Path]:
    files = sorted((corpus / "xla" / "parser_tests").glob("*.hlo"))
    files += sorted((corpus / "xla" / "parser_tests_invalid").glob("*.hlo"))
    return [f for f in files if f.stat().st_size < 4000]


def test_mutated_inputs_raise_only_hlo_errors(corpus: Path) -> None:
    files = _small_corpus_files(corpus)
    assert len(files) > 100
    failures = [msg for name, text in mutations(files, 400, seed=1234)
                if (msg := check(text, name)) is not None]
    assert not failures, "\n".join(failures[:10])


def test_mutations_really_change_the_input(corpus: Path) -> None:
    files = _small_corpus_files(corpus)[:20]
    originals = {f.read_text() for f in files}
    changed = sum(text not in originals for _, text in mutations(files, 50, seed=7))
    assert changed >= 45
