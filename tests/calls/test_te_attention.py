"""Transformer Engine's fused attention calls (``te_fused_attn_forward_ffi`` /
``te_fused_attn_backward_ffi``): the reader, the interpreter (against an independent float64
numpy attention and ``jax.grad`` of a float64 jax attention), the lowering on host (against the
interpreter), the refusals by name, and the llama benchmark module of the corpus."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.calls.te_attention import parse_mlir_dict, te_attention_call
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes.library_calls import lower_library_calls
from hlo_compile.runtime.executable import compile_executable

BF16 = ml_dtypes.bfloat16
MASKS = {"NO_MASK": 0, "PADDING": 1, "CAUSAL": 2, "PADDING_CAUSAL": 3}


@dataclass(frozen=True)
class Case:
    B: int = 2
    S: int = 128         # key/value sequence length
    T: int = 0           # query sequence length (0: S)
    N: int = 8
    G: int = 2           # key/value heads (num_gqa_groups)
    D: int = 64
    mask: str = "NO_MASK"
    scale: float = 0.125
    backward: bool = True

    @property
    def padding(self) -> bool:
        return self.mask in ("PADDING", "PADDING_CAUSAL")

    @property
    def q_len(self) -> int:
        return self.T or self.S


def config(c: Case, **over) -> str:
    fields = {"attn_heads": f"{c.N} : i64", "bias_batch": "0 : i64", "bias_heads": "0 : i64",
              "bias_type": "0 : i64", "deterministic": "false", "dropout_probability": "0.000000e+00 : f64",
              "input_batch": f"{c.B} : i64", "is_training": "true", "kv_max_seqlen": f"{c.S} : i64",
              "mask_type": f"{MASKS[c.mask]} : i64", "max_segments_per_seq": "1 : i64",
              "num_gqa_groups": f"{c.G} : i64", "q_max_seqlen": f"{c.q_len} : i64", "qk_head_dim": f"{c.D} : i64",
              "qkv_layout": "9 : i64", "scaling_factor": f"{c.scale:.6e} : f64", "v_head_dim": f"{c.D} : i64",
              "window_size_left": "-1 : i64", "window_size_right": "-1 : i64"}
    fields.update(over)
    return "{" + ", ".join(f"{k} = {v}" for k, v in fields.items()) + "}"


def module_text(c: Case, *, aux_out: bool = False, fwd_config: str | None = None,
                bwd_config: str | None = None) -> str:
    """Parameters q, k, v, q_cu_seqlens, kv_cu_seqlens, dO; results O (and dQ, dK, dV), in the
    way the llama benchmark modules call TE (empty bias and offsets, the rng_state through a
    copy). ``aux_out``: softmax_aux is also a result (refused)."""
    B, S, T, N, G, D = c.B, c.S, c.q_len, c.N, c.G, c.D
    q_t, kv_t = f"bf16[{B},{T},{N},{D}]{{3,2,1,0}}", f"bf16[{B},{S},{G},{D}]{{3,2,1,0}}"
    cu_t, aux_t, rng_t = f"s32[{B + 1}]{{0}}", f"f32[{B},{N},{T},1]{{3,2,1,0}}", "u32[2,4]{1,0}"
    empties = ", ".join(["empty.f32"] * 6)
    lines = [f"  q = {q_t} parameter(0)", f"  k = {kv_t} parameter(1)", f"  v = {kv_t} parameter(2)",
             f"  q_cu = {cu_t} parameter(3)", f"  kv_cu = {cu_t} parameter(4)",
             "  empty.bf16 = bf16[0]{0} constant({})", "  empty.f32 = f32[0]{0} constant({})",
             "  seed = u32[2]{0} constant({0, 0})",
             f"  te.fwd = ({q_t}, {aux_t}, {rng_t}, u8[48]{{0}}) custom-call(q, k, v, empty.bf16, seed, q_cu, kv_cu, "
             f"{empties}), custom_call_target=\"te_fused_attn_forward_ffi\", api_version=API_VERSION_TYPED_FFI, "
             f"backend_config={fwd_config or config(c)}",
             f"  o = {q_t} get-tuple-element(te.fwd), index=0"]
    results = [("o", q_t)]
    if c.backward or aux_out:
        lines += [f"  aux = {aux_t} get-tuple-element(te.fwd), index=1",
                  f"  rng = {rng_t} get-tuple-element(te.fwd), index=2",
                  f"  rng.copy = {rng_t} copy(rng)"]
    if aux_out:
        results.append(("aux", aux_t))
    if c.backward:
        lines += [f"  d_o = {q_t} parameter(5)",
                  f"  te.bwd = ({q_t}, {kv_t}, {kv_t}, bf16[0]{{0}}, u8[64]{{0}}) custom-call(q, k, v, "
                  f"empty.bf16, aux, rng.copy, o, d_o, q_cu, kv_cu, {empties}), "
                  f"custom_call_target=\"te_fused_attn_backward_ffi\", "
                  f"api_version=API_VERSION_TYPED_FFI, backend_config={bwd_config or config(c)}"]
        for i, (name, t) in enumerate([("dq", q_t), ("dk", kv_t), ("dv", kv_t)]):
            lines.append(f"  {name} = {t} get-tuple-element(te.bwd), index={i}")
            results.append((name, t))
    lines.append(f"  ROOT result = ({', '.join(t for _, t in results)}) tuple({', '.join(n for n, _ in results)})")
    return "HloModule jit_te_attention\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def make_inputs(c: Case, seed: int, q_lens=None, kv_lens=None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    q_lens = [c.q_len] * c.B if q_lens is None else q_lens
    kv_lens = [c.S] * c.B if kv_lens is None else kv_lens

    def cu(lens):
        return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    args = [rng.normal(size=(c.B, c.q_len, c.N, c.D)).astype(BF16),
            rng.normal(size=(c.B, c.S, c.G, c.D)).astype(BF16),
            rng.normal(size=(c.B, c.S, c.G, c.D)).astype(BF16), cu(q_lens), cu(kv_lens)]
    if c.backward:
        args.append(rng.normal(size=(c.B, c.q_len, c.N, c.D)).astype(BF16))
    return args


def reference(c: Case, args) -> dict[str, np.ndarray]:
    """Float64 attention written here from the definitions: O, and the gradients of
    sum(O * dO) with respect to q, k, v."""
    q, k, v = (np.asarray(a, np.float64).transpose(0, 2, 1, 3) for a in args[:3])   # [B, H, S, D]
    group = c.N // c.G
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)

    def lens(cu):
        return np.diff(np.asarray(cu, np.int64))
    i, j = np.arange(c.q_len)[:, None], np.arange(c.S)[None, :]
    masked = np.zeros((c.B, 1, c.q_len, c.S), bool)
    if c.mask in ("CAUSAL", "PADDING_CAUSAL"):
        masked |= j > i
    if c.padding:
        ql, kl = lens(args[3])[:, None, None, None], lens(args[4])[:, None, None, None]
        masked |= (j >= kl) | (i >= ql)
    s = np.float64(np.float32(c.scale)) * np.einsum("bhid,bhjd->bhij", q, k)
    s = np.where(masked, -np.inf, s)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total == 0, 1.0, total)
    o = p @ v
    out = {"o": o.transpose(0, 2, 1, 3)}
    if c.backward:
        d_o = np.asarray(args[5], np.float64).transpose(0, 2, 1, 3)
        dp = d_o @ v.transpose(0, 1, 3, 2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        dq = np.float64(np.float32(c.scale)) * ds @ k
        dk = np.float64(np.float32(c.scale)) * ds.transpose(0, 1, 3, 2) @ q
        dv = p.transpose(0, 1, 3, 2) @ d_o

        def fold(x):
            return x.reshape(c.B, c.G, group, c.S, c.D).sum(2)
        out |= {"dq": dq.transpose(0, 2, 1, 3), "dk": fold(dk).transpose(0, 2, 1, 3),
                "dv": fold(dv).transpose(0, 2, 1, 3)}
    return out


def names(c: Case) -> list[str]:
    return ["o"] + (["dq", "dk", "dv"] if c.backward else [])


def max_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape and np.isfinite(got).all()
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def flat(r) -> list[np.ndarray]:
    return [np.asarray(x) for x in (r if isinstance(r, tuple) else (r,))]


def jax_grads(c: Case, args) -> dict[str, np.ndarray]:
    """dq, dk, dv as ``jax.grad`` of sum(O * dO) for a float64 jax attention."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    q, k, v, d_o = (jnp.asarray(np.asarray(a, np.float64)) for a in (*args[:3], args[5]))
    i, j = np.arange(c.q_len)[:, None], np.arange(c.S)[None, :]
    valid = np.ones((c.B, 1, c.q_len, c.S), bool)
    if c.mask in ("CAUSAL", "PADDING_CAUSAL"):
        valid &= j <= i
    if c.padding:
        ql, kl = np.diff(args[3])[:, None, None, None], np.diff(args[4])[:, None, None, None]
        valid &= (j < kl) & (i < ql)
    group = c.N // c.G

    def attention(q, k, v):      # [B, S, H, D] in and out
        s = np.float64(np.float32(c.scale)) * jnp.einsum("bihd,bjhd->bhij", q, jnp.repeat(k, group, axis=2))
        s = jnp.where(valid, s, -jnp.inf)
        m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
        e = jnp.where(valid, jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
        l_ = e.sum(axis=-1, keepdims=True)
        return jnp.einsum("bhij,bjhd->bihd", e / jnp.where(l_ == 0, 1.0, l_), jnp.repeat(v, group, axis=2))

    grads = jax.grad(lambda q, k, v: jnp.sum(attention(q, k, v) * d_o), argnums=(0, 1, 2))(q, k, v)
    return dict(zip(("dq", "dk", "dv"), (np.asarray(g) for g in grads)))


BOUND = 8e-3     # two bf16 roundings (2^-8 each) of the largest magnitude
LENS = ([100, 128], [128, 77])   # padding: a short query batch row, a short key/value batch row


# ---- the MLIR dictionary config and the reader -----------------------------------------------------

def test_parse_mlir_dict():
    got = parse_mlir_dict("{a = 64 : i64, b = true, c = 1.250000e-01 : f64, d = -1 : i64, e = false}")
    assert got == {"a": 64, "b": True, "c": 0.125, "d": -1, "e": False}
    assert isinstance(got["a"], int) and isinstance(got["c"], float)
    assert parse_mlir_dict("{}") == {}
    assert parse_mlir_dict('{"a": 1}') is None and parse_mlir_dict("{a = [1, 2]}") is None


def test_reader_maps_te_onto_the_cudnn_attention():
    m = parse_module(module_text(Case(mask="PADDING_CAUSAL", scale=0.5)))
    fwd, bwd = (i for i in m.entry.instructions if i.opcode == "custom-call")
    f, b = te_attention_call(fwd), te_attention_call(bwd)
    assert (f.backward, b.backward) == (False, True)
    assert f.fmha.mask == "PADDING_CAUSAL" and f.fmha.scale == 0.5 and f.fmha.group == 4
    assert (f.fmha.batch, f.fmha.heads, f.fmha.kv_heads, f.fmha.q_len, f.fmha.qk_dim) == (2, 8, 2, 128, 64)
    assert (f.q_cu_seqlens, f.kv_cu_seqlens, b.q_cu_seqlens, b.kv_cu_seqlens) == (5, 6, 8, 9)
    assert (b.fmha.o_in, b.fmha.d_o, b.fmha.stats_in) == (6, 7, 18)


# ---- the math ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mask", list(MASKS))
def test_interpreter_and_host_are_attention(mask):
    """B=2, S=128, H=8, G=2, D=64 bf16: the interpreter against a float64 numpy attention, the
    host (lowered and compiled) against the interpreter."""
    c = Case(mask=mask)
    args = make_inputs(c, 3, *LENS) if c.padding else make_inputs(c, 3)
    module = parse_module(module_text(c))
    want = flat(evaluate_module(module, args))
    got = flat(compile_executable(module, "host").run(args))
    ref = reference(c, args)
    for name, w, g in zip(names(c), want, got):
        assert max_error(w, ref[name]) <= BOUND, f"interpreter {mask} {name}: {max_error(w, ref[name]):.3g}"
        assert max_error(g, w) <= BOUND, f"host {mask} {name}: {max_error(g, w):.3g}"
    if c.padding:    # padded query rows: zero output and zero dQ; padded keys: zero dK, dV
        o, dq, dk, dv = (np.asarray(x, np.float64) for x in want)
        assert not o[0, 100:].any() and not dq[0, 100:].any() and o[0, :100].any()
        assert not dk[1, 77:].any() and not dv[1, 77:].any() and dk[1, :77].any()


@pytest.mark.parametrize("mask", ["CAUSAL", "PADDING_CAUSAL"])
def test_backward_is_jax_grad(mask):
    c = Case(mask=mask, S=64, N=4, G=2, D=32)
    args = make_inputs(c, 5, [64, 40], [33, 64]) if c.padding else make_inputs(c, 5)
    got = dict(zip(names(c), flat(evaluate_module(parse_module(module_text(c)), args))))
    for name, g in jax_grads(c, args).items():
        assert max_error(got[name], g) <= BOUND, f"{mask} {name}: {max_error(got[name], g):.3g}"


@pytest.mark.parametrize("mask", ["CAUSAL", "PADDING_CAUSAL"])
def test_cross_attention_causal_is_top_left(mask):
    """Query and key lengths differ (T=48, S=80): NVTE_CAUSAL_MASK is aligned to the top left
    corner (key j masked after query i); interpreter vs numpy and jax.grad, host vs interpreter."""
    c = Case(mask=mask, T=48, S=80, N=4, G=2, D=32)
    args = make_inputs(c, 7, [48, 30], [80, 21]) if c.padding else make_inputs(c, 7)
    module = parse_module(module_text(c))
    want = flat(evaluate_module(module, args))
    got = flat(compile_executable(module, "host").run(args))
    ref = reference(c, args) | jax_grads(c, args)
    for name, w, g in zip(names(c), want, got):
        assert max_error(w, ref[name]) <= BOUND, f"interpreter {name}: {max_error(w, ref[name]):.3g}"
        assert max_error(g, w) <= BOUND, f"host {name}: {max_error(g, w):.3g}"


def test_te_calls_are_no_library_family_and_always_lowered():
    """No library step runs a TE call: it is lowered even when no family is generated (cuda
    with --gemm/--conv=library)."""
    from hlo_compile.hlo.calls.library_targets import TE_ATTENTION_TARGETS, library_family
    from hlo_compile.passes import run_passes
    assert all(library_family(t) is None for t in TE_ATTENTION_TARGETS)
    out = run_passes(parse_module(module_text(Case(S=16, N=2, G=1, D=8))), generated_calls=frozenset())
    assert not _te_calls(out)


def test_non_padding_masks_ignore_the_sequence_lengths():
    c = Case(mask="CAUSAL", S=32, N=2, G=1, D=16)
    module = parse_module(module_text(c))
    full = flat(evaluate_module(module, make_inputs(c, 2)))
    short = flat(evaluate_module(module, make_inputs(c, 2, [5, 7], [3, 1])))
    for a, b in zip(full, short):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def _packed_kv(c: Case) -> str:
    """``module_text(c)`` with qkv_layout 7 (NVTE_BSHD_BS2HD): the module packs its k and v
    parameters into kv[B, S, 2, G, D] for the calls (v operand empty) and splits the backward's
    dKV back into dK and dV, so its results are the unpacked module's."""
    cfg = config(c, qkv_layout="7 : i64")
    text = module_text(c, fwd_config=cfg, bwd_config=cfg)
    B, S, G, D = c.B, c.S, c.G, c.D
    kv_t, one_t, half_t = (f"bf16[{B},{S},2,{G},{D}]{{4,3,2,1,0}}", f"bf16[{B},{S},1,{G},{D}]{{4,3,2,1,0}}",
                           f"bf16[{B},{S},{G},{D}]{{3,2,1,0}}")
    pack = (f"  k1 = {one_t} reshape(k)\n  v1 = {one_t} reshape(v)\n"
            f"  kv = {kv_t} concatenate(k1, v1), dimensions={{2}}\n")
    text = text.replace("  te.fwd = ", pack + "  te.fwd = ")
    text = text.replace("custom-call(q, k, v, empty.bf16,", "custom-call(q, kv, empty.bf16, empty.bf16,")
    text = text.replace(f"{half_t}, {half_t}, bf16[0]{{0}}, u8[64]{{0}}) custom-call",
                        f"{kv_t}, bf16[0]{{0}}, bf16[0]{{0}}, u8[64]{{0}}) custom-call")
    for i, name in enumerate(("dk", "dv")):
        text = text.replace(
            f"  {name} = {half_t} get-tuple-element(te.bwd), index={i + 1}",
            (f"  dkv.{name} = {kv_t} get-tuple-element(te.bwd), index=1\n" if i == 0 else "")
            + f"  {name}.1 = {one_t} slice(dkv.dk), slice={{[0:{B}], [0:{S}], [{i}:{i + 1}], [0:{G}], [0:{D}]}}\n"
            + f"  {name} = {half_t} reshape({name}.1)")
    assert text.count("dkv.dk = ") == 1 and "kv, empty.bf16, empty.bf16" in text, text
    return text


@pytest.mark.parametrize("mask", ["NO_MASK", "PADDING_CAUSAL"])
def test_packed_kv_layout_is_the_separate_one(mask):
    """qkv_layout 7 (k and v packed as kv[B, S, 2, H, D], the backward's dKV): the same O, dQ,
    dK and dV as layout 9 on the same data, in the interpreter and on host."""
    c = Case(mask=mask, S=32, N=4, G=2, D=16)
    args = make_inputs(c, 13, [32, 20], [17, 32]) if c.padding else make_inputs(c, 13)
    want = flat(evaluate_module(parse_module(module_text(c)), args))
    module = parse_module(_packed_kv(c))
    got = flat(evaluate_module(module, args))
    host = flat(compile_executable(module, "host").run(args))
    for name, w, g, h in zip(names(c), want, got, host):
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32), err_msg=name)
        assert max_error(h, w) <= BOUND, name


