"""The ``cuda`` platform end to end on a real GPU: the same checks as the host tests, run through
PTX, the CUDA JIT and our thin driver layer. Every test is marked ``gpu`` and skips, with
``available()``'s reason, where there is no usable GPU (CI, this project's CPU machines).

- gelu through ``hlo-run --platform=cuda`` against the interpreter (exit status 0);
- every XLA loop-emitter test file (the host test's list and exclusions) against the interpreter;
- every JAX corpus case against XLA's outputs, refusals accepted as on the host;
- the registers and local memory the driver reports for the gelu kernel;
- every model of our real-model corpus (``tests/data/models``, both HLO forms) against XLA:CPU;
- every XLA:GPU-style corpus module with a library call or a kCustom fusion (the host test's
  list, ``test_xla_gpu_corpus.py``) with its cuBLAS/cuDNN calls run by the libraries.

Run on the lent GPU machine as ``bench/device/README.md`` says.
"""
from __future__ import annotations

from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import compile_executable

from codegen_helpers import load_fusion_test
from conftest import corpus_root
from test_codegen_loop import GELU, LOOP_TESTS, NOT_RUN, ROOT
from test_jax_corpus import _cases, run_case
from test_model_corpus import DATA as MODELS, FORMS as MODEL_FORMS, _case_names as _model_names
from test_model_corpus import _failures, run_model_case

pytestmark = pytest.mark.gpu

GELU_FILE = ROOT / "examples" / "gelu.hlo"


@contextmanager
def cuda_executable(module):
    """The module compiled for the GPU that is there; its device context is released after."""
    exe = compile_executable(module, "cuda")
    try:
        yield exe
    finally:
        exe.platform.device.close()


def _on_cuda(module, args):
    with cuda_executable(module) as exe:
        return exe.run(args)


def run_on_cuda(module, seed: int = 0) -> tuple[bool, str]:
    """(ok, report): the module on the cuda platform compared with the interpreter (the
    host test's ``run_on_host`` with the platform changed)."""
    args = literals.random_inputs(module, seed)
    got = literals.flatten(_on_cuda(module, args))
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[(None, None)] * len(expected))
    return cmp.ok, cmp.report()


# ---- gelu through the CLI ------------------------------------------------------------------
def test_gelu_cli_on_cuda(gpu):
    from hlo_compile.cli.run import main
    result = CliRunner().invoke(main, [str(GELU_FILE), "--platform=cuda", "--reference=interpreter",
                                       "--iterations", "3"])
    assert result.exit_code == 0, result.output
    print(result.output)


def test_gelu_kernel_registers(gpu):
    module = parse_module(GELU)
    with cuda_executable(module) as exe:
        (plan,) = exe.plan.kernels
        fn = exe.kernels[plan.fusion.name]
        regs, local = fn.registers, fn.local_bytes
        print(f"{plan.kernel_name} on {exe.platform.device}: {regs} registers, {local} bytes local, "
              f"grid {plan.launch.grid} block {plan.launch.block}, max threads/block {fn.max_threads_per_block}")
        assert regs > 0
        assert fn.max_threads_per_block >= plan.launch.num_threads


# ---- XLA's loop-emitter tests ----------------------------------------------------------------
def _loop_test_params() -> list:
    root = corpus_root()
    files = sorted((root / LOOP_TESTS).glob("*.hlo")) if root is not None else []
    if not files:
        return [pytest.param(None, id="no-corpus")]
    return [pytest.param(p.name, id=p.name) for p in files if p.name not in NOT_RUN]


def test_xla_loop_emitter_tests_are_there(gpu, corpus):
    files = sorted((corpus / LOOP_TESTS).glob("*.hlo"))
    assert len(files) >= 30, f"{len(files)} XLA loop-emitter tests under {corpus / LOOP_TESTS}"


@pytest.mark.parametrize("name", _loop_test_params())
def test_xla_loop_emitter_test_on_cuda(gpu, corpus, name):
    if name is None:
        pytest.skip(f"no XLA loop-emitter tests under {corpus / LOOP_TESTS}")
    ok, report = run_on_cuda(load_fusion_test(corpus / LOOP_TESTS / name))
    assert ok, f"{name}: {report}"


