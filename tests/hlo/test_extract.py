"""One instruction taken out of a module (``hlo/extract.py``, ``hlo-compile --extract=NAME``) and
one fusion's kernel (``--fusion=NAME --emit=STAGE``): the extracted module parses back, verifies,
carries every computation the instruction calls, and computes on the interpreter what the
instruction computed inside the whole module, fed the operands the whole module made for it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile.cli.compile import main as compile_main
from hlo_compile.hlo import parse_module
from hlo_compile.hlo.extract import ExtractError, extract_instruction, find_instructions
from hlo_compile.hlo.ir import clone_module
from hlo_compile.hlo.rewrite import new_instruction
from hlo_compile.driver.pipeline import fusions_plan
from hlo_compile.hlo.shape import Shape
from hlo_compile.hlo.verifier import verify_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime import literals

ROOT = Path(__file__).resolve().parents[2]
KMEANS = ROOT / "tests" / "data" / "models" / "lax_while_kmeans"
GELU = ROOT / "examples" / "gelu.hlo"

CALLS = """HloModule calls, entry_computation_layout={(f32[8,16]{1,0}, s32[])->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%cond (c: (s32[], f32[8,16])) -> pred[] {
  %c = (s32[], f32[8,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[8,16]{1,0}) %c), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(s32[] %i, s32[] %three), direction=LT
}

%body (t: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {
  %t = (s32[], f32[8,16]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element((s32[], f32[8,16]{1,0}) %t), index=0
  %v = f32[8,16]{1,0} get-tuple-element((s32[], f32[8,16]{1,0}) %t), index=1
  %one = s32[] constant(1)
  %next = s32[] add(s32[] %i.1, s32[] %one)
  %twice = f32[8,16]{1,0} add(f32[8,16]{1,0} %v, f32[8,16]{1,0} %v)
  ROOT %r = (s32[], f32[8,16]{1,0}) tuple(s32[] %next, f32[8,16]{1,0} %twice)
}

%less (x: f32[], y: f32[]) -> pred[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %cmp = pred[] compare(f32[] %x, f32[] %y), direction=LT
}

%fused_reduce (p: f32[8,16]) -> f32[8] {
  %p = f32[8,16]{1,0} parameter(0)
  %e = f32[8,16]{1,0} exponential(f32[8,16]{1,0} %p)
  %zero.1 = f32[] constant(0)
  ROOT %red.1 = f32[8]{0} reduce(f32[8,16]{1,0} %e, f32[] %zero.1), dimensions={1}, to_apply=%add
}

ENTRY %main (in: f32[8,16], n: s32[]) -> f32[8] {
  %in = f32[8,16]{1,0} parameter(0)
  %n = s32[] parameter(1)
  %zero = f32[] constant(0)
  %neg = f32[8,16]{1,0} negate(f32[8,16]{1,0} %in)
  %sq = f32[8,16]{1,0} multiply(f32[8,16]{1,0} %neg, f32[8,16]{1,0} %neg), control-predecessors={%zero}
  %sorted = f32[8,16]{1,0} sort(f32[8,16]{1,0} %sq), dimensions={1}, is_stable=true, to_apply=%less
  %init = (s32[], f32[8,16]{1,0}) tuple(s32[] %n, f32[8,16]{1,0} %sorted)
  %loop = (s32[], f32[8,16]{1,0}) while((s32[], f32[8,16]{1,0}) %init), condition=%cond, body=%body
  %out = f32[8,16]{1,0} get-tuple-element((s32[], f32[8,16]{1,0}) %loop), index=1
  %red = f32[8]{0} reduce(f32[8,16]{1,0} %out, f32[] %zero), dimensions={1}, to_apply=%add
  %fusion.7 = f32[8]{0} fusion(f32[8,16]{1,0} %out), kind=kInput, calls=%fused_reduce
  ROOT %sum = f32[8]{0} add(f32[8]{0} %red, f32[8]{0} %fusion.7)
}
"""


def _calls_module():
    return parse_module(CALLS, "calls.hlo")


def _calls_args():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 16)).astype(np.float32) * 0.1, np.int32(0)]


def _kmeans():
    path = KMEANS / "optimized_cpu.hlo"
    module = parse_module(path.read_text(), str(path))
    return module, literals.load_inputs(KMEANS / "inputs.npz", module)


def _inside(module, name: str, args):
    """(the values of ``name``'s operands, non-constant and each once, and of ``name``) as the
    whole module computes them: the module evaluated with ROOT a tuple of them."""
    m = clone_module(module)
    (inst,) = find_instructions(m, name)
    entry = inst.parent
    assert entry is m.entry, "the capture reads ENTRY's values"
    ops = list({id(o): o for o in inst.operands if o.opcode != "constant"}.values())
    leaves = [*ops, inst]
    capture = new_instruction("__capture", "tuple", Shape.tuple_of([v.shape for v in leaves]), leaves)
    capture.parent = entry
    entry.instructions.append(capture)
    entry.root = capture
    entry.rebuild_users()
    values = evaluate_module(m, args)
    return list(values[:-1]), values[-1]


def _same(a, b) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc":  # (the interpreter's sums may round apart with the operand's memory order)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
    else:
        np.testing.assert_array_equal(a, b)


def _roundtrip(extracted):
    """The extracted module as text, parsed back and verified (the parser verifies too)."""
    text = extracted.to_text()
    assert text.startswith("HloModule ")
    again = parse_module(text, "<extracted>")
    verify_module(again)
    assert again.to_text() == text
    return again


def _check_equal_inside(module, name: str, args, extract_name: str | None = None):
    operands, expected = _inside(module, name, args)
    again = _roundtrip(extract_instruction(module, extract_name or name, plan_of=fusions_plan))
    assert again.entry.root.name == name
    assert len(again.entry.parameters) == len(operands)
    _same(evaluate_module(again, operands), expected)
    return again


# ---- the library ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["iota_reduce_fusion.1", "reduce_reduce_fusion", "wrapped_reduce.1",
                                  "while.7", "%wrapped_reduce-window.2"])
def test_fusions_of_a_real_model_compute_what_they_did_inside_it(name):
    module, args = _kmeans()
    bare = name.lstrip("%")
    again = _check_equal_inside(module, bare, args, extract_name=name)
    original = find_instructions(module, bare)[0]
    assert again.entry.root.opcode == original.opcode
    # parameters named after the operands, with their shapes and layouts
    kept = [o for o in dict.fromkeys(original.operands) if o.opcode != "constant"]
    assert [(p.name, p.shape) for p in again.entry.parameters] == [(o.name, o.shape) for o in kept]
    # the header: a layout that matches the new ENTRY, nothing of the whole module's
    assert "allow_spmd_sharding_propagation" not in again.to_text().splitlines()[0]
    assert "is_scheduled" not in again.attributes


def test_a_while_brings_its_body_and_condition_and_what_they_call():
    module, args = _kmeans()
    again = _check_equal_inside(module, "while.7", args)
    w = again.entry.root
    names = {c.name for c in again.computations}
    assert {w.attr("body").name, w.attr("condition").name} <= names
    called = {c.name for c in again.computations if not c.is_entry}
    original = find_instructions(module, "while.7")[0]
    want = set()
    todo = list(original.called_computations())
    while todo:
        c = todo.pop()
        if c.name not in want:
            want.add(c.name)
            todo.extend(x for i in c.instructions for x in i.called_computations())
    assert called == want
    # each computation is the copy's own (nothing shared with the input module)
    assert all(c.parent is again for c in again.computations)


def test_reduce_sort_while_and_fusion_carry_their_computations():
    module = _calls_module()
    args = _calls_args()
    cases = {"red": {"add"}, "sorted": {"less"}, "loop": {"cond", "body"}, "fusion.7": {"fused_reduce", "add"}}
    for name, comps in cases.items():
        again = _check_equal_inside(module, name, args)
        assert {c.name for c in again.computations if not c.is_entry} == comps, name
        # callees are printed before their callers, ENTRY last
        assert again.computations[-1] is again.entry
        if name == "fusion.7":
            order = [c.name for c in again.computations]
            assert order.index("add") < order.index("fused_reduce")


def test_constants_stay_constants_and_a_repeated_operand_is_one_parameter():
    module = _calls_module()
    again = _roundtrip(extract_instruction(module, "red", plan_of=fusions_plan))
    assert [p.name for p in again.entry.parameters] == ["out"]
    assert again.entry.root.operands[1].opcode == "constant"
    again = _roundtrip(extract_instruction(module, "sq", plan_of=fusions_plan))
    assert [p.name for p in again.entry.parameters] == ["neg"]
    # its control predecessor is not in the new module: dropped
    assert "control-predecessors" not in again.entry.root.attributes
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    _same(evaluate_module(again, [x]), x * x)


def test_an_instruction_of_a_called_computation_and_a_parameter():
    module = _calls_module()
    again = _roundtrip(extract_instruction(module, "body/twice", plan_of=fusions_plan))
    assert again.entry.root.opcode == "add" and [p.name for p in again.entry.parameters] == ["v"]
    again = _roundtrip(extract_instruction(module, "in", plan_of=fusions_plan))
    assert again.entry.root.opcode == "parameter" and again.entry.root.parameter_number == 0


def test_a_kernel_name_resolves_through_the_plan():
    module, args = _kmeans()
    # iota_reduce_fusion.1's kernel is iota_reduce_fusion_1: the input's own fusion
    again = _check_equal_inside(module, "iota_reduce_fusion.1", args, extract_name="iota_reduce_fusion_1")
    assert again.entry.root.opcode == "fusion"
    # copy.12 is a copy in the input, wrapped as a fusion by our passes: the kernel's fusion
    again = _roundtrip(extract_instruction(module, "copy_12", plan_of=fusions_plan))
    assert again.entry.root.opcode == "fusion" and again.entry.root.name == "copy.12"
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    _same(evaluate_module(again, [x]), x)
    # gelu: kernel 'fusion' is the fusion %fusion
    gelu = parse_module(GELU.read_text(), str(GELU))
    assert _roundtrip(extract_instruction(gelu, "fusion", plan_of=fusions_plan)).entry.root.attr("calls").name == "fused_gelu"


def test_a_missing_name_lists_near_names():
    module, _ = _kmeans()
    with pytest.raises(ExtractError) as e:
        extract_instruction(module, "iota_reduce_fusn", plan_of=fusions_plan)
    message = e.value.message
    assert "no instruction or kernel named 'iota_reduce_fusn'" in message
    near = message.split("near names: ")[1].split(", ")
    assert 1 <= len(near) <= 10 and "iota_reduce_fusion.1" in near and "iota_reduce_fusion_1" in near
    assert "\n" not in message


def test_an_ambiguous_name_asks_for_its_computation():
    module = _calls_module()
    text = CALLS.replace("%e = f32[8,16]{1,0} exponential(f32[8,16]{1,0} %p)",
                         "%neg = f32[8,16]{1,0} exponential(f32[8,16]{1,0} %p)").replace(
        "reduce(f32[8,16]{1,0} %e,", "reduce(f32[8,16]{1,0} %neg,")
    module = parse_module(text, "dup.hlo")
    with pytest.raises(ExtractError, match="COMPUTATION/NAME") as e:
        extract_instruction(module, "neg", plan_of=fusions_plan)
    assert "main/neg" in e.value.message and "fused_reduce/neg" in e.value.message
    assert _roundtrip(extract_instruction(module, "fused_reduce/neg", plan_of=fusions_plan)).entry.root.opcode == "exponential"


# ---- the command line -----------------------------------------------------------------------------

def _invoke(*args):
    return CliRunner().invoke(compile_main, [str(a) for a in args], catch_exceptions=False)


def test_cli_extract_prints_or_writes_the_module(tmp_path):
    path = KMEANS / "optimized_cpu.hlo"
    r = _invoke(path, "--extract=wrapped_reduce.1")
    assert r.exit_code == 0, r.output
    again = parse_module(r.output, "<stdout>")
    assert again.entry.root.name == "wrapped_reduce.1" and again.entry.root.opcode == "fusion"
    out = tmp_path / "one.hlo"
    r = _invoke(path, "--extract", "iota_reduce_fusion_1", "-o", out)
    assert r.exit_code == 0 and r.output == ""
    assert parse_module(out.read_text(), str(out)).entry.root.name == "iota_reduce_fusion.1"
    # the extracted module compiles on its own
    r = _invoke(out, "--emit=fusions", "--no-cache", "-q")
    assert r.exit_code == 0 and r.output.count("-> kernel") == 1


def test_cli_extract_errors_are_one_line_exit_2():
    path = KMEANS / "optimized_cpu.hlo"
    r = _invoke(path, "--extract=iota_reduce_fusn")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert r.output.startswith("hlo-compile: error: no instruction or kernel named") and "near names:" in r.output
    r = _invoke(path, "--extract=while.7", "--emit=ptx")
    assert r.exit_code == 2 and "--fusion=NAME" in r.output and r.output.count("\n") == 1
    r = _invoke(path, "--extract=while.7", "--fusion=wrapped_reduce.1", "--emit=fusions")
    assert r.exit_code == 2 and "cannot be combined" in r.output


def test_cli_fusion_limits_each_stage_to_one_kernel():
    path = KMEANS / "optimized_cpu.hlo"
    r = _invoke(path, "--fusion=iota_reduce_fusion_1", "--emit=fusions", "--no-cache", "-q")
    assert r.exit_code == 0, r.output
    assert r.output.count("-> kernel") == 1 and "fusion %iota_reduce_fusion.1 -> kernel iota_reduce_fusion_1" \
        in r.output and r.output.startswith("// device:")
    # a fusion that launches another's kernel: its own block
    r = _invoke(path, "--fusion=%iota_reduce_fusion", "--emit=fusions", "--no-cache", "-q")
    assert r.exit_code == 0 and "(reuses the kernel of %iota_reduce_fusion.1)" in r.output
    r = _invoke(path, "--fusion=wrapped_reduce.1", "--emit=indexing", "-q")
    assert r.exit_code == 0 and r.output.startswith("wrapped_reduce.1 = fusion\n")
    assert r.output.count(" = ") == 1
    r = _invoke(path, "--fusion=wrapped_reduce.1", "--emit=llvm", "--no-cache", "-q")
    assert r.exit_code == 0 and r.output.count("define ptx_kernel void @") == 1 and "@wrapped_reduce_1(" in r.output
    r = _invoke(path, "--fusion=wrapped_reduce_1", "--emit=ptx", "--no-cache", "-q")
    assert r.exit_code == 0 and r.output.count(".entry ") == 1 and ".entry wrapped_reduce_1(" in r.output
    # a fusion reusing another's kernel: that kernel
    r = _invoke(path, "--fusion=iota_reduce_fusion", "--emit=llvm", "--no-cache", "-q")
    assert r.exit_code == 0 and r.output.count("define ptx_kernel void @") == 1 and "@iota_reduce_fusion_1(" in r.output


def test_cli_fusion_errors_and_the_boolean_flag_still_works():
    path = KMEANS / "optimized_cpu.hlo"
    r = _invoke(path, "--fusion=wrapped_reduce.1")
    assert r.exit_code == 2 and "needs --emit=" in r.output and "--extract" in r.output
    r = _invoke(path, "--fusion=nope_fusion", "--emit=fusions", "--no-cache", "-q")
    assert r.exit_code == 2 and "no fusion or kernel named 'nope_fusion'" in r.output and r.output.count("\n") == 1
    r = _invoke(GELU, "--fusion=fusion", "--emit=fusions", "--no-fusion", "--no-cache", "-q")
    assert r.exit_code == 0 and r.output.count("-> kernel") == 1
    r = _invoke(GELU, "--emit=fusions", "--fusion", "--no-cache", "-q")
    assert r.exit_code == 0 and r.output.count("-> kernel") == 1