# ---- the lowering -----------------------------------------------------------------------------

def test_lowering_golden():
    """The lowered forward and backward: sequence lengths from the cumulative ones, canonical
    [B, H, S, D] math, results transposed back to BSHD, softmax_aux reshaped for the backward."""
    c = Case(mask="PADDING_CAUSAL", B=2, S=16, N=4, G=2, D=8)
    module = parse_module(module_text(c))
    lower_library_calls(module, frozenset())      # TE calls are lowered whatever the families
    text = module.to_text()
    assert "custom-call" not in text
    expected = [
        r"%te.fwd.slice = s32\[2\]\{0\} slice\(s32\[3\]\{0\} %q_cu\), slice=\{\[1:3\]\}",
        r"%te.fwd.slice.1 = s32\[2\]\{0\} slice\(s32\[3\]\{0\} %q_cu\), slice=\{\[0:2\]\}",
        r"%te.fwd.subtract = s32\[2\]\{0\} subtract\(s32\[2\]\{0\} %te.fwd.slice, s32\[2\]\{0\} %te.fwd.slice.1\)",
        r"%te.fwd.dot = f32\[2,4,16,16\]\{3,2,1,0\} dot\(",                       # Q.K^T, canonical
        r"%(te.fwd.reshape.\d+) = f32\[2,4,16,1\]\{3,2,1,0\} reshape\(f32\[2,4,16\]",  # softmax_aux
        r"= bf16\[2,16,4,8\]\{3,2,1,0\} transpose\(.*dimensions=\{0,2,1,3\}",    # O back to BSHD
        r"= f32\[2,4,16\]\{2,1,0\} reshape\(f32\[2,4,16,1\]\{3,2,1,0\} %{aux}\)",  # read back by the backward
        r"= bf16\[2,16,2,8\]\{3,2,1,0\} transpose\(.*dimensions=\{0,2,1,3\}",    # dK
    ]
    at, aux = 0, None
    for pattern in expected:
        m = re.compile(pattern.replace("{aux}", re.escape(aux or ""))).search(text, at)
        assert m, f"{pattern!r} not found after offset {at} in\n{text}"
        aux = aux or (m.group(1) if m.groups() else None)
        at = m.end()


