"""Annotation custom calls (``hlo/calls/annotation.py``): placement and layout annotations and the
SPMD partitioner's on one participant are the identity, compiled as copies; a partitioner
annotation on several participants is refused by name, by the interpreter and by hlo-compile."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.interpreter.evaluator import evaluate_spmd
from hlo_compile.passes import run_passes
from hlo_compile.runtime.executable import compile_executable

MODULE = """HloModule offload{header}

ENTRY main {{
  x = f32[8,16]{{1,0}} parameter(0)
  y = f32[8,16]{{1,0}} parameter(1)
  m = f32[8,16]{{1,0}} multiply(x, y)
  host = f32[8,16]{{1,0}} custom-call(m), custom_call_target="MoveToHost"
  back = f32[8,16]{{1,0}} custom-call(host), custom_call_target="MoveToDevice"
  s = f32[8,16]{{1,0}} custom-call(back), custom_call_target="Sharding", sharding={{devices=[2,1]<=[2]}}
  t = f32[8,16]{{0,1}} custom-call(s), custom_call_target="LayoutConstraint"
  ROOT a = f32[8,16]{{0,1}} add(t, x)
}}
"""


def _args():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 16), dtype=np.float32) for _ in range(2)]


def test_annotations_are_the_identity_on_host_and_interpreter():
    module = parse_module(MODULE.format(header=""))
    x, y = _args()
    want = x * y + x
    np.testing.assert_array_equal(evaluate_module(module, [x, y]), want)
    np.testing.assert_allclose(compile_executable(module, "host").run([x, y]), want, rtol=1e-6)


def test_annotations_compile_to_copies():
    out = run_passes(parse_module(MODULE.format(header="")))
    text = out.to_text()
    assert "custom-call" not in text and "MoveToHost" not in text
    assert "copy(" in text


def test_partitioner_annotation_on_several_participants_is_refused():
    module = parse_module(MODULE.format(header=", num_partitions=2"))
    with pytest.raises(HloUnsupportedError, match=r"%s.*line 9.*Sharding.*SPMD partitioner.*2 participants"):
        run_passes(module)
    with pytest.raises(HloUnsupportedError, match=r"%s.*Sharding.*before partitioning"):
        evaluate_spmd(module, _args())


def test_hlo_compile_refuses_it_with_exit_2(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(MODULE.format(header=", num_partitions=2"))
    r = subprocess.run([sys.executable, "-m", "hlo_compile.cli.compile", str(path), "--emit=llvm"],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out and "%s" in out and "Sharding" in out, out


def test_a_shape_changing_annotation_is_not_the_identity():
    text = MODULE.format(header="").replace(
        'back = f32[8,16]{1,0} custom-call(host), custom_call_target="MoveToDevice"',
        'back = f32[8,16]{1,0} custom-call(host), custom_call_target="MoveToDevice"\n'
        '  odd = f32[16,8]{1,0} custom-call(host), custom_call_target="MoveToDevice"')
    module = parse_module(text)
    with pytest.raises(HloUnsupportedError, match="odd"):
        compile_executable(module, "host")
