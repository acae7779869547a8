"""Attention lowered over chunks of keys (``passes/fmha_chunked.py``): a ``while`` loop whose
steps read C keys, so no f32 ``[B, N, T, S]`` score tensor is made.

Small chunks are forced (the lowering functions' ``chunk``) on small problems: every mask, GQA,
T != S, S not a multiple of C (the last chunk padded and masked), bf16 and f16, forward and
backward, bias and dBias, for cuDNN's calls (modules of ``test_fmha_calls.py``) and Transformer
Engine's (``test_te_attention.py``). Each case is checked against the call on the interpreter
(which computes the plain math), the chunked module both on the interpreter and on host, and
against the whole (unchunked) lowering on host.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import test_te_attention as te
from test_fmha_calls import EPS, Case, assert_close, make_inputs, module_text, names

from hlo_compile import parse_module
from hlo_compile.hlo.calls.fmha import fmha_call
from hlo_compile.hlo.calls.library_targets import FMHA_TARGETS, TE_ATTENTION_TARGETS
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes.fmha_chunked import SCORES_LIMIT, key_chunk
from hlo_compile.passes.fmha_lowering import keys_per_step, lower_fmha
from hlo_compile.passes.library_calls import lower_library_calls
from hlo_compile.passes.te_attention_lowering import check_module, lower_te_attention
from hlo_compile.runtime.executable import compile_executable


def lower_attention(text: str, *, chunk: int | None = None, limit: int = SCORES_LIMIT):
    """The module of ``text`` with its attention calls lowered (over ``chunk`` keys a step when
    given), printed and read back (valid text: every computation before its callers)."""
    module = parse_module(text)
    check_module(module)
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            target = inst.attr("custom_call_target", None) if inst.opcode == "custom-call" else None
            if target in FMHA_TARGETS:
                lower_fmha(comp, inst, limit=limit, chunk=chunk)
            elif target in TE_ATTENTION_TARGETS:
                lower_te_attention(comp, inst, limit=limit, chunk=chunk)
    return parse_module(module.to_text())


def flat(r) -> list[np.ndarray]:
    return [np.asarray(x) for x in (r if isinstance(r, tuple) else (r,))]


def loops(module) -> list:
    return [i for c in module.computations for i in c.instructions if i.opcode == "while"]


def f32_shapes(module) -> set[tuple[int, ...]]:
    """The dimensions of every f32 array an instruction of ``module`` makes."""
    return {tuple(i.shape.dimensions) for c in module.computations for i in c.instructions
            if i.shape.is_array and i.shape.element_type == "f32"}


# ---- cuDNN's calls ----------------------------------------------------------------------------

CUDNN = [   # (case, keys per step, q_seqlen, kv_seqlen)
    (Case(T=16, S=24, backward=True, training=True), 8, None, None),
    (Case(layout="BNTH", et="f16", N=4, Nk=2, T=8, S=20, mask="PADDING", bias=(2, 1, 8, 20), backward=True,
          training=True), 6, [8, 5], [17, 3]),
    (Case(T=24, S=16, H=8, mask="CAUSAL", backward=True, training=True), 5, None, None),
    (Case(et="f16", N=6, Nk=3, T=16, S=24, mask="PADDING_CAUSAL", window=5, bias=(1, 1, 16, 24), backward=True,
          training=True), 7, [12, 16], [24, 0]),
    (Case(N=4, Nk=1, T=12, S=30, mask="CAUSAL", window=4, training=True), 4, None, None),
    (Case(layout="BNTH", T=16, S=17, mask="PADDING", bias=(1, 4, 16, 17), backward=True, dbias=False), 3,
     [16, 9], [11, 17]),
]


@pytest.mark.parametrize("c, chunk, q_lens, kv_lens", CUDNN,
                         ids=[f"{c.mask}-{c.et}-S{c.S}-C{k}" for c, k, _, _ in CUDNN])
def test_cudnn_chunked_is_the_call(c, chunk, q_lens, kv_lens):
    text = module_text(c)
    chunked = lower_attention(text, chunk=chunk)
    whole = lower_attention(text)
    assert len(loops(chunked)) == 1 + c.backward and not loops(whole)
    # no f32 score tensor of all keys (padded or not), only a chunk's
    padded = -(-c.S // chunk) * chunk
    assert c.H not in (c.S, padded, chunk)
    made = f32_shapes(chunked)
    assert (c.B, c.N, c.T, chunk) in made and not {(c.B, c.N, c.T, c.S), (c.B, c.N, c.T, padded)} & made
    args = make_inputs(c, 21, q_lens, kv_lens)
    want = flat(evaluate_module(parse_module(text), args))
    interp = flat(evaluate_module(chunked, args))
    host = flat(compile_executable(chunked, "host").run(args))
    host_whole = flat(compile_executable(whole, "host").run(args))
    eps = EPS[c.et]
    for name, w, i, h, hw in zip(names(c), want, interp, host, host_whole):
        bound = 1e-5 if name == "stats" else 2 * eps
        tag = f"{c} C={chunk}:{name}"
        assert_close(i, w, bound, "chunked interp~call " + tag)
        assert_close(h, w, bound, "chunked host~call " + tag)
        assert_close(h, hw, bound, "chunked host~whole host " + tag)
    if c.mask == "PADDING_CAUSAL":    # batch 1 has no key: O is 0 there, stats -inf; padded query rows
        o, stats = (np.asarray(x, np.float64) for x in host[:2])
        assert not o[1].any() and np.isneginf(stats[1]).all()
        assert not o[0, 12:].any() and not stats[0, :, 12:].any() and np.isfinite(stats[0, :, :12]).all()


def test_forward_inference_without_stats():
    c = Case(T=16, S=16, mask="CAUSAL")
    text = module_text(c)
    chunked = lower_attention(text, chunk=5)
    args = make_inputs(c, 22)
    (want,) = flat(evaluate_module(parse_module(text), args))
    (got,) = flat(compile_executable(chunked, "host").run(args))
    assert_close(got, want, 2 * EPS[c.et], "chunked inference O")


# ---- Transformer Engine's calls ---------------------------------------------------------------

TE = [   # (case, keys per step, q lengths, kv lengths)
    (te.Case(mask="NO_MASK", B=2, S=24, T=16, N=4, G=2, D=8), 8, None, None),
    (te.Case(mask="PADDING", B=2, S=21, N=4, G=1, D=8), 5, [21, 10], [0, 21]),
    (te.Case(mask="CAUSAL", B=2, S=16, T=20, N=4, G=2, D=8), 6, None, None),
    (te.Case(mask="PADDING_CAUSAL", B=2, S=26, N=4, G=2, D=16), 8, [26, 11], [19, 26]),
]


@pytest.mark.parametrize("c, chunk, q_lens, kv_lens", TE, ids=[f"{c.mask}-S{c.S}-C{k}" for c, k, _, _ in TE])
def test_te_chunked_is_the_call(c, chunk, q_lens, kv_lens):
    text = te.module_text(c)
    chunked = lower_attention(text, chunk=chunk)
    whole = lower_attention(text)
    assert len(loops(chunked)) == 2 and not loops(whole)
    args = te.make_inputs(c, 23, q_lens, kv_lens)
    want = flat(evaluate_module(parse_module(text), args))
    interp = flat(evaluate_module(chunked, args))
    host = flat(compile_executable(chunked, "host").run(args))
    host_whole = flat(compile_executable(whole, "host").run(args))
    for name, w, i, h, hw in zip(te.names(c), want, interp, host, host_whole):
        tag = f"{c} C={chunk}:{name}"
        assert_close(i, w, 2 * EPS["bf16"], "chunked interp~call " + tag)
        assert_close(h, w, 2 * EPS["bf16"], "chunked host~call " + tag)
        assert_close(h, hw, 2 * EPS["bf16"], "chunked host~whole host " + tag)


def test_te_packed_kv_chunked():
    """qkv_layout 7 (k and v packed as kv[B, S, 2, H, D]) over chunks: the unpacked module's results."""
    c = te.Case(mask="PADDING_CAUSAL", S=20, N=4, G=2, D=8)
    args = te.make_inputs(c, 24, [20, 9], [13, 20])
    want = flat(evaluate_module(parse_module(te.module_text(c)), args))
    chunked = lower_attention(te._packed_kv(c), chunk=6)
    assert len(loops(chunked)) == 2
    for name, w, h in zip(te.names(c), want, flat(compile_executable(chunked, "host").run(args))):
        assert_close(h, w, 2 * EPS["bf16"], f"packed kv chunked {name}")


