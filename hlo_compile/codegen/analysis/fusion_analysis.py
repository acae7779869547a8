"""Fusion analysis: roots, heroes, and which emitter XLA:GPU would pick for a fusion.

XLA chooses a fusion's kernel shape from its *heroes*: for every root, the op that decides how
threads map to data (a transpose needs shared-memory tiles, a reduction needs cross-thread
combining; elementwise ops around them just follow). We follow XLA's rules (notes/xla.md §b.1,
``FindNonTrivialHero``, ``HloFusionAnalysis::GetEmitterFusionKind``, ``GetFusionEmitter``) so
that ``xla_emitter`` is what XLA would run, then use the best emitter we have (``emitter``)
and say why (``reason``). The rules are one ordered table, ``HERO_RULES``: XLA's, plus ours
for the fusions XLA hands to a library (a dot or a convolution hero: our GEMM emitters). The
hero search and the predicates the rules ask live in ``hero_search.py`` and ``hero_shapes.py``
(re-exported here).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from hlo_compile.hlo.backend_config import fusion_backend_config
from hlo_compile.hlo.ir import HloComputation, HloInstruction
from hlo_compile.hlo.shape import Shape

from ...gpu.device_info import DeviceInfo
from ...gpu.reductions import (ReductionDimensions, is_race_free, is_reduction_from_or_to_contiguous_dimensions,
                               reduction_dimensions)
from .emitter_kind import EmitterKind, ReductionVariant, TransposeVariant
from .hero_search import (can_emit_dus_in_place, conv_hero, defining_dus, dot_hero, find_hero, fusion_roots,
                          is_elementwise, is_intermediate, is_real_reduction_hero, multi_row_vector_size,
                          reduction_variant)
from .hero_shapes import (TransposeDescription, bits_of, is_reshape_or_transpose_bitcast, reshape_is_bitcast,
                          transpose_description)

__all__ = [
    "HERO_RULES", "FusionAnalysis", "ReductionDimensions", "TransposeDescription", "analyze_fusion", "bits_of",
    "can_emit_dus_in_place", "conv_hero", "custom_fusion_config", "dot_hero", "find_hero", "fusion_roots",
    "is_elementwise", "is_intermediate", "is_race_free", "is_real_reduction_hero",
    "is_reduction_from_or_to_contiguous_dimensions",
    "multi_row_vector_size", "reduction_dimensions", "reduction_variant", "reshape_is_bitcast",
    "transpose_description", "SPLIT_NOTES", "split_note",
]

# frontend attributes our passes put on the fusions they build when they split a formed fusion
# as XLA would have built it: what the split is (``passes/tree_reduction_fusions.py``: a reduce
# that is not race-free; ``passes/scatter_operands.py``: the operand a scatter updates in place)
SPLIT_NOTES = ("tree_reduction", "scatter_operand")
_NOTE = re.compile(r'\b(' + "|".join(SPLIT_NOTES) + r')="((?:[^"\\]|\\.)*)"')

_INT_MAX = 2**31 - 1
# XLA's kinds the loop emitter can stand in for (it computes the fusion element by element)
_LOOP_CAN_EMIT = frozenset({EmitterKind.LOOP, EmitterKind.TRANSPOSE, EmitterKind.REDUCTION, EmitterKind.CONCATENATE,
                            EmitterKind.IN_PLACE_DUS, EmitterKind.MEMCPY})
# XLA's loop kinds: their heroes are reset to the roots
_LOOP_KINDS = frozenset({EmitterKind.LOOP, EmitterKind.MEMCPY, EmitterKind.IN_PLACE_DUS})
_BACKEND_KINDS = {"__custom_fusion": EmitterKind.CUSTOM, "__triton": EmitterKind.TRITON,
                  "__triton_gemm": EmitterKind.TRITON, "__triton_nested_gemm_fusion": EmitterKind.TRITON,
                  "__triton_collective": EmitterKind.TRITON, "__triton_softmax": EmitterKind.TRITON,
                  "__cudnn$fusion": EmitterKind.CUDNN}
_GEMM_BACKEND_KINDS = frozenset({"__triton_gemm", "__triton_nested_gemm_fusion"})
_BLOCK_LEVEL_BACKEND_KINDS = frozenset({"__triton", "__triton_softmax"})


# ---- the analysis ----------------------------------------------------------------------------

@dataclass(frozen=True)
class FusionAnalysis:
    """What a fusion is and how it is emitted.

    ``heroes`` is parallel to ``roots``; for XLA's loop kinds (loop, memcpy, in-place-dus) it is
    reset to the roots, as XLA does (``raw_heroes`` keeps what the hero search found).
    ``xla_emitter`` is XLA's choice; ``emitter`` the one we run: the same when it is in
    ``available``, ours where XLA calls a library (dot, convolution), else the loop emitter
    when it can compute the fusion element by element, else None (scatter, sort, library
    kinds). ``variant`` is XLA's reduction or transpose emitter variant. Bits are the
    narrowest parameter and root element types (pred = 8). An analysis is never changed: what
    planning learns later (an emitter declining the fusion) makes a new one (``declined``)."""

    fusion: HloInstruction
    device: DeviceInfo
    roots: list[HloInstruction]
    heroes: list[HloInstruction]
    xla_emitter: EmitterKind
    emitter: EmitterKind | None
    variant: ReductionVariant | TransposeVariant | None
    reason: str
    transpose: TransposeDescription | None = None
    reduction: ReductionDimensions | None = None
    hero_reduce: HloInstruction | None = None
    smallest_input_bits: int = _INT_MAX
    smallest_output_bits: int = _INT_MAX
    raw_heroes: list[HloInstruction] = field(default_factory=list)

    @property
    def computation(self) -> HloComputation:
        return self.fusion.fused_computation

    def declined(self, by: EmitterKind, why: str) -> FusionAnalysis:
        """This analysis once ``by``'s planner declined the fusion: the loop emitter runs it,
        and emitter, variant and reason say so."""
        return self._by_loop_emitter(f"{by} emitter declined ({why}), using the loop emitter")

    def without_launch(self) -> FusionAnalysis:
        """This analysis for a fusion whose outputs are all empty (no kernel launch)."""
        return self._by_loop_emitter("every output is empty: no launch")

    def _by_loop_emitter(self, why: str) -> FusionAnalysis:
        return replace(self, emitter=EmitterKind.LOOP, variant=None, reason=f"{self.reason}; {why}")


@dataclass(frozen=True)
class _Fusion:
    """What the hero rules look at."""

    fusion: HloInstruction
    roots: list[HloInstruction]
    heroes: list[HloInstruction]
    device: DeviceInfo
    in_bits: int
    out_bits: int
    available: frozenset[EmitterKind]


@dataclass(frozen=True)
class _Choice:
    xla: EmitterKind                 # what XLA runs
    why: str
    ours: EmitterKind | None = None  # our emitter for what XLA sends to a library (dot, convolution)
    variant: ReductionVariant | TransposeVariant | None = None
    transpose: TransposeDescription | None = None
    reduction: ReductionDimensions | None = None
    hero_reduce: HloInstruction | None = None
    heroes_kind: EmitterKind | None = None  # the kind whose hero rule applies (default: xla)


def analyze_fusion(fusion: HloInstruction, device: DeviceInfo,
                   available: frozenset[EmitterKind] = frozenset({EmitterKind.LOOP})) -> FusionAnalysis:
    """Roots, heroes, XLA's emitter choice for ``fusion`` and the emitter we use from ``available``."""
    comp = fusion.fused_computation
    roots = fusion_roots(comp)
    heroes = [find_hero(r) for r in roots]
    facts = _Fusion(fusion, roots, heroes, device, _smallest_bits(comp.parameters), _smallest_bits(roots),
                    frozenset(available))
    choice = next(c for c in (rule(facts) for rule in HERO_RULES) if c is not None)
    emitter, reason = _our_emitter(choice, facts.available)
    split = split_note(fusion)
    if split:
        reason = f"{split}; {reason}"
    heroes_kind = choice.heroes_kind or choice.xla
    return FusionAnalysis(fusion, device, roots, list(roots) if heroes_kind in _LOOP_KINDS else heroes, choice.xla,
                          emitter, choice.variant, reason, choice.transpose, choice.reduction, choice.hero_reduce,
                          facts.in_bits, facts.out_bits, heroes)