def test_lowered_module_means_the_call():
    c = Case(mask="PADDING", B=2, S=24, N=4, G=1, D=8)
    text = module_text(c)
    lowered = parse_module(text)
    lower_library_calls(lowered, frozenset())
    lowered = parse_module(lowered.to_text())
    args = make_inputs(c, 9, [24, 10], [0, 24])
    for name, w, g in zip(names(c), flat(evaluate_module(parse_module(text), args)),
                          flat(evaluate_module(lowered, args))):
        assert max_error(g, w) <= BOUND, name


def test_lowered_over_chunks_of_keys_is_attention():
    """The scores limited below their size: the calls lowered as loops over chunks of keys
    (passes/fmha_chunked.py, 16 keys a step: the fourth holds keys 48-51 and padding), on host against the
    float64 numpy attention and jax.grad."""
    from hlo_compile.passes.te_attention_lowering import check_module, lower_te_attention
    c = Case(mask="PADDING_CAUSAL", T=40, S=52, N=4, G=2, D=32)
    module = parse_module(module_text(c))
    check_module(module)
    for call in _te_calls(module):
        lower_te_attention(module.entry, call, limit=4 * c.B * c.N * c.q_len * 16)
    assert sum(i.opcode == "while" for i in module.entry.instructions) == 2
    args = make_inputs(c, 17, [40, 23], [52, 30])
    ref = reference(c, args) | jax_grads(c, args)
    for name, g in zip(names(c), flat(compile_executable(module, "host").run(args))):
        assert max_error(g, ref[name]) <= BOUND, f"{name}: {max_error(g, ref[name]):.3g}"


