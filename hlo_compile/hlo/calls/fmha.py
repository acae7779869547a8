"""A cuDNN fused-attention custom call read once: what each operand and result is, and the
options of its ``cudnn_fmha_backend_config`` (notes/xla-gpu-calls.md §3).

JAX (``jax.nn.dot_product_attention(implementation='cudnn')``) writes, in this order:

- forward ``__cudnn$fmha[ScaleBias]Softmax[Dropout]``: ``Q, K, V, [bias], [q_seqlen,
  kv_seqlen]`` -> ``(O, [stats], u8[workspace])``; stats present iff three leaves (training);
- backward ``...Backward``: ``Q, K, V, stats, dO, [bias], O, [q_seqlen, kv_seqlen]`` ->
  ``(dQ, dK, dV, [dBias], u8[workspace])``; dBias present iff five leaves.

Q, K, V (and dO, O) are rank 4 in any dimension order: the config's dot dimension numbers say
which two dimensions are the batches (batch, then heads, in that order), which one the dot
contracts, and the one left over. XLA reads them that way (``MatmulTensorDescriptorFor``):
Q and K from ``bmm1`` (lhs, rhs), V from ``bmm2`` (rhs); in the backward Q from
``bmm1_grad_gemm1``, K from ``bmm1_grad_gemm2``, dO from ``bmm2_grad_gemm1`` and V from
``bmm2_grad_gemm2`` (all rhs); the forward output O given to the backward has dO's layout.
Results and the bias are plain tensors whose logical dimensions are, in order,
``[B, N, T, H]`` (O, dQ; ``[B, Nk, S, H]`` for dK, dV), ``[B, N, T]`` (stats) and
``[B|1, N|1, T, S]`` (bias, dBias). K and V may have fewer heads than Q (grouped-query
attention): query head ``h`` reads key head ``h // (N / Nk)``.

What cannot be reproduced or is not implemented is refused with ``HloUnsupportedError``
naming the instruction, its target and its line: dropout (cuDNN draws the keep mask inside
the kernel from its own Philox stream), ALiBi, packed sequences (``max_seg_per_batch > 1``),
paged attention, score modifiers (a called computation), and anything malformed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from ..backend_config import backend_config, config_float, config_int
from ..errors import HloUnsupportedError
from ..ir import HloInstruction
from .library_targets import FMHA_TARGETS
from ..shape import Shape

MASK_TYPES = ("NO_MASK", "PADDING", "CAUSAL", "PADDING_CAUSAL", "ALIBI")   # proto enum order
SUPPORTED_MASKS = frozenset({"NO_MASK", "PADDING", "CAUSAL", "PADDING_CAUSAL"})
INPUT_TYPES = frozenset({"f16", "bf16"})
BIAS_TYPES = frozenset({"f16", "bf16", "f32"})


@dataclass(frozen=True)
class Roles:
    """Which dimension of a rank-4 operand holds the batch, the heads, the sequence and the
    head features."""

    batch: int
    heads: int
    seq: int
    feature: int

    @property
    def to_canonical(self) -> tuple[int, int, int, int]:
        """``transpose`` dimensions giving ``[batch, heads, seq, feature]``."""
        return (self.batch, self.heads, self.seq, self.feature)

    def sizes(self, shape: Shape) -> tuple[int, int, int, int]:
        """(batch, heads, seq, feature) sizes of ``shape``."""
        d = shape.dimensions
        return d[self.batch], d[self.heads], d[self.seq], d[self.feature]


@dataclass(frozen=True)
class FmhaCall:
    """One ``__cudnn$fmha*`` custom call. Operand fields are operand indices (None: absent);
    result fields are tuple indices."""

    name: str
    target: str
    backward: bool
    element_type: str            # of Q, K, V (and dO, O, dQ, dK, dV)
    scale: float                 # fmha_scale: multiplies Q.K^T before the bias
    mask: str                    # NO_MASK, PADDING, CAUSAL or PADDING_CAUSAL
    window: int                  # sliding_window_length; 0: none
    batch: int                   # B
    heads: int                   # N (query heads)
    kv_heads: int                # Nk (key/value heads; N is a multiple)
    q_len: int                   # T
    kv_len: int                  # S
    qk_dim: int                  # H of Q and K
    v_dim: int                   # H of V (and O)
    q: int
    k: int
    v: int
    q_roles: Roles
    k_roles: Roles
    v_roles: Roles
    bias: int | None
    bias_dims: tuple[int, ...] | None
    q_seqlen: int | None
    kv_seqlen: int | None
    # backward operands
    stats_in: int | None
    d_o: int | None
    o_in: int | None
    do_roles: Roles | None       # dO's, and the forward output O's
    # results
    result_shapes: tuple[Shape, ...]
    stats: int | None            # forward: the log-sum-exp leaf (training)
    dbias: int | None            # backward: the bias gradient leaf

    @property
    def workspace(self) -> int:
        """The scratch leaf (always last; contents undefined)."""
        return len(self.result_shapes) - 1

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    @property
    def padding(self) -> bool:
        return self.mask in ("PADDING", "PADDING_CAUSAL")

    @property
    def causal(self) -> bool:
        return self.mask in ("CAUSAL", "PADDING_CAUSAL")

    @property
    def scores_dims(self) -> tuple[int, int, int, int]:
        """``[B, N, T, S]``: the score matrix P."""
        return (self.batch, self.heads, self.q_len, self.kv_len)


def fmha_call(inst: HloInstruction) -> FmhaCall:
    """Read the fused-attention custom call ``inst``; HloUnsupportedError (naming it) for a
    malformed one or one that cannot run outside cuDNN."""
    return _Reader(inst).read()


class CallReader:
    """What every library-call reader does: refuse naming the call, check operand shapes."""

    def __init__(self, inst: HloInstruction):
        self.inst = inst
        self.target = inst.attr("custom_call_target", "")

    def refuse(self, why: str) -> NoReturn:
        raise HloUnsupportedError(f"custom-call '%{self.inst.name}' ({self.target}): {why}", self.inst.location)

    def operand_shape(self, i: int, what: str) -> Shape:
        shape = self.inst.operands[i].shape
        if not shape.is_array:
            self.refuse(f"operand {i} ({what}) is not an array")
        return shape

    def expect(self, shape: Shape, dims, types, what: str) -> None:
        if tuple(shape.dimensions) != tuple(dims) or shape.element_type not in types:
            want = "|".join(sorted(types)) + "[" + ",".join(map(str, dims)) + "]"
            self.refuse(f"{what} should be {want}, got {shape.to_text(False)}")


class _Reader(CallReader):

    # ---- the config ------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        cfg = backend_config(self.inst).get("cudnn_fmha_backend_config")
        if not isinstance(cfg, dict):
            self.refuse("its backend_config has no cudnn_fmha_backend_config")
        return cfg

    def number(self, cfg: dict, key: str, kind=config_int):
        try:
            return kind(cfg.get(key))
        except (TypeError, ValueError):
            self.refuse(f"{key}={cfg.get(key)!r} is not a number")

    def mask_type(self, cfg: dict) -> str:
        raw = cfg.get("mask_type", "NO_MASK")
        if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < len(MASK_TYPES):
            raw = MASK_TYPES[raw]
        if raw == "ALIBI":
            self.refuse("mask_type ALIBI is not supported (XLA's cuDNN graph sets no ALiBi option; "
                        "its meaning is unverified)")
        if raw not in SUPPORTED_MASKS:
            self.refuse(f"unknown mask_type {raw!r} (expected one of {', '.join(MASK_TYPES)})")
        if cfg.get("is_causal_mask") is True and raw not in ("CAUSAL", "PADDING_CAUSAL"):
            self.refuse(f"the legacy is_causal_mask=true contradicts mask_type {raw}")
        return raw

    def refuse_unsupported_options(self, cfg: dict) -> None:
        rate = self.number(cfg, "dropout_rate", config_float)
        if rate > 0:
            self.refuse(f"dropout_rate={rate:g}: cuDNN draws the dropout keep mask inside its kernel from its "
                        "own Philox stream (seed and a per-execution offset), which cannot be reproduced "
                        "outside cuDNN, so this call cannot be computed here")
        if self.number(cfg, "max_seg_per_batch") > 1:
            self.refuse("packed sequences (max_seg_per_batch > 1) are not supported")
        if cfg.get("is_paged_attention") in (True, "true"):
            self.refuse("paged attention is not supported")
        if self.inst.called_computations():
            self.refuse("score modifier computations are not supported")

    def dnums(self, cfg: dict, key: str) -> dict[str, tuple[int, ...]]:
        raw = cfg.get(key)
        if not isinstance(raw, dict):
            self.refuse(f"its config has no {key}")
        out = {}
        for side in ("lhs", "rhs"):
            for what in ("batch", "contracting"):
                field = f"{side}_{what}_dimensions"
                try:
                    out[field] = tuple(config_int(d) for d in raw.get(field, ()))
                except (TypeError, ValueError):
                    self.refuse(f"{key}.{field} is not a list of integers")
        return out

    def roles(self, dnums: dict, key: str, side: str, operand: int, contracting_is: str) -> Roles:
        """The roles of ``operand`` read from one side of a dot: its two batch dimensions are
        (batch, heads), its contracting one is the sequence or the features
        (``contracting_is``), the dimension left over is the other."""
        what = f"{key} ({side} is operand {operand})"
        batch, contracting = dnums[f"{side}_batch_dimensions"], dnums[f"{side}_contracting_dimensions"]
        if len(batch) != 2 or len(contracting) != 1:
            self.refuse(f"{what}: expected 2 batch and 1 contracting dimensions, got {list(batch)} and "
                        f"{list(contracting)}")
        used = list(batch) + list(contracting)
        if len(set(used)) != 3 or not all(0 <= d < 4 for d in used):
            self.refuse(f"{what}: dimensions {used} are not distinct dimensions of a rank-4 operand")
        (rest,) = set(range(4)) - set(used)
        if contracting_is == "seq":
            return Roles(batch[0], batch[1], contracting[0], rest)
        return Roles(batch[0], batch[1], rest, contracting[0])

    # ---- operands and results --------------------------------------------------------------
    def read(self) -> FmhaCall:
        inst, target = self.inst, self.target
        if target not in FMHA_TARGETS:
            self.refuse("not a cuDNN fused-attention target this project knows")
        cfg = self.config()
        self.refuse_unsupported_options(cfg)
        backward = target.endswith("Backward")
        has_bias = "ScaleBias" in target
        mask = self.mask_type(cfg)
        padding = mask in ("PADDING", "PADDING_CAUSAL")
        # operand positions
        n = 0
        pos: dict[str, int] = {}
        names = ["q", "k", "v"] + (["stats", "d_o"] if backward else []) + (["bias"] if has_bias else []) + \
            (["o"] if backward else []) + (["q_seqlen", "kv_seqlen"] if padding else [])
        for name in names:
            pos[name] = n
            n += 1
        if len(inst.operands) != n:
            self.refuse(f"expected {n} operands ({', '.join(names)}), got {len(inst.operands)}")
        # layouts of Q, K, V, dO from the dot dimension numbers
        if backward:
            g11 = self.dnums(cfg, "bmm1_grad_gemm1_dot_dimension_numbers")
            g12 = self.dnums(cfg, "bmm1_grad_gemm2_dot_dimension_numbers")
            g21 = self.dnums(cfg, "bmm2_grad_gemm1_dot_dimension_numbers")
            g22 = self.dnums(cfg, "bmm2_grad_gemm2_dot_dimension_numbers")
            q_roles = self.roles(g11, "bmm1_grad_gemm1_dot_dimension_numbers", "rhs", pos["q"], "seq")
            k_roles = self.roles(g12, "bmm1_grad_gemm2_dot_dimension_numbers", "rhs", pos["k"], "seq")
            v_roles = self.roles(g22, "bmm2_grad_gemm2_dot_dimension_numbers", "rhs", pos["v"], "feature")
            do_roles = self.roles(g21, "bmm2_grad_gemm1_dot_dimension_numbers", "rhs", pos["d_o"], "seq")
        else:
            b1 = self.dnums(cfg, "bmm1_dot_dimension_numbers")
            b2 = self.dnums(cfg, "bmm2_dot_dimension_numbers")
            q_roles = self.roles(b1, "bmm1_dot_dimension_numbers", "lhs", pos["q"], "feature")
            k_roles = self.roles(b1, "bmm1_dot_dimension_numbers", "rhs", pos["k"], "feature")
            v_roles = self.roles(b2, "bmm2_dot_dimension_numbers", "rhs", pos["v"], "seq")
            do_roles = None
        qs = self.operand_shape(pos["q"], "Q")
        ks = self.operand_shape(pos["k"], "K")
        vs = self.operand_shape(pos["v"], "V")
        for s, what in ((qs, "Q"), (ks, "K"), (vs, "V")):
            if s.rank != 4:
                self.refuse(f"{what} should have rank 4, got {s.to_text(False)}")
        et = qs.element_type
        if et not in INPUT_TYPES or ks.element_type != et or vs.element_type != et:
            self.refuse(f"Q, K and V should all be f16 or all bf16, got {qs.element_type}, {ks.element_type}, "
                        f"{vs.element_type}")
        B, N, T, H = q_roles.sizes(qs)
        kB, Nk, S, kH = k_roles.sizes(ks)
        vB, vN, vS, Hv = v_roles.sizes(vs)
        if (kB, vB) != (B, B) or kH != H or vN != Nk or vS != S:
            self.refuse(f"Q [B,N,T,H]={[B, N, T, H]}, K [B,N,S,H]={[kB, Nk, S, kH]} and V [B,N,S,H]="
                        f"{[vB, vN, vS, Hv]} do not agree")
        if Nk == 0 or N % Nk:
            self.refuse(f"{N} query heads cannot be grouped over {Nk} key/value heads")
        bias_dims = None
        if has_bias:
            bs = self.operand_shape(pos["bias"], "bias")
            bias_dims = tuple(bs.dimensions)
            if bs.rank != 4 or bias_dims[0] not in (1, B) or bias_dims[1] not in (1, N) or \
                    bias_dims[2:] != (T, S) or bs.element_type not in BIAS_TYPES:
                self.refuse(f"bias should be [B|1, N|1, T, S] = [{B}|1, {N}|1, {T}, {S}] of a float type, got "
                            f"{bs.to_text(False)}")
        if padding:
            for key in ("q_seqlen", "kv_seqlen"):
                self.expect(self.operand_shape(pos[key], key), (B,), {"s32"}, key)
        if backward:
            self.expect(self.operand_shape(pos["stats"], "stats"), (B, N, T), {"f32"}, "stats (operand 3)")
            ds = self.operand_shape(pos["d_o"], "dO")
            os_ = self.operand_shape(pos["o"], "O")
            if ds.rank != 4 or do_roles.sizes(ds) != (B, N, T, Hv) or ds.element_type != et:
                self.refuse(f"dO should be {et} holding [B,N,T,H]={[B, N, T, Hv]}, got {ds.to_text(False)}")
            if os_.element_type != et or tuple(os_.dimensions) != tuple(ds.dimensions):
                self.refuse(f"the forward output O should have dO's shape {ds.to_text(False)}, got "
                            f"{os_.to_text(False)}")
        results, stats, dbias = self.results(backward, has_bias, et, (B, N, T, S, H, Hv, Nk), bias_dims)
        window = self.number(cfg, "sliding_window_length")
        return FmhaCall(
            name=inst.name, target=target, backward=backward, element_type=et,
            scale=self.number(cfg, "fmha_scale", config_float),  # absent: the proto default 0, as XLA reads it
            mask=mask, window=max(window, 0), batch=B, heads=N, kv_heads=Nk, q_len=T, kv_len=S, qk_dim=H,
            v_dim=Hv, q=pos["q"], k=pos["k"], v=pos["v"], q_roles=q_roles, k_roles=k_roles, v_roles=v_roles,
            bias=pos.get("bias"), bias_dims=bias_dims, q_seqlen=pos.get("q_seqlen"), kv_seqlen=pos.get("kv_seqlen"),
            stats_in=pos.get("stats"), d_o=pos.get("d_o"), o_in=pos.get("o"), do_roles=do_roles,
            result_shapes=results, stats=stats, dbias=dbias)

    def results(self, backward: bool, has_bias: bool, et: str, sizes, bias_dims):
        B, N, T, S, H, Hv, Nk = sizes
        shape = self.inst.shape
        if not shape.is_tuple or not all(s.is_array for s in shape.tuple_shapes):
            self.refuse(f"the result should be a tuple of arrays ending in a u8 workspace, got {shape.to_text(False)}")
        leaves = tuple(shape.tuple_shapes)
        counts = (4, 5) if backward else (2, 3)
        if len(leaves) not in counts:
            self.refuse(f"the result should have {counts[0]} or {counts[1]} elements, got {len(leaves)}")
        ws = leaves[-1]
        if ws.rank != 1 or ws.element_type not in ("u8", "s8"):
            self.refuse(f"the last result element should be the u8 workspace, got {ws.to_text(False)}")
        stats = dbias = None
        if backward:
            self.expect(leaves[0], (B, N, T, H), {et}, "dQ (result 0)")
            self.expect(leaves[1], (B, Nk, S, H), {et}, "dK (result 1)")
            self.expect(leaves[2], (B, Nk, S, Hv), {et}, "dV (result 2)")
            if len(leaves) == 5:
                if not has_bias:
                    self.refuse("a dBias result needs a bias operand (a ScaleBias target)")
                self.expect(leaves[3], bias_dims, BIAS_TYPES, "dBias (result 3)")
                dbias = 3
        else:
            self.expect(leaves[0], (B, N, T, Hv), {et}, "O (result 0)")
            if len(leaves) == 3:
                self.expect(leaves[1], (B, N, T), {"f32"}, "stats (result 1)")
                stats = 1
        return leaves, stats, dbias