# ---- when and how it chunks -------------------------------------------------------------------

def test_key_chunk_bounds_the_scores():
    info = fmha_call(next(i for i in parse_module(module_text(Case(B=2, N=4, T=16, S=24))).entry.instructions
                          if i.opcode == "custom-call"))
    per_key = 4 * 2 * 4 * 16                       # bytes of one key's f32 scores
    assert key_chunk(info, per_key * 24) is None   # fits whole
    assert key_chunk(info, per_key * 23) == 16     # the largest power of two that fits
    assert key_chunk(info, per_key * 8) == 8 and key_chunk(info, per_key * 5) == 4
    assert key_chunk(info, per_key - 1) == 1       # one key a step at least
    assert keys_per_step(info, chunk=24) is None and keys_per_step(info, chunk=23) == 23
    with pytest.raises(ValueError):
        keys_per_step(info, chunk=0)
    # Llama 3.1 8B's attention (B=2, N=32, T=S=8192): 16 GiB of scores whole, 128 keys a step
    assert 4 * 2 * 32 * 8192 * 8192 == 16 * 2 ** 30
    assert 4 * 2 * 32 * 8192 * 128 == SCORES_LIMIT


def test_small_problems_stay_whole_and_the_limit_chunks():
    c = Case(T=16, S=24, backward=True, training=True)
    text = module_text(c)
    module = parse_module(text)
    lower_library_calls(module, frozenset({"fmha"}))
    assert not loops(module)
    by_limit = lower_attention(text, limit=4 * c.B * c.N * c.T * 8)     # 8 keys' scores
    assert len(loops(by_limit)) == 2
    trips = {re.search(r"constant\((\d+)\)", by_limit.to_text()[m.start():]).group(1)
             for m in re.finditer(r"_cond \(", by_limit.to_text())}
    assert trips == {"3"}                           # 24 keys in 3 steps of 8


