"""The differential fuzzer on SPMD modules (``FuzzConfig.spmd``, ``--spmd``): collectives on R x P
participants, the interpreter's ``evaluate_spmd`` against the host's SPMD run participant by
participant; and regressions of what its campaigns found."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.fuzz import FuzzConfig, generate
from hlo_compile.fuzz.campaign import run_campaign
from hlo_compile.fuzz.inputs import make_inputs
from hlo_compile.fuzz.runner import run_case
from hlo_compile.hlo.collective_groups import World, participant_groups, world_of
from hlo_compile.interpreter.evaluator import evaluate_spmd
from hlo_compile.driver.runnable import reduction_kind

SPMD = FuzzConfig(spmd=True, max_ops=8)
FORMS = ("all-reduce(", "all-reduce-start(", "all-gather(", "all-gather-start(", "reduce-scatter(",
         "reduce-scatter-start(", "all-to-all(", "all-to-all-start(", "collective-permute(",
         "collective-permute-start(", "collective-broadcast(", "partition-id(", "replica-id(")


def test_spmd_modules_verify_and_cover_every_collective_form():
    seen, worlds, groups = set(), set(), set()
    for seed in range(120):
        g = generate(seed, SPMD)          # parsed and verified by our front end, or GeneratorError
        m = parse_module(g.text)
        w = world_of(m)
        assert w.size in (2, 4, 8), g.text.splitlines()[0]
        worlds.add((w.replicas, w.partitions))
        seen |= {f for f in FORMS if " " + f in g.text}
        for inst in m.entry.instructions:
            if "replica_groups" in inst.attributes:
                participant_groups(inst, w)   # covers every participant exactly once, or raises
                raw = inst.attributes["replica_groups"].raw
                groups.add("mesh" if raw.startswith("mesh") else "iota" if "<=" in raw else "explicit")
            if inst.opcode in ("all-reduce", "all-reduce-start", "reduce-scatter"):
                assert reduction_kind(inst) is not None, inst.name   # one of XLA's reduction kinds
    assert seen == set(FORMS), set(FORMS) - seen
    assert len(worlds) >= 6 and groups == {"mesh", "iota", "explicit"}
    # single-device modules never draw collectives
    assert not any(" all-reduce(" in generate(s).text or "num_partitions" in generate(s).text for s in range(20))


def test_every_participant_gets_its_own_inputs():
    text = "HloModule m, num_partitions=4\nENTRY e {\n  x = f32[16]{0} parameter(0)\n  ROOT c = f32[16]{0} copy(x)\n}\n"
    m = parse_module(text)
    args = [make_inputs(m, 7, participant=k)[0] for k in range(4)]
    assert all(not np.array_equal(args[i], args[j]) for i in range(4) for j in range(i))
    assert np.array_equal(make_inputs(m, 7, participant=2)[0], args[2])  # deterministic


@pytest.mark.slow
def test_small_spmd_campaign_has_no_mismatch():
    report = run_campaign(20, seed=500, jobs=2, cfg=SPMD, shrink=0, log=lambda s: None, timeout=300)
    assert report.count == 20 and not report.invalid, report.summary()
    assert report.mismatches == 0 and report.crashes == 0, report.summary()
    assert report.outcomes[("fusion", "match")] + report.outcomes[("no-fusion", "match")] >= 30, report.summary()
    assert sum(n for op, n in report.ops.items() if op in ("all-reduce", "all-gather", "reduce-scatter",
                                                           "all-to-all", "collective-permute")) >= 10


GATHER = """HloModule m, replica_count=2, num_partitions=2