# ---- refusals ---------------------------------------------------------------------------------

def _refusal(c: Case, text: str) -> str:
    """The interpreter's and the lowering's refusal of ``text`` (the case ``c``)."""
    with pytest.raises(HloUnsupportedError) as e:
        evaluate_module(parse_module(text), make_inputs(c, 0))
    msg = str(e.value)
    with pytest.raises(HloUnsupportedError):
        lower_library_calls(parse_module(text), frozenset())
    return msg


@pytest.mark.parametrize("key, value, words", [
    ("qkv_layout", "4 : i64", "qkv_layout=4"),
    ("qkv_layout", "7 : i64", "packed kv [B, S, 2, H, D]"),
    ("bias_type", "1 : i64", "bias_type=1"),
    ("dropout_probability", "1.000000e-01 : f64", "dropout"),
    ("mask_type", "4 : i64", "BOTTOM_RIGHT"),
    ("mask_type", "7 : i64", "unknown mask_type=7"),
    ("max_segments_per_seq", "2 : i64", "packed sequences"),
    ("window_size_left", "16 : i64", "sliding window"),
    ("softmax_type", "1 : i64", "softmax_type=1"),
    ("new_option", "1 : i64", "unknown backend_config key"),
    ("attn_heads", "16 : i64", "attn_heads=16 does not match"),
])
def test_unsupported_options_are_refused_by_name(key, value, words):
    c = Case(backward=False, S=16, N=2, G=1, D=8)
    msg = _refusal(c, module_text(c, fwd_config=config(c, **{key: value})))
    assert "%te.fwd" in msg and "te_fused_attn_forward_ffi" in msg and words in msg, msg