def test_chunked_lowering_golden():
    """The loop's structure: K and V padded to whole chunks before it, the chunk's start i * C,
    dynamic-slices of C keys, the masks at the chunk's key positions, the running max and
    rescaling, the trip count in the condition; the backward writes dK and dV with
    dynamic-update-slice and drops the padding keys after its loop."""
    c = Case(N=4, Nk=2, T=8, S=10, H=8, mask="PADDING_CAUSAL", backward=True, training=True)
    text = lower_attention(module_text(c), chunk=4).to_text()
    expected = [
        # forward body: (i, K, V, q_seqlen, kv_seqlen, Q, m, l, acc)
        r"%fmha.fwd.key_loop_body \(fmha.fwd.key_loop.body.param: \(s32\[\], f32\[2,2,12,8\], f32\[2,2,12,8\], "
        r"s32\[2\], s32\[2\], /\*index=5\*/f32\[2,4,8,8\], f32\[2,4,8\], f32\[2,4,8\], f32\[2,4,8,8\]\)\)",
        r"%fmha.fwd.multiply = s32\[\] multiply\(s32\[\] %fmha.fwd.key_loop.body.gte, s32\[\] %\S+\)",   # i * C
        r"= f32\[2,2,4,8\]\{3,2,1,0\} dynamic-slice\(f32\[2,2,12,8\]\{3,2,1,0\} %fmha.fwd.key_loop.body.gte.1, "
        r"s32\[\] %\S+, s32\[\] %\S+, s32\[\] %fmha.fwd.multiply, s32\[\] %\S+\), dynamic_slice_sizes=\{2,2,4,8\}",
        r"= f32\[2,4,8,4\]\{3,2,1,0\} dot\(",                                        # the chunk's scores
        r"%fmha.fwd.add = s32\[2,4,8,4\]\{3,2,1,0\} add\(s32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.iota.1, ",  # key positions
        r"compare\(s32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.add, s32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.iota\), direction=GT",
        r"compare\(s32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.add, \S+ %\S+\), direction=GE",         # kv_seqlen
        r"compare\(s32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.iota, \S+ %\S+\), direction=GE",        # q_seqlen
        r"%(\S+) = s32\[\] constant\(10\)",
        r"compare\(s32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.add, \S+ %\S+\), direction=GE",         # past key 10
        r"= f32\[2,4,8\]\{2,1,0\} maximum\(f32\[2,4,8\]\{2,1,0\} %fmha.fwd.key_loop.body.gte.6, ",   # running max
        r"= f32\[2,4,8\]\{2,1,0\} subtract\(f32\[2,4,8\]\{2,1,0\} %fmha.fwd.key_loop.body.gte.6, ",  # m - m'
        r"= f32\[2,4,8\]\{2,1,0\} multiply\(f32\[2,4,8\]\{2,1,0\} %fmha.fwd.key_loop.body.gte.7, ",  # l rescaled
        r"= f32\[2,4,8,8\]\{3,2,1,0\} multiply\(f32\[2,4,8,8\]\{3,2,1,0\} %fmha.fwd.key_loop.body.gte.8, ",  # acc
        r"= f32\[2,4,8,8\]\{3,2,1,0\} dot\(f32\[2,4,8,4\]\{3,2,1,0\} %fmha.fwd.exponential, ",
        r"ROOT %fmha.fwd.key_loop.next = \(s32\[\], ",
        r"%fmha.fwd.key_loop_cond \(",
        r"%fmha.fwd.key_loop.cond.gte = s32\[\] get-tuple-element\(.*index=0",
        r"ROOT %\S+ = pred\[\] compare\(s32\[\] %fmha.fwd.key_loop.cond.gte, s32\[\] %\S+\), direction=LT",
        # backward body: the chunks of dK and dV written into their results
        r"%fmha.bwd.key_loop_body \(",
        r"= bf16\[2,2,12,8\]\{3,2,1,0\} dynamic-update-slice\(bf16\[2,2,12,8\]\{3,2,1,0\} "
        r"%fmha.bwd.key_loop.body.gte.10, bf16\[2,2,4,8\]\{3,2,1,0\} %\S+, s32\[\] %\S+, s32\[\] %\S+, "
        r"s32\[\] %fmha.bwd.multiply.1,",
        r"= bf16\[2,2,12,8\]\{3,2,1,0\} dynamic-update-slice\(bf16\[2,2,12,8\]\{3,2,1,0\} "
        r"%fmha.bwd.key_loop.body.gte.11, ",
        # ENTRY: K and V padded to 12 keys, the two loops, dK and dV without the padding keys
        r"ENTRY %main",
        r"= f32\[2,2,12,8\]\{3,2,1,0\} pad\(f32\[2,2,10,8\]\{3,2,1,0\} %\S+, f32\[\] %\S+\), padding=0_0x0_0x0_2x0_0",
        r"%fmha.fwd.key_loop = \(s32\[\], .* while\(.*condition=%fmha.fwd.key_loop_cond, body=%fmha.fwd.key_loop_body",
        r"%fmha.bwd.key_loop = \(s32\[\], .* while\(.*condition=%fmha.bwd.key_loop_cond, body=%fmha.bwd.key_loop_body",
        r"= bf16\[2,2,10,8\]\{3,2,1,0\} slice\(bf16\[2,2,12,8\]\{3,2,1,0\} %fmha.bwd.key_loop.dk\), "
        r"slice=\{\[0:2\], \[0:2\], \[0:10\], \[0:8\]\}",
    ]
    at = 0
    for pattern in expected:
        m = re.compile(pattern).search(text, at)
        assert m, f"{pattern!r} not found after offset {at} in\n{text}"
        at = m.end()
    # the forward loop runs 3 steps of 4 keys
    cond = text[text.index("%fmha.fwd.key_loop_cond ("):]
    assert re.search(r"s32\[\] constant\(3\)", cond[:cond.index("\n}\n")])


# ---- the corpus -------------------------------------------------------------------------------

def test_llama_8b_attention_is_chunked():
    """Llama 3.1 8B (B=2, N=32, S=T=8192): every TE call becomes a loop of 64 steps of 128 keys;
    no f32 array of the lowered module holds more than 256 MiB (the whole scores were 16 GiB)."""
    module = te._benchmark("hlo_llama31_8b_bf16_1x8")
    lower_library_calls(module, frozenset())
    assert not te._te_calls(module)
    assert len(loops(module)) >= 64
    attention = [i for c in module.computations for i in c.instructions
                 if i.name.startswith("te_fused_attn") and i.shape.is_array]
    assert max(i.shape.element_count() * (4 if i.shape.element_type == "f32" else 2) for i in attention) \
        <= SCORES_LIMIT
