"""Collectives are run with their one-device meaning only where that is XLA's meaning (one
participant); an SPMD module is refused, naming the instruction, never run as if it were alone.
And ``hlo-compile`` refuses what no runtime step runs instead of dropping it."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.hlo.collective_groups import World, world_of
from hlo_compile.runtime.program import STEP_BUILDERS, STEP_TYPES
from hlo_compile.driver.runnable import RUNNABLE_OPCODES, STEP_KINDS

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _module(header: str, body: str) -> str:
    return f"HloModule m{header}\n\n{ADD}\nENTRY main {{\n  x = f32[8]{{0}} parameter(0)\n{body}\n}}\n"


SPMD_OPS = {
    "all-reduce": "  ROOT r = f32[8]{0} all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, "
                  "use_global_device_ids=true, to_apply=add",
    "all-gather": "  ROOT r = f32[32]{0} all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
                  "use_global_device_ids=true",
    "collective-permute": "  ROOT r = f32[8]{0} collective-permute(x), channel_id=1, "
                          "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}",
    "partition-id": "  ROOT r = u32[] partition-id()",
    "all-reduce-start": "  s = f32[8]{0} all-reduce-start(x), channel_id=1, replica_groups={{0,1,2,3}}, "
                        "use_global_device_ids=true, to_apply=add\n  ROOT r = f32[8]{0} all-reduce-done(s)",
}


@pytest.mark.parametrize("op", sorted(SPMD_OPS))
def test_spmd_module_is_not_run_as_one_device(op):
    """evaluate_module is the one-participant entry point: an SPMD module goes to evaluate_spmd."""
    text = _module(", num_partitions=4", SPMD_OPS[op])
    with pytest.raises(HloUnsupportedError, match="4 participants"):
        evaluate_module(parse_module(text), [np.arange(8, dtype=np.float32)])


def test_groups_naming_other_participants_are_refused_without_a_header():
    text = _module("", "  ROOT r = f32[8]{0} all-reduce(x), replica_groups={{0,1}}, to_apply=add")
    with pytest.raises(HloUnsupportedError, match="name id 1") as info:
        evaluate_module(parse_module(text), [np.arange(8, dtype=np.float32)])
    assert "all-reduce '%r'" in info.value.message and info.value.location.line == 11


def test_one_participant_keeps_the_one_device_meaning():
    text = _module(", replica_count=1", "  ROOT r = f32[8]{0} all-reduce(x), replica_groups={{0}}, to_apply=add")
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(evaluate_module(parse_module(text), [x]), x)
    pid = _module("", "  ROOT r = u32[] partition-id()")
    assert int(evaluate_module(parse_module(pid), [x])) == 0
    permute = _module("", "  ROOT r = f32[8]{0} collective-permute(x), source_target_pairs={{0,0}}")
    np.testing.assert_array_equal(evaluate_module(parse_module(permute), [x]), x)
    nobody = _module("", "  ROOT r = f32[8]{0} collective-permute(x), source_target_pairs={}")
    np.testing.assert_array_equal(evaluate_module(parse_module(nobody), [x]), np.zeros(8, np.float32))


def test_participants_are_counted_from_the_header():
    m = parse_module(_module(", replica_count=2, num_partitions=4", "  ROOT r = u32[] replica-id()"))
    assert world_of(m).size == 8 and world_of(m, 3, None) == World(3, 4)


def test_runtime_steps_and_the_compile_check_agree():
    # one list of opcodes (runnable.STEP_KINDS): every kind it names has a builder, and no
    # builder is left without an opcode
    assert set(STEP_KINDS.values()) == set(STEP_BUILDERS)
    assert set(STEP_TYPES) == set(RUNNABLE_OPCODES) == set(STEP_KINDS)


@pytest.mark.parametrize("tool", ["hlo-compile", "hlo-run"])
def test_cli_refuses_what_no_step_runs(tool, tmp_path):
    path = tmp_path / "spmd.hlo"
    path.write_text(_module(", num_partitions=4", "  a = f32[8]{0} add(x, x)\n  t = token[] after-all()\n"
                    "  ROOT r = f32[8]{0} add-dependency(a, t)"))
    args = [str(path), "--dump-to", str(tmp_path / "out")] if tool == "hlo-compile" else [str(path), "--platform=host"]
    module = "hlo_compile.cli.compile" if tool == "hlo-compile" else "hlo_compile.cli.run"
    res = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "add-dependency '%r'" in res.stderr and "line 13" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