def test_padded_softmax_aux_as_a_result_is_refused():
    """Under a padding mask softmax_aux's padded rows are unspecified: returning it is refused."""
    c = Case(mask="PADDING", backward=False, S=16, N=2, G=1, D=8)
    msg = _refusal(c, module_text(c, aux_out=True))
    assert "%te.fwd" in msg and "softmax_aux" in msg and "private" in msg and "result" in msg, msg


@pytest.mark.parametrize("mask", ["NO_MASK", "CAUSAL"])
def test_softmax_aux_without_padding_is_the_log_sum_exp(mask):
    """Without padding softmax_aux is cuDNN's statistics, a defined value any op may read:
    log(sum(exp(scaled masked scores))) per query row, f32 [B, H, S, 1]."""
    c = Case(mask=mask, backward=False, S=32, N=4, G=2, D=16)
    args = make_inputs(c, 4)
    module = parse_module(module_text(c, aux_out=True))
    _, aux = evaluate_module(module, args)
    _, host_aux = compile_executable(module, "host").run(args)
    q, k = (np.asarray(a, np.float64).transpose(0, 2, 1, 3) for a in args[:2])
    k = np.repeat(k, c.N // c.G, axis=1)
    s = np.float64(np.float32(c.scale)) * np.einsum("bhid,bhjd->bhij", q, k)
    if mask == "CAUSAL":
        s = np.where(np.arange(c.S)[None, :] > np.arange(c.S)[:, None], -np.inf, s)
    want = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) + s.max(-1, keepdims=True)
    assert aux.shape == (c.B, c.N, c.S, 1) and aux.dtype == np.float32
    assert np.abs(aux - want).max() <= 1e-4 and np.abs(host_aux - aux).max() <= 1e-4


