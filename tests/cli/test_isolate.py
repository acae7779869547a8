"""hlo-run --isolate=NAME and --isolate-instructions (hlo_compile/cli/isolate.py), and the messages
that name what the user wrote: a custom call's target, the flag giving an SPMD run its
participants, the user's instruction behind one our passes made."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile.cli.compile import main as compile_main
from hlo_compile.cli.run import main as run_main
from hlo_compile.hlo import parse_module
from hlo_compile.hlo.extract import find_instructions
from hlo_compile.hlo.ir import clone_module
from hlo_compile.hlo.rewrite import new_instruction
from hlo_compile.hlo.shape import Shape
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime import literals

ROOT = Path(__file__).resolve().parents[2]
KMEANS = ROOT / "tests" / "data" / "models" / "lax_while_kmeans"
MODEL = KMEANS / "optimized_cpu.hlo"

SMALL = """HloModule small

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[8,4] parameter(0)
  p1 = f32[8,4] parameter(1)
  m = f32[8,4] multiply(p0, p1)
  m2 = f32[8,4] multiply(p1, p0)
  e = f32[8,4] exponential(m)
  z = f32[] constant(0)
  r = f32[8] reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[8], f32[8,4]) tuple(r, m2)
}
"""

CUSTOM_CALL = """HloModule cc

ENTRY main {
  p = f32[4] parameter(0)
  n = f32[4] negate(p)
  %custom-call.4.0 = f32[4] custom-call(n), custom_call_target="my_secret_kernel"
  ROOT e = f32[4] exponential(%custom-call.4.0)
}
"""

ASYNC_CUSTOM_CALL = """HloModule ccs

ENTRY main {
  p = f32[4] parameter(0)
  start1 = ((f32[4]), f32[4], u32[]) custom-call-start(p), custom_call_target="my_secret_kernel"
  ROOT done1 = f32[4] custom-call-done(start1)
}
"""

ALL_REDUCE = """HloModule ar

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(p), REPLICA_GROUPS, to_apply=add
}
"""


def _invoke(main, *args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _host():
    pytest.importorskip("llvmlite")


def _write(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _entry_values(module, names: list[str], args) -> list:
    """The values ENTRY's instructions ``names`` take in a run of ``module`` (ROOT made a tuple of them)."""
    m = clone_module(module)
    leaves = [find_instructions(m, n)[0] for n in names]
    entry = m.entry
    capture = new_instruction("__capture", "tuple", Shape.tuple_of([v.shape for v in leaves]), leaves)
    capture.parent = entry
    entry.instructions.append(capture)
    entry.root = capture
    entry.rebuild_users()
    return list(evaluate_module(m, args))


# ---- --isolate=NAME -------------------------------------------------------------------------------

def test_isolate_a_fusion_matches_and_its_inputs_reproduce_the_run(tmp_path):
    _host()
    dump = tmp_path / "dump"
    out = tmp_path / "isolated_out.npz"
    r = _invoke(run_main, MODEL, "--isolate=wrapped_reduce.1", "--platform=host", "--input-literals",
                KMEANS / "inputs.npz", "--dump-to", dump, "--output-literals", out)
    assert r.exit_code == 0, r.output
    assert "results match the interpreter reference" in r.output
    saved = dump / "inputs.npz"
    assert f"saved to {saved}" in r.output and "arg0 = %wrapped_reduce-window.2" in r.output
    # the operand is what the whole module computes there
    module = parse_module(MODEL.read_text(), str(MODEL))
    (want,) = _entry_values(module, ["wrapped_reduce-window.2"], literals.load_inputs(KMEANS / "inputs.npz", module))
    with np.load(saved) as f:
        assert sorted(f.files) == ["arg0"]
        np.testing.assert_array_equal(f["arg0"], want)
    # hlo-compile --extract, then hlo-run on the saved inputs: the same run
    extracted = tmp_path / "extracted.hlo"
    assert _invoke(compile_main, MODEL, "--extract=wrapped_reduce.1", "-o", extracted).exit_code == 0
    again = tmp_path / "again_out.npz"
    r = _invoke(run_main, extracted, "--platform=host", "--input-literals", saved, "--output-literals", again)
    assert r.exit_code == 0 and "results match the interpreter reference" in r.output, r.output
    with np.load(out) as a, np.load(again) as b:
        assert a.files == b.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])