# ---- the JAX corpus ------------------------------------------------------------------------
@pytest.mark.parametrize("case,hlo", _cases())
def test_jax_case_on_cuda(gpu, corpus, case, hlo):
    if case is None or not (corpus / "jax").is_dir():
        pytest.skip("no JAX corpus")
    result = run_case(corpus / "jax" / case, hlo, run=_on_cuda)
    assert result.ok, result.report()


# ---- tensor cores (mma.sync m16n8k16) ---------------------------------------------------------
TENSOR_CORE_DOTS = {
    "bf16_256_f32_out": ("bf16[256,256]", "bf16[256,256]", "f32[256,256]"),
    "bf16_256_bf16_out": ("bf16[256,256]", "bf16[256,256]", "bf16[256,256]"),
    "bf16_partial_tiles": ("bf16[70,90]", "bf16[90,66]", "f32[70,66]"),
}


@pytest.mark.parametrize("name", sorted(TENSOR_CORE_DOTS))
def test_bf16_dot_tensor_cores_on_cuda(gpu, name):
    """The tensor-core dot path (``CompileOptions.dot_tensor_cores``) against the interpreter.
    Needs ``runtime/cuda_platform.py`` to copy the option onto its ``NvptxTarget``."""
    from hlo_compile.targets.nvptx import MMA_MIN_SM as MIN_SM, sm_version
    from hlo_compile.options import CompileOptions
    lhs, rhs, out = TENSOR_CORE_DOTS[name]
    module = parse_module(f"""HloModule tc
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}""")
    args = literals.random_inputs(module, 3)
    exe = compile_executable(module, "cuda", CompileOptions(dot_tensor_cores=True))
    try:
        if (sm_version(exe.platform.arch) or 0) < MIN_SM:
            pytest.skip(f"{exe.platform.arch}: mma.m16n8k16 with bf16 needs sm_{MIN_SM}+")
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in exe.platform.ptx, \
            "no mma in the PTX: does cuda_platform.py set target.dot_tensor_cores from the options?"
        got = literals.flatten(exe.run(args))
    finally:
        exe.platform.device.close()
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[(None, None)] * len(expected))
    assert cmp.ok, f"{name}: {cmp.report()}"


# ---- CUDA graphs (hlo-run --use-cuda-graph) ----------------------------------------------------
def _on_cuda_graph(module, args):
    """Captured on all-zero arguments, replayed with the case's (the parameters' buffers are
    rewritten in place); a module with host control flow must be refused by name instead."""
    from hlo_compile.runtime.graph import ModuleGraph, unsupported_reason
    from test_jax_corpus_host import _zeros_like
    with cuda_executable(module) as exe:
        why = unsupported_reason(exe)
        if why is not None:
            assert "while" in why or "conditional" in why
            return exe.run(args)
        with ModuleGraph(exe) as graph:
            graph.run(_zeros_like(args))
            return graph.run(args)


@pytest.mark.parametrize("case,hlo", _cases())
def test_jax_case_as_cuda_graph(gpu, corpus, case, hlo):
    if case is None or not (corpus / "jax").is_dir():
        pytest.skip("no JAX corpus")
    result = run_case(corpus / "jax" / case, hlo, run=_on_cuda_graph)
    assert result.ok, result.report()


def test_gelu_cli_with_cuda_graph(gpu):
    from hlo_compile.cli.run import main
    result = CliRunner().invoke(main, [str(GELU_FILE), "--platform=cuda", "--use-cuda-graph",
                                       "--iterations", "20"])
    assert result.exit_code == 0, result.output
    assert "CUDA graph: one graph of 1 kernel launch(es)" in result.output
    assert "with plain launches" in result.output
    print(result.output)


