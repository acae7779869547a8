"""``--dump-to`` writes the indexing maps as they are made (issue 17's leftover: Llama 8B's
dump peaked at 2.2 GB, most of it the ``indexing``/``indexing-json`` stages holding 71 MB and
177 MB of text and the objects behind them): the files are the bytes the whole texts were, a
failure leaves no file, and the memory held is one instruction's maps, not the module's."""
from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest

from hlo_compile import parse_module
from hlo_compile.driver.dump import DumpWriter
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.indexing import report
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.driver.stages import STAGES, StreamedText

REPO = Path(__file__).resolve().parents[2]
GELU = (REPO / "examples" / "gelu.hlo").read_text()

# a multi-output loop fusion, a reduction with its reducer, a tuple root (XLA:GPU's style)
MULTI = """\
HloModule multi, entry_computation_layout={(f32[8,16]{1,0}, f32[16]{0})->(f32[8]{0}, f32[8,16]{1,0})}

%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add.1 = f32[] add(f32[] %a, f32[] %b)
}

%fused_computation (param_0: f32[8,16], param_1: f32[16]) -> (f32[8,16], f32[8,16]) {
  %param_0 = f32[8,16]{1,0} parameter(0)
  %param_1 = f32[16]{0} parameter(1)
  %broadcast.2 = f32[8,16]{1,0} broadcast(f32[16]{0} %param_1), dimensions={1}
  %add.3 = f32[8,16]{1,0} add(f32[8,16]{1,0} %param_0, f32[8,16]{1,0} %broadcast.2)
  %exp.4 = f32[8,16]{1,0} exponential(f32[8,16]{1,0} %add.3)
  ROOT %tuple.5 = (f32[8,16]{1,0}, f32[8,16]{1,0}) tuple(f32[8,16]{1,0} %add.3, f32[8,16]{1,0} %exp.4)
}

%fused_reduce (param_0.1: f32[8,16]) -> f32[8] {
  %param_0.1 = f32[8,16]{1,0} parameter(0)
  %constant.6 = f32[] constant(0)
  ROOT %reduce.7 = f32[8]{0} reduce(f32[8,16]{1,0} %param_0.1, f32[] %constant.6), dimensions={1}, to_apply=%add_f32
}

ENTRY %main (x: f32[8,16], y: f32[16]) -> (f32[8], f32[8,16]) {
  %x = f32[8,16]{1,0} parameter(0)
  %y = f32[16]{0} parameter(1)
  %loop_fusion = (f32[8,16]{1,0}, f32[8,16]{1,0}) fusion(f32[8,16]{1,0} %x, f32[16]{0} %y), kind=kLoop, \
calls=%fused_computation
  %gte.0 = f32[8,16]{1,0} get-tuple-element((f32[8,16]{1,0}, f32[8,16]{1,0}) %loop_fusion), index=0
  %gte.1 = f32[8,16]{1,0} get-tuple-element((f32[8,16]{1,0}, f32[8,16]{1,0}) %loop_fusion), index=1
  %reduce_fusion = f32[8]{0} fusion(f32[8,16]{1,0} %gte.1), kind=kInput, calls=%fused_reduce
  ROOT %out = (f32[8]{0}, f32[8,16]{1,0}) tuple(f32[8]{0} %reduce_fusion, f32[8,16]{1,0} %gte.0)
}
""".replace("\\\n", "")


def previous_text(module) -> str:
    """The text report as it was made before it was streamed: every line, then joined."""
    lines: list[str] = []
    for inst in report._subjects(module):
        lines.append(f"{inst.name} = {inst.opcode}")
        for i, k, d, e in report._records(inst):
            arrow = f"output {k} -> operand {i}" if d == "output_to_input" else f"operand {i} -> output {k}"
            if e is None:
                lines.append(f"  {arrow}: unknown indexing")
                continue
            lines.append(f"  {arrow}:" + ("" if e else " (none)"))
            lines.extend(f"    {m.to_text()}" for m in e)
        lines.append("")
    return "\n".join(lines)