def split_note(fusion: HloInstruction) -> str:
    """What split of a formed fusion made ``fusion`` (its ``SPLIT_NOTES`` attributes), or ""."""
    raw = fusion.attributes.get("frontend_attributes")
    notes = _NOTE.findall(raw.raw) if raw is not None else []
    return "; ".join(re.sub(r"\\(.)", r"\1", text) for _, text in notes)


def _our_emitter(choice: _Choice, available: frozenset[EmitterKind]) -> tuple[EmitterKind | None, str]:
    if choice.ours is not None:
        return choice.ours, choice.why
    if choice.xla in available:
        return choice.xla, choice.why
    if choice.xla in _LOOP_CAN_EMIT and EmitterKind.LOOP in available:
        return EmitterKind.LOOP, f"{choice.why}; {choice.xla} emitter not available, using the loop emitter"
    return None, f"{choice.why}; no {choice.xla} emitter is available"


def _smallest_bits(insts: Iterable[HloInstruction]) -> int:
    bits = [bits_of(i.shape.element_type) for i in insts if i.shape.is_array]
    return min(bits, default=_INT_MAX)


def _backend_kind(f: _Fusion) -> _Choice | None:
    """A ``kind=kCustom`` fusion XLA hands to Triton, cuDNN or a custom kernel. Its computation
    is its exact semantics (the config only says how XLA generates code), so our emitter is
    the one the other rules pick for that computation; XLA's kind and config are reported."""
    kind, config = custom_fusion_config(f.fusion)
    backend = _BACKEND_KINDS.get(kind)
    if backend is None:
        return None
    # a Triton GEMM fusion is a dot under its epilogue: our dot emitter, before the rules that
    # would see its transposed or reduced output as a hero of their own
    gemm = _dot_kind(f) if kind in _GEMM_BACKEND_KINDS else None
    if kind in _BLOCK_LEVEL_BACKEND_KINDS and EmitterKind.TRITON in f.available and _has_diamond(f):
        # kept a fusion by passes/custom_fusions.py: Triton's softmax/normalization tiling
        return _Choice(backend, f"backend config kind {kind} ({config}): a reduction broadcast back into its "
                                "input, the block-level emitter tiles it as XLA does",
                       ours=EmitterKind.TRITON, heroes_kind=EmitterKind.LOOP)
    inner = gemm or next(c for c in (rule(f) for rule in HERO_RULES[1:]) if c is not None)
    ours, why = _our_emitter(inner, f.available)
    detail = f" ({config})" if config else ""
    if gemm is not None and ours is not None:
        why += "; the dot emitter tiles it by the config"
    elif config and ours is not None:
        why += f"; the config is not used: our {ours} emitter chooses its own tiling"
    return replace(inner, xla=backend, ours=ours, heroes_kind=inner.xla,
                   why=f"backend config kind {kind}{detail}: XLA runs it with {backend}, its computation is "
                       f"its semantics; {why}")