@pytest.mark.parametrize("mask", ["CAUSAL", "PADDING_CAUSAL"])
def test_rng_state_as_a_result_is_refused(mask):
    """rng_state holds TE's process-wide offset counter: no module may observe it."""
    c = Case(mask=mask, backward=False, S=16, N=2, G=1, D=8)
    text = module_text(c, aux_out=True).replace("tuple(o, aux)", "tuple(o, rng.copy)").replace(
        "f32[2,2,16,1]{3,2,1,0}) tuple", "u32[2,4]{1,0}) tuple")
    msg = _refusal(c, text)
    assert "%te.fwd" in msg and "rng_state" in msg and "result" in msg, msg


def test_rng_state_computed_on_is_refused():
    c = Case(mask="CAUSAL", S=16, N=2, G=1, D=8)
    text = module_text(c).replace("  rng.copy = u32[2,4]{1,0} copy(rng)",
                                  "  rng.copy = u32[2,4]{1,0} add(rng, rng)")
    msg = _refusal(c, text)
    assert "%te.fwd" in msg and "rng_state" in msg and "'%rng.copy' (add)" in msg, msg


def test_backward_of_another_forward_is_refused():
    """A padded softmax_aux read by a backward call with other options."""
    c = Case(mask="PADDING", S=16, N=2, G=1, D=8)
    text = module_text(c, bwd_config=config(c, scaling_factor="5.000000e-01 : f64"))
    msg = _refusal(c, text)
    assert "softmax_aux" in msg and "backward" in msg and "other options" in msg, msg