def test_isolate_in_a_loop_body_takes_the_first_execution_and_writes_to_the_current_directory(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke(run_main, MODEL, "--isolate=multiply_select_fusion", "--input-literals", KMEANS / "inputs.npz")
    assert r.exit_code == 0, r.output
    assert "in computation region_2.8 at its first execution" in r.output
    with np.load(tmp_path / "inputs.npz") as f:
        assert [f[f"arg{k}"].shape for k in range(4)] == [(4, 2), (4, 2), (4,), (4,)]
    # the first iteration reads the loop's initial centroids: ENTRY's copy of the input
    module = parse_module(MODEL.read_text(), str(MODEL))
    args = literals.load_inputs(KMEANS / "inputs.npz", module)
    (init,) = _entry_values(module, ["tuple.2"], args)
    with np.load(tmp_path / "inputs.npz") as f:
        np.testing.assert_array_equal(f["arg0"], init[0])


def test_isolate_a_kernel_name_and_an_instruction_of_a_fused_computation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke(run_main, MODEL, "--isolate=iota_reduce_fusion_1")
    assert r.exit_code == 0 and "fusion '%iota_reduce_fusion.1'" in r.output, r.output
    r = _invoke(run_main, MODEL, "--isolate=max.0")
    assert r.exit_code == 0 and "in computation fused_computation.2" in r.output, r.output
    # a fusion our passes made around a lone instruction: captured after the passes
    r = _invoke(run_main, MODEL, "--isolate=copy_12")
    assert r.exit_code == 0 and "in the module after our passes" in r.output, r.output
    assert "--extract=copy_12 " in r.output
    r = _invoke(run_main, MODEL, "--isolate=%constant.23")  # no operand: nothing to capture
    assert r.exit_code == 0, r.output
    r = _invoke(run_main, MODEL, "--isolate=region_2.8/arg_tuple.1")
    assert r.exit_code == 2 and "is an input" in r.output


def test_isolate_a_wrong_name_lists_near_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke(run_main, MODEL, "--isolate=iota_reduce_fusn")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "no instruction or kernel named 'iota_reduce_fusn'" in r.output
    assert "near names: iota_reduce_fusion" in r.output
    assert not (tmp_path / "inputs.npz").exists()


def test_isolate_refuses_a_reducer_instruction_and_bad_combinations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke(run_main, MODEL, "--isolate=region_4.7/reduce_sum.19")
    assert r.exit_code == 2 and "isolate '%reduce_sum.9' instead" in r.output, r.output
    small = _write(tmp_path, "small.hlo", SMALL)
    r = _invoke(run_main, small, "--isolate=m", "--isolate-instructions")
    assert r.exit_code == 2 and "exclude each other" in r.output
    r = _invoke(run_main, small, "--isolate_instructions", "--input-literals", KMEANS / "inputs.npz")
    assert r.exit_code == 2 and "generated inputs" in r.output


# ---- --isolate-instructions -----------------------------------------------------------------------

def test_isolate_instructions_gives_a_verdict_per_instruction(tmp_path):
    _host()
    small = _write(tmp_path, "small.hlo", SMALL)
    r = _invoke(run_main, small, "--platform=host", "--isolate_instructions=true")
    assert r.exit_code == 0, r.output
    lines = [ln.split() for ln in r.output.splitlines() if ln.startswith("  %")]
    # parameters, constants and tuples are not run alone; m2 is m again (XLA's deduplication)
    assert [(ln[0], ln[-1]) for ln in lines] == [("%m", "matched"), ("%m2", "%m"), ("%e", "matched"),
                                                 ("%r", "matched")]
    assert "3 matched, 1 same as an earlier one" in r.output


def test_isolate_instructions_names_the_first_mismatch_with_its_line(tmp_path, monkeypatch):
    import hlo_compile.cli.run as run_mod
    real = run_mod._runner

    def skewed(platform, module, seed, **kw):
        run = real("interpreter", module, seed)
        return lambda args: run(args) + 1 if module.entry.root.opcode == "exponential" else run(args)
    monkeypatch.setattr(run_mod, "_runner", skewed)
    monkeypatch.setattr(run_mod, "_is_own_reference", lambda platform, reference: False)
    small = _write(tmp_path, "small.hlo", SMALL)
    r = _invoke(run_main, small, "--platform=interpreter", "--isolate-instructions")
    assert r.exit_code == 1, r.output
    assert "first failing instruction: exponential '%e' (line 14): mismatch" in r.output
    assert "worst elements" in r.output  # its report
    # a mismatch lets the others run
    assert [ln.split()[-1] for ln in r.output.splitlines() if ln.startswith("  %")] == \
        ["matched", "%m", "mismatch", "matched"]


def test_isolate_instructions_stops_at_the_first_error(tmp_path):
    _host()
    path = _write(tmp_path, "cc.hlo", CUSTOM_CALL)
    r = _invoke(run_main, path, "--platform=host", "--isolate-instructions")
    assert r.exit_code == 2, r.output
    assert [ln.split()[-1] for ln in r.output.splitlines() if ln.startswith("  %")] == \
        ["matched", "error", "run"]  # "didn't run"
    assert "first failing instruction: custom-call '%custom-call.4.0' (line 6): error" in r.output
    assert "did not run" in r.output


# ---- messages ---------------------------------------------------------------------------------------

def test_a_custom_call_no_platform_runs_names_its_target(tmp_path):
    _host()
    path = _write(tmp_path, "cc.hlo", CUSTOM_CALL)
    r = _invoke(run_main, path, "--platform=host")
    assert r.exit_code == 2
    assert ("no platform can run custom-call '%custom-call.4.0' (line 6), custom_call_target=\"my_secret_kernel\": "
            "only") in r.output, r.output


def test_a_wrong_participant_count_suggests_the_flag(tmp_path):
    path = _write(tmp_path, "ar.hlo", ALL_REDUCE.replace("REPLICA_GROUPS", "replica_groups={{0,1,2,3}}"))
    r = _invoke(run_main, path)
    assert r.exit_code == 2 and "run it with --num-replicas 4" in r.output, r.output
    r = _invoke(run_main, path, "--num-replicas", 8)
    assert r.exit_code == 2 and "do not cover each of the 8 participants" in r.output
    assert "run it with --num-replicas 4" in r.output
    assert _invoke(run_main, path, "--num-replicas", 4).exit_code == 0
    # flattened ids over 2 partitions: replicas x 2 = 4
    path = _write(tmp_path, "af.hlo", ALL_REDUCE.replace(
        "REPLICA_GROUPS", "channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true").replace(
        "HloModule ar", "HloModule af, num_partitions=2"))
    r = _invoke(run_main, path)
    assert r.exit_code == 2 and "run it with --num-replicas 2 --num-partitions 2" in r.output, r.output


def test_an_instruction_our_passes_made_names_the_users_instruction(tmp_path):
    _host()
    path = _write(tmp_path, "ccs.hlo", ASYNC_CUSTOM_CALL)
    r = _invoke(run_main, path, "--platform=host")
    assert r.exit_code == 2
    assert "custom-call '%wrapped_start1'" in r.output and "made from the input's '%start1'" in r.output, r.output
    assert 'custom_call_target="my_secret_kernel"' in r.output