def _has_diamond(f: _Fusion) -> bool:
    """A reduce whose result reaches a root through more than bitcasts, converts and tuples
    (broadcast back: a normalization diamond)."""
    near, todo = set(), list(f.roots)
    while todo:
        inst = todo.pop()
        if inst not in near:
            near.add(inst)
            if inst.opcode in ("bitcast", "reshape", "convert", "copy", "negate", "abs", "tuple",
                               "get-tuple-element"):
                todo.extend(inst.operands)
    return any(i.opcode == "reduce" and i not in near for i in f.fusion.fused_computation.instructions)


def custom_fusion_config(fusion: HloInstruction) -> tuple[str, str]:
    """(the ``fusion_backend_config`` kind, its tiling config as text: Triton GEMM block sizes,
    block-level output tiles, warps) of a fusion; ("", "") when it has none."""
    cfg = fusion_backend_config(fusion)
    if not cfg:
        return "", ""
    parts = []
    gemm = cfg.get("triton_gemm_config")
    if isinstance(gemm, dict):
        parts += [f"{k}={gemm[k]}" for k in ("block_m", "block_n", "block_k", "split_k", "num_stages", "num_warps")
                  if k in gemm]
    block = cfg.get("block_level_fusion_config")
    if isinstance(block, dict):
        tiles = block.get("output_tiles") or ([{"sizes": block["output_tile_sizes"]}]
                                               if "output_tile_sizes" in block else [])
        sizes = ["x".join(str(v) for v in t.get("sizes", [])) for t in tiles if isinstance(t, dict)]
        if sizes:
            parts.append("output tiles " + ", ".join(sizes))
        if "num_warps" in block:
            parts.append(f"num_warps={block['num_warps']}")
    custom = cfg.get("custom_fusion_config")
    if isinstance(custom, dict) and "name" in custom:
        parts.append(f"name={custom['name']}")
    return str(cfg.get("kind", "")), ", ".join(parts)