ENTRY e {
  x = s32[2,3]{0,1} parameter(0)
  ROOT g = s32[4,3]{1,0} all-gather(x), channel_id=1, use_global_device_ids=true, replica_groups={{3,0},{2,1}},
      dimensions={0}
}
"""


def test_a_wrong_peer_in_the_host_is_a_mismatch(monkeypatch):
    """The comparison sees a host that gathers in id order instead of rank order."""
    assert run_case(GATHER, 3).outcomes[0].status == "match"
    import hlo_compile.runtime.collective_steps as cs
    real = cs.group_of
    monkeypatch.setattr(cs, "group_of", lambda groups, me: sorted(real(groups, me)))
    res = run_case(GATHER, 3, modes=("no-fusion",))
    assert res.outcomes[0].status == "mismatch", res.outcomes[0]
    assert "participant 0" in res.outcomes[0].detail and "participant 1" in res.outcomes[0].detail


ADD_F32 = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"


def test_variadic_all_reduce_start_of_two_shapes():
    """all-reduce-start's shape is its result's (a tuple of both), not (operands, result): the
    interpreter read element 1 as the result and refused operands of different shapes."""
    text = (f"HloModule m, replica_count=2\n\n{ADD_F32}\nENTRY e {{\n  x = f32[3]{{0}} parameter(0)\n"
            "  y = f32[2,2]{0,1} parameter(1)\n"
            "  s = (f32[3]{0}, f32[2,2]{1,0}) all-reduce-start(x, y), replica_groups={}, to_apply=add\n"
            "  ROOT d = (f32[3]{0}, f32[2,2]{1,0}) all-reduce-done(s)\n}\n")
    m = parse_module(text)
    args = [[np.arange(3, dtype=np.float32) + 10 * k, np.full((2, 2), k + 1, np.float32)] for k in range(2)]
    out = evaluate_spmd(m, lambda k: args[k], World(2, 1))
    for k in range(2):
        np.testing.assert_array_equal(out[k][0], args[0][0] + args[1][0])
        np.testing.assert_array_equal(out[k][1], np.full((2, 2), 3, np.float32))
    res = run_case(text, 0)
    assert [o.status for o in res.outcomes] == ["match", "match"], res.outcomes


def _and_module(et: str) -> str:
    return (f"HloModule m, replica_count=2\n\nand_{et} {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n"
            f"  ROOT r = {et}[] and(a, b)\n}}\n\nENTRY e {{\n  x = {et}[4]{{0}} parameter(0)\n"
            f"  ROOT r = {et}[4]{{0}} all-reduce(x), replica_groups={{{{0,1}}}}, to_apply=and_{et}\n}}\n")


@pytest.mark.parametrize("cli,flags", [("run", ["--platform=host"]), ("compile", ["--emit=llvm"])])
def test_all_reduce_and_of_integers_is_refused(tmp_path, cli, flags):
    """XLA reduces and/or of pred only (MatchReductionInstruction: as min/max); of integers they
    are bitwise, and the host computed a logical and (6 & 3 gave 1, not 2): now refused by name."""
    path = tmp_path / "m.hlo"
    path.write_text(_and_module("s32"))
    res = subprocess.run([sys.executable, "-m", f"hlo_compile.cli.{cli}", str(path)] + flags,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "all-reduce '%r' (line 11)" in res.stderr and "and, or of pred" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_all_reduce_and_of_pred_runs():
    res = run_case(_and_module("pred"), 4)
    assert [o.status for o in res.outcomes] == ["match", "match"], res.outcomes
    m = parse_module(_and_module("pred"))
    args = [make_inputs(m, 4, participant=k) for k in range(2)]
    out = evaluate_spmd(m, lambda k: args[k], World(2, 1))
    np.testing.assert_array_equal(out[0], args[0][0] & args[1][0])


def test_cli_replays_an_spmd_module(capsys):
    from hlo_compile.fuzz.__main__ import main
    assert main(["--spmd", "--replay", "3", "--modes", "no-fusion"]) == 0
    out = capsys.readouterr().out
    assert "num_partitions=" in out and "no-fusion: match" in out


XLA_MODULE = """HloModule m, replica_count=2, num_partitions=2

add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY e {
  x = s32[4,2]{0,1} parameter(0)
  ar = s32[4,2]{1,0} all-reduce(x), channel_id=1, use_global_device_ids=true, replica_groups={{0,3},{1,2}}, to_apply=add
  ag = s32[8,2]{1,0} all-gather(x), replica_groups=mesh['r'=2] {'r'}, dimensions={0}
  a2a = s32[4,2]{1,0} all-to-all(x), channel_id=2, replica_groups=[1,2]<=[2], dimensions={0}
  cp = s32[4,2]{1,0} collective-permute(x), channel_id=3, source_target_pairs={{1,0}}
  pid = u32[] partition-id()
  rid = u32[] replica-id()
  ROOT t = (s32[4,2]{1,0}, s32[8,2]{1,0}, s32[4,2]{1,0}, s32[4,2]{1,0}, u32[], u32[]) tuple(ar, ag, a2a, cp, pid, rid)
}
"""


def test_xla_cpu_runs_every_participant(tmp_path):
    """--spmd --xla: XLA:CPU with a device per participant (sharding={manual}: no partitioner) gives
    every participant's results, which equal the interpreter's."""
    pytest.importorskip("jax")
    path = tmp_path / "m.hlo"
    path.write_text(XLA_MODULE)
    res = subprocess.run([sys.executable, "-m", "hlo_compile.fuzz", "--check", str(path), "--xla", "--modes",
                          "no-fusion"], capture_output=True, text=True, timeout=300)
    if "xla_ref.py not found" in res.stdout:
        pytest.skip("no xla_ref.py")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no-fusion: match" in res.stdout and "xla: xla-match" in res.stdout, res.stdout


def test_manual_sharding_marks_tuples_per_leaf():
    from hlo_compile.fuzz.xla_spmd import manual_sharding
    text = manual_sharding(XLA_MODULE)
    assert "tuple(ar, ag, a2a, cp, pid, rid), sharding={" + ", ".join(["{manual}"] * 6) + "}" in text
    assert "partition-id(), sharding={manual}" in text and "HloModule m, replica_count=2" in text