def previous_json(module) -> str:
    """The JSON report as it was written before: the whole document, then dumped."""
    return json.dumps(report.indexing_report_json(module), indent=1) + "\n"


def _chain(n: int) -> str:
    """``n`` loop fusions, one after another: an indexing report that grows with ``n``."""
    comps, entry = [], ["  %p = f32[64,32]{1,0} parameter(0)"]
    prev = "%p"
    for k in range(n):
        comps.append(f"%fused_{k} (param_0.{k}: f32[64,32]) -> f32[32,64] {{\n"
                     f"  %param_0.{k} = f32[64,32]{{1,0}} parameter(0)\n"
                     f"  %transpose.{k} = f32[32,64]{{1,0}} transpose(f32[64,32]{{1,0}} %param_0.{k}), "
                     f"dimensions={{1,0}}\n"
                     f"  ROOT %reshape.{k} = f32[32,64]{{1,0}} negate(f32[32,64]{{1,0}} %transpose.{k})\n}}\n")
        entry.append(f"  %bitcast.{k} = f32[64,32]{{1,0}} bitcast(f32[{'64,32' if k == 0 else '32,64'}]{{1,0}} {prev})")
        entry.append(f"  %fusion.{k} = f32[32,64]{{1,0}} fusion(f32[64,32]{{1,0}} %bitcast.{k}), kind=kLoop, "
                     f"calls=%fused_{k}")
        prev = f"%fusion.{k}"
    entry[-1] = entry[-1].replace(f"  %fusion.{n - 1} =", f"  ROOT %fusion.{n - 1} =")
    return ("HloModule chain\n\n" + "\n".join(comps) + "\nENTRY %main (p: f32[64,32]) -> f32[32,64] {\n"
            + "\n".join(entry) + "\n}\n")


@pytest.mark.parametrize("text", [GELU, MULTI, _chain(3)], ids=["gelu", "multi", "chain"])
def test_pieces_are_the_previous_texts(text):
    m = parse_module(text)
    assert "".join(report.indexing_report_text_pieces(m)) == previous_text(m) == report.indexing_report_text(m)
    assert "".join(report.indexing_report_json_pieces(m)) + "\n" == previous_json(m)
    records = sum(len(report._records(i)) for i in report._subjects(m))
    assert len(list(report.indexing_report_json_pieces(m))) == 2 + 2 * len(report._subjects(m)) + records  # by record


def test_no_instruction_is_the_empty_document(monkeypatch):
    monkeypatch.setattr(report, "_subjects", lambda module: [])
    m = parse_module(GELU)
    assert "".join(report.indexing_report_json_pieces(m)) == json.dumps({"instructions": []}, indent=1)
    assert report.indexing_report_text(m) == ""


@pytest.mark.parametrize("text", [GELU, MULTI], ids=["gelu", "multi"])
def test_dumped_files_are_the_previous_texts_never_made_whole(text, tmp_path, monkeypatch):
    m = parse_module(text)
    expected = {"indexing.txt": previous_text(m), "indexing.json": previous_json(m)}

    def whole(self):
        raise AssertionError("a dumped stage's text was made whole")
    monkeypatch.setattr(StreamedText, "__call__", whole)
    only = [s for s in STAGES if s.name in ("indexing", "indexing-json")]
    monkeypatch.setattr("hlo_compile.driver.pipeline.STAGES", only)
    r = run_pipeline(m, CompileOptions(), dump_to=tmp_path, dump_indexing="")  # asked for: every instruction
    assert r.dump_errors == {} and r.skipped == {}
    for suffix, want in expected.items():
        (path,) = tmp_path.glob(f"module_0000.*.{suffix}")
        assert path.read_text() == want
    assert not list(tmp_path.glob(".tmp-*"))
    assert sorted(json.loads((tmp_path / "summary.json").read_text())["stages"]) == ["indexing", "indexing-json"]


def test_printed_stage_is_made_whole():
    m = parse_module(MULTI)
    r = run_pipeline(m, CompileOptions(), emit="indexing-json")
    assert r.artifacts["indexing-json"] == previous_json(m)