def _reduction_kind(f: _Fusion) -> _Choice | None:
    roots, heroes, device = f.roots, f.heroes, f.device
    first = next((h for r, h in zip(roots, heroes) if is_real_reduction_hero(r, h, device)), None)
    if first is None:
        return None
    rd = reduction_dimensions(first)
    operand_elements = first.operands[0].shape.element_count()
    for r, h in zip(roots, heroes):
        if r is first:
            continue
        if not is_real_reduction_hero(r, h, device):
            if _elements(r.shape) != operand_elements:
                return None
        elif reduction_dimensions(h) != rd:
            return None
    variant = reduction_variant(rd, f.in_bits, f.out_bits, device)
    how = "row" if rd.is_row else "column"
    why = f"{how} reduction hero %{first.name} ([{', '.join(map(str, rd.dimensions))}]), {variant} emitter"
    return _Choice(EmitterKind.REDUCTION, why, variant=variant, reduction=rd, hero_reduce=first)


def _transpose_kind(f: _Fusion) -> _Choice | None:
    desc: TransposeDescription | None = None
    others = []
    for r, h in zip(f.roots, f.heroes):
        d = transpose_description(h)
        if d is None:
            others.append(r)
        elif desc is None:
            desc = d
        elif not desc.equivalent(d):
            return None
    if desc is None:
        return None
    in_shape = desc.instruction.operands[0].shape
    if any(not is_reshape_or_transpose_bitcast(r.shape, in_shape) for r in others):
        return None
    variant = TransposeVariant.PACKED if desc.packed else TransposeVariant.TILED
    shape = in_shape.to_text(print_layout=False)
    why = f"transpose hero %{desc.instruction.name} ({desc.kind}, {shape}), {variant}"
    return _Choice(EmitterKind.TRANSPOSE, why, variant=variant, transpose=desc)


# single-root opcodes with an emitter of their own (XLA lowers topk to a sort or a custom call;
# our sort emitter ranks it)
_ROOT_KINDS = {"scatter": EmitterKind.SCATTER, "sort": EmitterKind.SORT, "topk": EmitterKind.SORT}


def _root_kind(f: _Fusion) -> _Choice | None:
    if len(f.roots) != 1 or f.roots[0].opcode not in _ROOT_KINDS:
        return None
    root = f.roots[0]
    return _Choice(_ROOT_KINDS[root.opcode], f"root %{root.name} is a {root.opcode}")