def _through_a_loop(text: str) -> str:
    """``module_text``'s module with softmax_aux and rng_state stored as a scan does: put in a
    tuple behind an opt-barrier, carried through a 3-trip while loop that stacks them into
    [3, ...] buffers with dynamic-update-slice, read back with dynamic-slice after it."""
    aux_t = re.search(r"aux = (f32\[[^ ]+) get-tuple-element", text).group(1)
    dims = aux_t[4:aux_t.index("]")]
    stack_aux, stack_rng = f"f32[3,{dims}]{{4,3,2,1,0}}", "u32[3,2,4]{2,1,0}"
    carry = f"(s32[], {aux_t}, u32[2,4]{{1,0}}, {stack_aux}, {stack_rng})"
    zeros4 = ", ".join(["zero"] * 4)
    loop = f"""
body {{
  p = {carry} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = {aux_t} get-tuple-element(p), index=1
  r = u32[2,4]{{1,0}} get-tuple-element(p), index=2
  sa = {stack_aux} get-tuple-element(p), index=3
  sr = {stack_rng} get-tuple-element(p), index=4
  zero = s32[] constant(0)
  a1 = f32[1,{dims}]{{4,3,2,1,0}} reshape(a)
  r1 = u32[1,2,4]{{2,1,0}} reshape(r)
  sa2 = {stack_aux} dynamic-update-slice(sa, a1, i, {zeros4})
  sr2 = {stack_rng} dynamic-update-slice(sr, r1, i, zero, zero)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = {carry} tuple(i2, a, r, sa2, sr2)
}}

cond {{
  p = {carry} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
"""
    text = text.replace("ENTRY main {", loop + "\nENTRY main {")
    store = f"""  zero = s32[] constant(0)
  two = s32[] constant(2)
  fa = f32[] constant(0)
  fr = u32[] constant(0)
  sa0 = {stack_aux} broadcast(fa), dimensions={{}}
  sr0 = {stack_rng} broadcast(fr), dimensions={{}}
  kept = ({aux_t}, u32[2,4]{{1,0}}) tuple(aux, rng.copy)
  barrier = ({aux_t}, u32[2,4]{{1,0}}) opt-barrier(kept)
  ba = {aux_t} get-tuple-element(barrier), index=0
  br = u32[2,4]{{1,0}} get-tuple-element(barrier), index=1
  init = {carry} tuple(zero, ba, br, sa0, sr0)
  w = {carry} while(init), condition=cond, body=body
  wa = {stack_aux} get-tuple-element(w), index=3
  wr = {stack_rng} get-tuple-element(w), index=4
  da = f32[1,{dims}]{{4,3,2,1,0}} dynamic-slice(wa, two, zero, zero, zero, zero), dynamic_slice_sizes={{1,{dims}}}
  dr = u32[1,2,4]{{2,1,0}} dynamic-slice(wr, two, zero, zero), dynamic_slice_sizes={{1,2,4}}
  aux.w = {aux_t} reshape(da)
  rng.w = u32[2,4]{{1,0}} reshape(dr)
"""
    text = text.replace("  d_o = ", store + "  d_o = ")
    return text.replace("aux, rng.copy, o, d_o", "aux.w, rng.w, o, d_o")