def test_a_failure_while_streaming_leaves_no_file(tmp_path, monkeypatch):
    m = parse_module(MULTI)
    real, made = report._record_json, []

    def failing(record):
        made.append(record)
        if len(made) == 5:  # pieces are written by then
            raise HloUnsupportedError("no maps for %reduce_fusion (test)")
        return real(record)
    monkeypatch.setattr(report, "_record_json", failing)
    only = [s for s in STAGES if s.name in ("indexing", "indexing-json")]
    monkeypatch.setattr("hlo_compile.driver.pipeline.STAGES", only)
    with pytest.raises(HloUnsupportedError, match="reduce_fusion"):  # a dump's stages are all asked for
        run_pipeline(m, CompileOptions(), dump_to=tmp_path, dump_indexing=".*")
    assert not list(tmp_path.glob("*.indexing.json")) and not list(tmp_path.glob(".tmp-*"))
    assert len(list(tmp_path.glob("*.indexing.txt"))) == 1  # the stage before it, whole


def test_streamed_dump_holds_one_records_maps(tmp_path):
    """The memory held while the JSON of 480 fusions is written is less than the file, a fifth
    of what making it whole holds (the document and its dicts: about ten times the file)."""
    from hlo_compile.driver.stages import _indexing_json
    writer = DumpWriter(tmp_path, "chain")
    writer.write("warm.json", _indexing_json(CompileOptions(), parse_module(_chain(4))).text.chunks())
    m = parse_module(_chain(480))
    out = _indexing_json(CompileOptions(), m)
    tracemalloc.start()
    try:
        path = writer.write("indexing.json", out.text.chunks())
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        whole = previous_json(m)
        made_whole = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert path.read_text() == whole and size > 400_000
    assert streamed < size and 5 * streamed < made_whole, (streamed, made_whole, size)


def test_indexing_is_dumped_only_on_request(tmp_path, monkeypatch):
    """A dump holds no indexing maps unless asked for (``dump_indexing``), and none is made:
    on a MobileNetV2-sized module they were most of the dump's time and size."""
    m = parse_module(MULTI)

    def never(*args, **kwargs):
        raise AssertionError("indexing maps made for a dump that did not ask for them")
    monkeypatch.setattr(report, "_iter_records", never)
    only = [s for s in STAGES if s.name in ("hlo", "indexing", "indexing-json")]
    monkeypatch.setattr("hlo_compile.driver.pipeline.STAGES", only)
    r = run_pipeline(m, CompileOptions(), dump_to=tmp_path)
    assert r.dump_errors == {} and r.skipped == {}
    assert not list(tmp_path.glob("*indexing*")) and list(tmp_path.glob("*_gpu_after_optimizations.txt"))
    assert json.loads((tmp_path / "summary.json").read_text())["stages"] == ["hlo"]


def test_dump_indexing_regex_selects_instructions(tmp_path, monkeypatch):
    """``dump_indexing=REGEX``: the maps of the instructions whose name it finds, and only
    theirs are made; the printed stage (``emit``) stays whole."""
    m = parse_module(MULTI)
    real, made = report._iter_records, []

    def counting(inst):
        made.append(inst.name)
        return real(inst)
    monkeypatch.setattr(report, "_iter_records", counting)
    r = run_pipeline(m, CompileOptions(), emit="indexing", dump_to=tmp_path, dump_indexing="^reduce_")
    text = r.artifacts["indexing"]
    # the printed text's three instructions, the JSON's one: none of loop_fusion's for the dump
    assert made == ["loop_fusion", "reduce_fusion", "out", "reduce_fusion"]
    assert text == previous_text(m)  # printed: every instruction
    (txt,) = tmp_path.glob("*.indexing.txt")
    (js,) = tmp_path.glob("*.indexing.json")
    assert txt.read_text() == previous_text(m)  # the printed stage is the one dumped
    assert [i["name"] for i in json.loads(js.read_text())["instructions"]] == ["reduce_fusion"]
    one = parse_module(MULTI)
    want = "".join(report.indexing_report_json_pieces(one, re.compile("^reduce_"))) + "\n"
    assert js.read_text() == want