def _concatenate_kind(f: _Fusion) -> _Choice | None:
    if len(f.roots) != 1:
        return None
    root, hero = f.roots[0], f.heroes[0]
    if hero.opcode == "concatenate" and not root.shape.is_tuple and len(hero.operands) <= 4:
        return _Choice(EmitterKind.CONCATENATE, f"concatenate hero %{hero.name} with {len(hero.operands)} operands")
    return None


def _memcpy_kind(f: _Fusion) -> _Choice | None:
    if all(r.opcode == "copy" and r.operands[0].opcode == "parameter"
           and r.shape.layout == r.operands[0].shape.layout for r in f.roots):
        return _Choice(EmitterKind.MEMCPY, "every root copies a parameter without changing its layout")
    return None


def _in_place_dus_kind(f: _Fusion) -> _Choice | None:
    if all(defining_dus(r) is not None for r in f.roots) and can_emit_dus_in_place(f.roots):
        return _Choice(EmitterKind.IN_PLACE_DUS,
                       "every root is a dynamic-update-slice of a parameter updatable in place")
    return None


def _multi_root_kind(f: _Fusion) -> _Choice | None:
    if len(f.roots) > 1:
        return _Choice(EmitterKind.LOOP, f"{len(f.roots)} roots without a common reduction or transpose hero")
    return None


def _dot_kind(f: _Fusion) -> _Choice | None:
    return _gemm_kind(f, EmitterKind.DOT, dot_hero,
                      "XLA sends dot fusions to cuBLAS/Triton (gemm), we use the tiled dot emitter")


def _convolution_kind(f: _Fusion) -> _Choice | None:
    return _gemm_kind(f, EmitterKind.CONVOLUTION, conv_hero,
                      "XLA sends convolutions to cuDNN, we use the implicit-GEMM convolution emitter")


def _gemm_kind(f: _Fusion, kind: EmitterKind, find: Callable[[list[HloInstruction]], HloInstruction | None],
               note: str) -> _Choice | None:
    """Our GEMM emitter ``kind`` for the hero ``find`` sees, where XLA runs a library."""
    hero = find(f.roots) if kind in f.available else None
    if hero is None:
        return None
    return _Choice(EmitterKind.LOOP, f"{_loop_why(f)}; {hero.opcode} hero %{hero.name}: {note}", ours=kind)


def _loop_kind(f: _Fusion) -> _Choice:
    return _Choice(EmitterKind.LOOP, _loop_why(f))


def _loop_why(f: _Fusion) -> str:
    root, hero = f.roots[0], f.heroes[0]
    if hero.opcode == "reduce":
        return f"reduce %{hero.name} is not a real reduction hero (one thread per output element)"
    if hero.opcode == "transpose":
        return (f"transpose %{hero.name} does not qualify for a shared-memory transpose (too small, 4-bit with "
                "the minor dim moved, or a non-default layout)")
    if hero.opcode == "concatenate":
        return f"concatenate %{hero.name} has {len(hero.operands)} operands (more than 4)"
    return f"root %{root.name} ({root.opcode}) has no transpose, reduction, concatenate or scatter hero"


# XLA's decision order (``GetEmitterFusionKind``, then ``GetFusionEmitter``'s refinements of
# kLoop; notes/xla.md §b.1), with our dot and convolution emitters where XLA calls a library.
# The first rule that matches decides.
HERO_RULES: tuple[Callable[[_Fusion], _Choice | None], ...] = (
    _backend_kind, _reduction_kind, _transpose_kind, _root_kind, _concatenate_kind, _memcpy_kind,
    _in_place_dus_kind, _multi_root_kind, _dot_kind, _convolution_kind, _loop_kind)


def _elements(shape: Shape) -> int:
    while shape.is_tuple:
        shape = shape.tuple_shapes[0]
    return shape.element_count()