# ---- NCCL with one participant ------------------------------------------------------------------
NCCL_ONE = """HloModule nccl_one, replica_count=1

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

add.bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}

ENTRY main {
  x = f32[64,32]{1,0} parameter(0)
  y = bf16[128]{0} parameter(1)
  ar = f32[64,32]{1,0} all-reduce(x), replica_groups={{0}}, to_apply=add
  arb = bf16[128]{0} all-reduce(y), replica_groups={}, to_apply=add.bf16
  ag = f32[64,32]{1,0} all-gather(x), replica_groups={{0}}, dimensions={1}
  rs = f32[64,32]{1,0} reduce-scatter(x), replica_groups={{0}}, dimensions={0}, to_apply=add
  cp = f32[64,32]{1,0} collective-permute(x), source_target_pairs={{0,0}}
  a2a = f32[64,32]{1,0} all-to-all(x), replica_groups={{0}}, dimensions={0}
  st = f32[64,32]{1,0} all-reduce-start(ar), replica_groups={{0}}, to_apply=add
  dn = f32[64,32]{1,0} all-reduce-done(st)
  id = u32[] replica-id()
  ROOT t = (f32[64,32]{1,0}, bf16[128]{0}, f32[64,32]{1,0}, f32[64,32]{1,0}, f32[64,32]{1,0}, f32[64,32]{1,0},
            f32[64,32]{1,0}, u32[]) tuple(ar, arb, ag, rs, cp, a2a, dn, id)
}
"""


def test_collectives_through_nccl_with_one_participant(gpu):
    """Issue 16's GPU check: every collective of a module run through the NCCL path (nccl4py,
    a communicator of one) on the GPU, against the interpreter."""
    from hlo_compile.hlo.collective_groups import World
    from hlo_compile.hlo.errors import HloUnsupportedError
    from hlo_compile.runtime.nccl_comm import load_nccl
    from hlo_compile.runtime.spmd_run import run_gpu_participant
    try:
        nccl = load_nccl()
    except HloUnsupportedError as e:
        pytest.skip(str(e))
    module = parse_module(NCCL_ONE)
    args = literals.random_inputs(module, 3)
    got = literals.flatten(run_gpu_participant(NCCL_ONE, None, World(1, 1), 0, nccl.get_unique_id(), args, 0))
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[(None, None)] * len(expected))
    assert cmp.ok, cmp.report()


# ---- our real-model corpus (tests/data/models: flax, optax, lax control flow) --------------------------
@pytest.mark.parametrize("form", MODEL_FORMS)
@pytest.mark.parametrize("case", _model_names() or [None])
def test_model_case_on_cuda(gpu, case, form):
    if case is None:
        pytest.skip(f"no model corpus at {MODELS}")
    result = run_model_case(MODELS / case, form, "cuda", run=_on_cuda)
    assert result.ok, f"{case}/{form} on cuda:\n{_failures(result)}"


# ---- XLA:GPU-style modules: library calls through cuBLASLt/cuDNN, kCustom fusions -----------------------
def _xla_gpu_params() -> list:
    from test_xla_gpu_corpus import _files
    root = corpus_root()
    files = _files(root) if root is not None else []
    if not files:
        return [pytest.param(None, id="no-corpus")]
    return [pytest.param(str(p.relative_to(root)), id=str(p.relative_to(root))) for p in files]


@pytest.mark.parametrize("rel", _xla_gpu_params())
def test_xla_gpu_module_on_cuda(gpu, corpus, rel):
    """What the host test runs, on the GPU with library calls kept (``--gemm/--conv=library``):
    refusals only for the host test's ``KNOWN_REFUSALS``; modules too big for the interpreter
    in a test are compiled only."""
    from hlo_compile.cli.common import read_modules
    from hlo_compile.hlo.errors import HloError
    from test_xla_gpu_corpus import KNOWN_REFUSALS, _too_big
    if rel is None:
        pytest.skip("no XLA:GPU-style modules in the corpus")
    path = corpus / rel
    split = "\n// -----" in path.read_text(errors="replace")
    try:
        modules = read_modules(str(path), split_input_file=split)
    except HloError:
        pytest.skip("a parser test of invalid input")
    failures = []
    for i, module in enumerate(modules):
        try:
            if _too_big(module):
                with cuda_executable(module):
                    pass
                continue
            ok, report = run_on_cuda(module)
        except HloError as e:
            if not any(k in str(e) for k in KNOWN_REFUSALS):
                failures.append(f"#{i}: refused: {str(e).splitlines()[0]}")
            continue
        if not ok:
            failures.append(f"#{i}: mismatch: {report[:400]}")
    assert not failures, "\n".join(failures)