@pytest.mark.parametrize("mask", ["CAUSAL", "PADDING_CAUSAL"])
def test_private_leaves_stored_through_a_scan_reach_the_backward(mask):
    """The llama 8B benchmark's form: the leaves go through a tuple, an opt-barrier and a
    loop's stacked carry before the backward reads them; interpreter and host give the same
    gradients as the direct module."""
    c = Case(mask=mask, S=32, N=4, G=2, D=16)
    args = make_inputs(c, 11, [32, 20], [17, 32]) if c.padding else make_inputs(c, 11)
    direct = flat(evaluate_module(parse_module(module_text(c)), args))
    module = parse_module(_through_a_loop(module_text(c)))
    stored = flat(evaluate_module(module, args))
    host = flat(compile_executable(module, "host").run(args))
    for name, d, s, h in zip(names(c), direct, stored, host):
        np.testing.assert_array_equal(np.asarray(s, np.float32), np.asarray(d, np.float32), err_msg=name)
        assert max_error(h, d) <= BOUND, name


def test_cli_refusal_exits_2_with_the_line(tmp_path):
    c = Case(backward=False, S=16, N=2, G=1, D=8)
    text = module_text(c, fwd_config=config(c, bias_type="2 : i64"))
    path = tmp_path / "te.hlo"
    path.write_text(text)
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if "te.fwd = " in ln)
    r = subprocess.run([sys.executable, "-m", "hlo_compile.cli.compile", str(path), "--emit=llvm"],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert "%te.fwd" in out and "bias_type=2" in out and f"{path}:{line}:" in out, out


# ---- the corpus -------------------------------------------------------------------------------

def _corpus() -> Path:
    return Path(os.environ.get("HLO_CORPUS", Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"))


def _benchmark(name: str):
    path = _corpus() / f"xla/repo/xla/tools/benchmarks/hlo/{name}.hlo"
    if not path.exists():
        pytest.skip(f"corpus module {path} is absent")
    return parse_module(path.read_text())


def _te_calls(module) -> list:
    return [i for c in module.computations for i in c.instructions
            if i.opcode == "custom-call" and i.attr("custom_call_target", "").startswith("te_fused_attn")]


def test_llama_70b_calls_are_read_and_lowered():
    """The 70B benchmark recomputes each layer's forward next to its backward: every
    softmax_aux goes straight to its backward call (the rng_state through a copy)."""
    module = _benchmark("hlo_llama31_70b_bf16_16x8")
    calls = _te_calls(module)
    read = [te_attention_call(i) for i in calls]
    assert len(read) == 3 and {r.fmha.mask for r in read} == {"PADDING_CAUSAL"}
    assert {r.fmha.group for r in read} == {8} and sum(r.backward for r in read) == 1
    lower_library_calls(module, frozenset())
    assert not _te_calls(module)


@pytest.mark.long
def test_llama_8b_stacked_leaves_are_followed_through_the_scan():
    """The 8B benchmark keeps each layer's softmax_aux and rng_state through a rematerialisation
    barrier for its backward call: followed there, every call is lowered."""
    module = _benchmark("hlo_llama31_8b_bf16_1x8")
    assert len(_te_calls(module)) == 64
    lower_library_calls(module, frozenset())
    assert not _te_calls(module)


def test_llama_8b_context_parallel_packed_kv_calls_are_lowered():
    """The context-parallel benchmark (ring attention over 4 partitions) calls TE with qkv_layout 7
    (causal on the diagonal block, unmasked elsewhere) and combines the partial outputs through
    softmax_aux, which without a padding mask is the log-sum-exp any op may read."""
    module = _benchmark("hlo_llama3_8b_cp_bf16_1x4")
    read = [te_attention_call(i) for i in _te_calls(module)]
    assert len(read) == 12 and all(r.packed_kv for r in read)
    assert {r.fmha.mask for r in read} == {"CAUSAL", "NO_MASK"}
    lower_library_calls(module, frozenset())
    assert not _te_calls(module)
