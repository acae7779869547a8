"""Transformer Engine's fused attention calls (``te_fused_attn_forward_ffi`` /
``te_fused_attn_backward_ffi``, cuDNN attention through XLA's typed FFI) read once, as the
cuDNN fused-attention call (``fmha_call.py``) they compute.

TE's JAX extension (``transformer_engine/jax/cpp_extensions/attention.py``) writes, in order:

- forward: ``q, k, v, bias, seed, q_cu_seqlens, kv_cu_seqlens, q_seq_offsets, k_seq_offsets,
  q_segment_ids, kv_segment_ids, q_segment_pos, kv_segment_pos`` -> ``(O, softmax_aux,
  rng_state, u8[workspace])``;
- backward: ``q, k, v, bias, softmax_aux, rng_state, O, dO, q_cu_seqlens, kv_cu_seqlens`` and
  the same six offset/segment operands -> ``(dQ, dK, dV, dBias, u8[workspace])``.

Its ``backend_config`` is an MLIR dictionary attribute (``{attn_heads = 64 : i64, ...,
is_training = true, scaling_factor = 1.000000e+00 : f64}``), not JSON. Supported, exactly:
``qkv_layout`` 9 (NVTE_BSHD_BSHD_BSHD: separate ``[B, S, H, D]`` q, k, v) and 7
(NVTE_BSHD_BS2HD: k and v packed as ``kv[B, S, 2, H, D]`` in the k operand, the v operand empty;
the backward's dK result is then ``dKV[B, S, 2, H, D]`` and its dV empty), ``bias_type`` 0
(no bias), dropout 0, ``mask_type`` 0-3 (NVTE_NO_MASK, PADDING, CAUSAL, PADDING_CAUSAL; causal
aligned top-left), one segment per sequence, no sliding window, GQA (``num_gqa_groups`` key/value
heads). With a padding mask the sequence lengths are ``cu_seqlens[b+1] - cu_seqlens[b]``
(valid tokens first in each batch row); padded query rows give zero output (TE's own tests
check that) and other masks ignore the lengths, as TE does.

``softmax_aux`` is cuDNN's softmax statistics (TE's F16_arbitrary_seqlen backend, the one
for these shapes): ``f32[B, H, S, 1]``, the log-sum-exp of each row of the scaled, masked
scores, computed here exactly; only its padded rows (padding masks) are unspecified.
``rng_state`` is TE's generator state (the seed and a process-wide offset counter), which no
module can reproduce and which is unused without dropout. Those private bits are accepted only
when nothing but backward calls read them, wherever they are stored or moved on the way
(``check_private_flows``); then any consistent encoding is exact. Everything else is refused
with ``HloUnsupportedError`` naming the call, its target and its line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import HloUnsupportedError
from .fmha import CallReader, FmhaCall, Roles
from .. import value_flow
from ..ir import HloInstruction, HloModule
from .library_targets import TE_ATTENTION_BACKWARD, TE_ATTENTION_FORWARD, TE_ATTENTION_TARGETS
from ..shape import Shape

MASKS = {0: "NO_MASK", 1: "PADDING", 2: "CAUSAL", 3: "PADDING_CAUSAL"}
_REFUSED_MASKS = {4: "CAUSAL_BOTTOM_RIGHT", 5: "PADDING_CAUSAL_BOTTOM_RIGHT"}
BSHD_BSHD_BSHD = 9
BSHD_BS2HD = 7                       # q [B, S, H, D]; k and v packed as kv [B, S, 2, H, D]
BSHD = Roles(batch=0, heads=2, seq=1, feature=3)          # [B, S, H, D]
# config keys whose meaning is known; any other key is refused (it may change the math)
_KEYS = frozenset({"attn_heads", "bias_batch", "bias_heads", "bias_type", "deterministic", "dropout_probability",
                   "input_batch", "is_training", "kv_max_seqlen", "mask_type", "max_segments_per_seq",
                   "num_gqa_groups", "q_max_seqlen", "qk_head_dim", "qkv_layout", "scaling_factor", "v_head_dim",
                   "window_size_left", "window_size_right", "softmax_type", "return_max_logit",
                   "bottom_right_diagonal"})
_FORWARD_OPERANDS = ("q", "k", "v", "bias", "seed", "q_cu_seqlens", "kv_cu_seqlens", "q_seq_offsets",
                     "k_seq_offsets", "q_segment_ids", "kv_segment_ids", "q_segment_pos", "kv_segment_pos")
_BACKWARD_OPERANDS = ("q", "k", "v", "bias", "softmax_aux", "rng_state", "o", "d_o", "q_cu_seqlens",
                      "kv_cu_seqlens", "q_seq_offsets", "k_seq_offsets", "q_segment_ids", "kv_segment_ids",
                      "q_segment_pos", "kv_segment_pos")
_EMPTY_OPERANDS = ("bias", "q_seq_offsets", "k_seq_offsets", "q_segment_ids", "kv_segment_ids", "q_segment_pos",
                   "kv_segment_pos")
AUX, RNG = 1, 2                     # the forward's softmax_aux and rng_state result leaves
_AUX_OPERAND, _RNG_OPERAND = 4, 5   # where the backward reads them


@dataclass(frozen=True)
class TeAttentionCall:
    """One TE attention call: ``fmha`` is the cuDNN attention it computes, with Q, K, V (and O,
    dO) in ``[B, S, H, D]`` and its results canonical ``[B, H, S, D]`` (the caller transposes
    them to TE's ``[B, S, H, D]``); operand fields are operand indices."""

    name: str
    target: str
    backward: bool
    config: dict[str, Any]
    fmha: FmhaCall
    q_cu_seqlens: int
    kv_cu_seqlens: int
    result_shapes: tuple[Shape, ...]
    packed_kv: bool = False          # qkv_layout 7: ``fmha`` reads k and v split from the k operand


def parse_mlir_dict(text: str) -> dict[str, Any] | None:
    """An MLIR dictionary attribute of scalars (``{a = 1 : i64, b = true, c = 1.0e+00 : f64}``)
    as a dict; None when ``text`` is not one."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    body = text[1:-1].strip()
    out: dict[str, Any] = {}
    if not body:
        return out
    for entry in body.split(","):
        m = _ENTRY.fullmatch(entry.strip())
        if m is None:
            return None
        key, value, typ = m.group(1), m.group(2), m.group(3)
        if value in ("true", "false"):
            out[key] = value == "true"
        elif typ is not None and typ.startswith(("i", "si", "ui")) or typ is None and _INT.fullmatch(value):
            if not _INT.fullmatch(value):
                return None
            out[key] = int(value)
        elif _FLOAT.fullmatch(value):
            out[key] = float(value)
        else:
            return None
    return out


_ENTRY = re.compile(r"([A-Za-z_][\w.$]*)\s*=\s*([^:]+?)\s*(?::\s*([a-z][a-z0-9]*))?")
_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*([eE][-+]?\d+)?|inf|nan)")


def te_attention_call(inst: HloInstruction) -> TeAttentionCall:
    """Read the TE attention call ``inst``; HloUnsupportedError (naming it) for anything
    malformed or unsupported. Where its private leaves go is the module's check
    (``check_private_flows``)."""
    return _Reader(inst).read()


def _refuse(inst: HloInstruction, why: str) -> NoReturn:
    target = inst.attr("custom_call_target", "")
    raise HloUnsupportedError(f"custom-call '%{inst.name}' ({target}): {why}", inst.location)


class _Reader(CallReader):
    def config(self) -> dict[str, Any]:
        raw = self.inst.attr("backend_config", None)
        cfg = parse_mlir_dict(raw) if isinstance(raw, str) else None
        if cfg is None:
            self.refuse(f"its backend_config is not an MLIR dictionary of scalars: {raw!r}")
        unknown = sorted(set(cfg) - _KEYS)
        if unknown:
            self.refuse(f"unknown backend_config key(s) {', '.join(unknown)} (their meaning is unverified)")
        for key in ("qkv_layout", "mask_type", "bias_type", "scaling_factor", "input_batch", "attn_heads",
                    "num_gqa_groups", "q_max_seqlen", "kv_max_seqlen", "qk_head_dim", "v_head_dim"):
            if key not in cfg:
                self.refuse(f"its backend_config has no {key}")
        return cfg

    def options(self, cfg: dict[str, Any]) -> str:
        """Refuse what is not supported; the mask's name."""
        def value(key, default):
            v = cfg.get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                self.refuse(f"{key}={v!r} is not a number")
            return v
        if value("qkv_layout", 0) not in (BSHD_BSHD_BSHD, BSHD_BS2HD):
            self.refuse(f"qkv_layout={cfg['qkv_layout']} is not supported (only {BSHD_BSHD_BSHD}, "
                        f"NVTE_BSHD_BSHD_BSHD: separate [B, S, H, D] q, k and v, and {BSHD_BS2HD}, "
                        "NVTE_BSHD_BS2HD: k and v packed as [B, S, 2, H, D])")
        if value("bias_type", 0) != 0:
            self.refuse(f"bias_type={cfg['bias_type']} is not supported (only 0, NVTE_NO_BIAS)")
        if value("dropout_probability", 0.0) != 0:
            self.refuse(f"dropout_probability={cfg['dropout_probability']:g}: cuDNN draws the dropout mask "
                        "inside its kernel from its own Philox stream, which cannot be reproduced here")
        if value("max_segments_per_seq", 1) != 1:
            self.refuse(f"max_segments_per_seq={cfg['max_segments_per_seq']}: packed sequences are not supported")
        if (value("window_size_left", -1), value("window_size_right", -1)) != (-1, -1):
            self.refuse(f"sliding window ({cfg.get('window_size_left')}, {cfg.get('window_size_right')}) is not "
                        "supported (only -1, -1)")
        if value("softmax_type", 0) != 0:
            self.refuse(f"softmax_type={cfg['softmax_type']} is not supported (only 0, the vanilla softmax)")
        for flag in ("return_max_logit", "bottom_right_diagonal"):
            if cfg.get(flag, False) is not False:
                self.refuse(f"{flag}={cfg[flag]!r} is not supported")
        mask = value("mask_type", 0)
        if mask in _REFUSED_MASKS:
            self.refuse(f"mask_type={mask} (NVTE_{_REFUSED_MASKS[mask]}_MASK) is not supported")
        if mask not in MASKS:
            self.refuse(f"unknown mask_type={mask}")
        return MASKS[mask]

    def read(self) -> TeAttentionCall:
        inst, target = self.inst, self.target
        if target not in TE_ATTENTION_TARGETS:
            self.refuse("not a Transformer Engine attention target this project knows")
        if inst.called_computations():
            self.refuse("called computations are not supported")
        backward = target == TE_ATTENTION_BACKWARD
        cfg = self.config()
        mask = self.options(cfg)
        names = _BACKWARD_OPERANDS if backward else _FORWARD_OPERANDS
        if len(inst.operands) != len(names):
            self.refuse(f"expected {len(names)} operands ({', '.join(names)}), got {len(inst.operands)}")
        pos = {n: i for i, n in enumerate(names)}
        packed = cfg["qkv_layout"] == BSHD_BS2HD
        qs, ks, vs = (self.operand_shape(pos[n], n) for n in ("q", "k", "v"))
        if packed:
            ks, vs = self.split_kv(ks, vs, qs.element_type)
        for s, what in ((qs, "q"), (ks, "k"), (vs, "v")):
            if s.rank != 4:
                self.refuse(f"{what} should be [B, S, H, D] (rank 4), got {s.to_text(False)}")
        et = qs.element_type
        if et not in ("f16", "bf16") or ks.element_type != et or vs.element_type != et:
            self.refuse(f"q, k and v should all be f16 or all bf16, got {qs.element_type}, {ks.element_type}, "
                        f"{vs.element_type}")
        B, T, N, H = qs.dimensions
        kB, S, Nk, kH = ks.dimensions
        vB, vS, vN, Hv = vs.dimensions
        if (kB, vB) != (B, B) or kH != H or (vS, vN) != (S, Nk) or Nk == 0 or N % Nk:
            self.refuse(f"q {qs.to_text(False)}, k {ks.to_text(False)} and v {vs.to_text(False)} do not agree "
                        "(BSHD, key/value heads dividing the query heads)")
        declared = {"input_batch": B, "attn_heads": N, "num_gqa_groups": Nk, "q_max_seqlen": T,
                    "kv_max_seqlen": S, "qk_head_dim": H, "v_head_dim": Hv}
        for key, size in declared.items():
            if cfg[key] != size:
                self.refuse(f"backend_config {key}={cfg[key]} does not match the operands ({size})")
        for n in _EMPTY_OPERANDS:
            s = self.operand_shape(pos[n], n)
            if s.rank != 1 or s.dimensions[0] != 0:
                self.refuse(f"operand {pos[n]} ({n}) should be empty, got {s.to_text(False)}")
        for n in ("q_cu_seqlens", "kv_cu_seqlens"):
            self.expect(self.operand_shape(pos[n], n), (B + 1,), {"s32"}, f"operand {pos[n]} ({n})")
        o_t = (B, T, N, Hv)
        if backward:
            aux = self.operand_shape(pos["softmax_aux"], "softmax_aux")
            self.expect(aux, (B, N, T, 1), {"f32"}, "operand 4 (softmax_aux)")
            rng = self.operand_shape(pos["rng_state"], "rng_state")
            if rng.rank != 2 or rng.dimensions[1] != 4 or rng.element_type != "u32":
                self.refuse(f"operand 5 (rng_state) should be u32[n,4], got {rng.to_text(False)}")
            self.expect(self.operand_shape(pos["o"], "o"), o_t, {et}, "operand 6 (output)")
            self.expect(self.operand_shape(pos["d_o"], "d_o"), o_t, {et}, "operand 7 (doutput)")
        else:
            seed = self.operand_shape(pos["seed"], "seed")
            if seed.rank != 1 or seed.element_type != "u32":
                self.refuse(f"operand 4 (seed) should be u32[n], got {seed.to_text(False)}")
        leaves = self.results(backward, et, (B, T, N, S, Nk, H, Hv), packed)
        padding = mask in ("PADDING", "PADDING_CAUSAL")
        n_ops = len(inst.operands)
        # the cuDNN call this computes; the interpreter and the lowering append operands after the
        # call's own, in this order: the q and kv sequence lengths (n_ops, n_ops + 1), k and v
        # split from the packed kv (qkv_layout 7), the backward's [B, N, T] stats
        k_at, v_at = (n_ops + 2, n_ops + 3) if packed else (1, 2)
        stats_at = n_ops + 4 if packed else n_ops + 2
        ws = Shape.array("u8", (0,))
        if backward:
            fmha_results = (Shape.array(et, (B, N, T, H)), Shape.array(et, (B, Nk, S, H)),
                            Shape.array(et, (B, Nk, S, Hv)), ws)
        else:
            fmha_results = (Shape.array(et, (B, N, T, Hv)), Shape.array("f32", (B, N, T)), ws)
        fmha = FmhaCall(
            name=inst.name, target=target, backward=backward, element_type=et,
            scale=float(cfg["scaling_factor"]), mask=mask, window=0, batch=B, heads=N, kv_heads=Nk, q_len=T,
            kv_len=S, qk_dim=H, v_dim=Hv, q=0, k=k_at, v=v_at, q_roles=BSHD, k_roles=BSHD, v_roles=BSHD,
            bias=None, bias_dims=None, q_seqlen=n_ops if padding else None, kv_seqlen=n_ops + 1 if padding else None,
            stats_in=stats_at if backward else None, d_o=pos.get("d_o"), o_in=pos.get("o"),
            do_roles=BSHD if backward else None, result_shapes=fmha_results,
            stats=None if backward else 1, dbias=None)
        return TeAttentionCall(name=inst.name, target=target, backward=backward, config=cfg, fmha=fmha,
                               q_cu_seqlens=pos["q_cu_seqlens"], kv_cu_seqlens=pos["kv_cu_seqlens"],
                               result_shapes=leaves, packed_kv=packed)

    def split_kv(self, kv: Shape, v: Shape, et: str) -> tuple[Shape, Shape]:
        """The [B, S, H, D] k and v of a packed ``kv[B, S, 2, H, D]`` (the v operand empty)."""
        if kv.rank != 5 or kv.dimensions[2] != 2:
            self.refuse(f"qkv_layout=7: operand 1 should be the packed kv [B, S, 2, H, D], got {kv.to_text(False)}")
        if v.rank != 1 or v.dimensions[0] != 0:
            self.refuse(f"qkv_layout=7: operand 2 (v) should be empty, got {v.to_text(False)}")
        B, S, _, Nk, H = kv.dimensions
        half = Shape.array(kv.element_type, (B, S, Nk, H))
        return half, half

    def results(self, backward: bool, et: str, sizes, packed: bool) -> tuple[Shape, ...]:
        B, T, N, S, Nk, H, Hv = sizes
        shape = self.inst.shape
        if not shape.is_tuple or not all(s.is_array for s in shape.tuple_shapes):
            self.refuse(f"the result should be a tuple of arrays, got {shape.to_text(False)}")
        leaves = tuple(shape.tuple_shapes)
        want = 5 if backward else 4
        if len(leaves) != want:
            self.refuse(f"the result should have {want} elements, got {len(leaves)}")
        ws = leaves[-1]
        if ws.rank != 1 or ws.element_type not in ("u8", "s8"):
            self.refuse(f"the last result element should be the u8 workspace, got {ws.to_text(False)}")
        if backward:
            self.expect(leaves[0], (B, T, N, H), {et}, "dQ (result 0)")
            if packed:
                self.expect(leaves[1], (B, S, 2, Nk, H), {et}, "dKV (result 1)")
                self.expect(leaves[2], (0,), {et}, "dV (result 2, empty with a packed kv)")
            else:
                self.expect(leaves[1], (B, S, Nk, H), {et}, "dK (result 1)")
                self.expect(leaves[2], (B, S, Nk, Hv), {et}, "dV (result 2)")
            self.expect(leaves[3], (0,), {et}, "dBias (result 3, empty without a bias)")
        else:
            self.expect(leaves[0], (B, T, N, Hv), {et}, "O (result 0)")
            self.expect(leaves[AUX], (B, N, T, 1), {"f32"}, "softmax_aux (result 1)")
            rng = leaves[RNG]
            if rng.rank != 2 or rng.dimensions[1] != 4 or rng.element_type != "u32":
                self.refuse(f"rng_state (result 2) should be u32[n,4], got {rng.to_text(False)}")
        return leaves


# ---- the private leaves -------------------------------------------------------------------------

def _is_target(inst: HloInstruction, target: str) -> bool:
    return inst.opcode == "custom-call" and inst.attr("custom_call_target", "") == target


def private_leaves(call: TeAttentionCall) -> tuple[int, ...]:
    """The result leaves of forward ``call`` whose bits are TE's own: rng_state always (a
    process-wide offset counter of TE's), softmax_aux only under a padding mask (its padded rows
    are unspecified; otherwise it is cuDNN's ``[B, H, S, 1]`` log-sum-exp statistics, computed
    here exactly)."""
    if call.backward:
        return ()
    return (AUX, RNG) if call.fmha.mask in ("PADDING", "PADDING_CAUSAL") else (RNG,)


def check_private_flows(module: HloModule) -> None:
    """Refuse the first TE forward call of ``module`` whose private leaves (``private_leaves``)
    are read by anything but a backward call at their operand: they may be stored and moved
    anywhere on the way (a scan's carry, a rematerialisation barrier: ``value_flow``), but
    never computed on nor returned. A backward reading a padded softmax_aux must have its
    forward's options."""
    sites = None
    for comp in module.computations:
        for inst in comp.instructions:
            if not _is_target(inst, TE_ATTENTION_FORWARD):
                continue
            call = _Reader(inst).read()
            for leaf in private_leaves(call):
                sites = sites or value_flow.call_sites(module)
                why = _why_read(inst, leaf, value_flow.follow(module, [(inst, (leaf,))], sites))
                if why:
                    what = "softmax_aux" if leaf == AUX else "rng_state"
                    _refuse(inst, f"its {what} (result {leaf}) is TE's private format and may only be read by a "
                                  f"te_fused_attn_backward_ffi call, but {why}")


def _why_read(fwd: HloInstruction, leaf: int, flow: value_flow.Flow) -> str | None:
    if flow.reaches_result:
        return "it reaches the module's result"
    operand = _AUX_OPERAND if leaf == AUX else _RNG_OPERAND
    for user, k in flow.readers:
        if not _is_target(user, TE_ATTENTION_BACKWARD) or k != operand:
            return f"'%{user.name}' ({user.opcode}) reads it as operand {k}"
        if leaf == AUX and parse_mlir_dict(fwd.attr("backend_config", "")) != \
                parse_mlir_dict(user.attr("backend_config", "")):
            return f"the backward call '%{user.name}' that reads it has other options"
    return None
