"""The batch-norm expander (``passes/batch_norm_expander.py``, XLA's BatchNormExpander) and the
interpreter's own batch-norm ops (``interpreter/batch_norm.py``) that check it: the three ops
leave the module, the host runs the expansion and matches the interpreter (f32, bf16, feature
dimension first, last and in a non-default layout), the interpreter matches XLA:CPU where jax is
importable, and operands XLA's shape inference refuses are refused by name."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from xla_reference import xla_ref_module

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as hlo_compile
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes import run_passes
from hlo_compile.passes.batch_norm_expander import BATCH_NORM_OPS, expand_batch_norms
from hlo_compile.runtime import literals

from codegen_helpers import run_on_host

MODULE = """HloModule bn_mix

ENTRY main {
  x = f32[4,6,5,8]{3,2,1,0} parameter(0)
  scale = f32[8]{0} parameter(1)
  offset = f32[8]{0} parameter(2)
  dy = f32[4,6,5,8]{3,2,1,0} parameter(3)
  s6 = f32[6]{0} parameter(4)
  o6 = f32[6]{0} parameter(5)
  xb = bf16[4,6,5,8]{3,2,1,0} convert(x)
  sb = bf16[8]{0} convert(scale)
  ob = bf16[8]{0} convert(offset)
  t = (f32[4,6,5,8]{3,2,1,0}, f32[8]{0}, f32[8]{0}) batch-norm-training(x, scale, offset), epsilon=1e-05, feature_index=3
  y = f32[4,6,5,8]{3,2,1,0} get-tuple-element(t), index=0
  m = f32[8]{0} get-tuple-element(t), index=1
  v = f32[8]{0} get-tuple-element(t), index=2
  g = (f32[4,6,5,8]{3,2,1,0}, f32[8]{0}, f32[8]{0}) batch-norm-grad(x, scale, m, v, dy), epsilon=1e-05, feature_index=3
  bi = f32[4,6,5,8]{3,2,1,0} batch-norm-inference(x, scale, offset, m, v), epsilon=0.001, feature_index=3
  tb = (bf16[4,6,5,8]{3,2,1,0}, bf16[8]{0}, bf16[8]{0}) batch-norm-training(xb, sb, ob), epsilon=0.001, feature_index=3
  x1 = f32[4,6,5,8]{1,3,2,0} copy(x)
  t1 = (f32[4,6,5,8]{1,3,2,0}, f32[6]{0}, f32[6]{0}) batch-norm-training(x1, s6, o6), epsilon=0.001, feature_index=1
  ROOT r = (f32[4,6,5,8]{3,2,1,0}, f32[8]{0}, f32[8]{0}, (f32[4,6,5,8]{3,2,1,0}, f32[8]{0}, f32[8]{0}), f32[4,6,5,8]{3,2,1,0}, (bf16[4,6,5,8]{3,2,1,0}, bf16[8]{0}, bf16[8]{0}), (f32[4,6,5,8]{1,3,2,0}, f32[6]{0}, f32[6]{0})) tuple(y, m, v, g, bi, tb, t1)
}
"""


def _inputs() -> list[np.ndarray]:
    r = np.random.default_rng(0)
    return [r.normal(1, 2, (4, 6, 5, 8)).astype(np.float32), r.normal(1, .5, 8).astype(np.float32),
            r.normal(0, .5, 8).astype(np.float32), r.normal(0, 1, (4, 6, 5, 8)).astype(np.float32),
            r.normal(1, .5, 6).astype(np.float32), r.normal(0, .5, 6).astype(np.float32)]


def _ops(module) -> list[str]:
    return [i.opcode for c in module.computations for i in c.instructions]


def test_the_expander_leaves_no_batch_norm_op():
    module = parse_module(MODULE)
    assert sum(op in BATCH_NORM_OPS for op in _ops(module)) == 5
    expanded = expand_batch_norms(parse_module(MODULE))
    ops = _ops(expanded)
    assert not set(ops) & set(BATCH_NORM_OPS)
    assert ops.count("reduce") == 2 * 3 + 2 and "rsqrt" in ops  # sum and sum of squares per training, two per grad
    after = run_passes(parse_module(MODULE), arch="sm_90")
    assert not set(_ops(after)) & set(BATCH_NORM_OPS)


def test_statistics_follow_the_definition():
    """The interpreter's training statistics are the biased mean and variance over every
    dimension but the feature one; inference with them normalises; grad's offset gradient is
    the sum of dy."""
    args = _inputs()
    out = literals.flatten(evaluate_module(parse_module(MODULE), args))
    x, scale, offset, dy = args[:4]
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    np.testing.assert_allclose(out[1], mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[2], var, rtol=1e-4, atol=1e-4)
    want_y = (x - mean) / np.sqrt(var + 1e-5) * scale + offset
    np.testing.assert_allclose(out[0], want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[5], dy.sum(axis=(0, 1, 2)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[6], (x - mean) / np.sqrt(var + 1e-3) * scale + offset, rtol=1e-4, atol=1e-4)
    # feature dimension 1 of a copy in another layout
    np.testing.assert_allclose(out[11], x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)


def test_host_runs_the_expansion_like_the_interpreter():
    ok, report = run_on_host(parse_module(MODULE), args=_inputs())
    assert ok, report


def test_interpreter_matches_xla_cpu():
    ref = xla_ref_module()
    if ref is None:
        pytest.skip("jax or shared/tools/xla_ref.py is not available")
    args = _inputs()
    xla = ref.run_hlo_text(MODULE, args)
    ours = literals.flatten(evaluate_module(parse_module(MODULE), args))
    assert len(xla) == len(ours)
    for got, want in zip(ours, xla):
        want = np.asarray(want).view(got.dtype) if np.asarray(want).dtype.kind == "V" else np.asarray(want)
        tol = 4e-2 if got.dtype.itemsize == 2 else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("text, message", [
    ("ROOT b = s32[2,3]{1,0} batch-norm-inference(s32[2,3]{1,0} parameter(0), s32[3]{0} parameter(1), "
     "s32[3]{0} parameter(2), s32[3]{0} parameter(3), s32[3]{0} parameter(4)), epsilon=0.001, feature_index=1",
     "needs a floating-point operand"),
    ("ROOT b = (f32[2,3]{1,0}, f32[3]{0}, f32[3]{0}) batch-norm-training(f32[2,3]{1,0} parameter(0), "
     "f32[2]{0} parameter(1), f32[3]{0} parameter(2)), epsilon=0.001, feature_index=1",
     "operand 1 must be f32[3]"),
])
def test_operands_xla_refuses_are_refused_by_name(tmp_path, text, message):
    path = tmp_path / "bad.hlo"
    path.write_text(f"HloModule bad\n\nENTRY e {{\n  {text}\n}}\n")
    result = CliRunner().invoke(hlo_compile, [str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "bad.hlo:4:" in result.output
