"""Heroes: the op of each fusion root that decides how threads map to data (XLA's
``FindNonTrivialHero``, notes/xla.md §b.1), and the predicates the hero rules of
``fusion_analysis.py`` ask of them: real reduction heroes (``reduction_utils.cc``), the single
dot or convolution under an elementwise epilogue, dynamic-update-slices updatable in place.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Sequence

from hlo_compile.hlo.ir import HloComputation, HloInstruction
from hlo_compile.hlo.opcodes import ELEMENTWISE
from hlo_compile.hlo.shape import Shape

from ...gpu.device_info import DeviceInfo
from ...gpu.reductions import (ReductionDimensions, is_race_free, is_reduction_from_or_to_contiguous_dimensions,
                               reduction_dimensions)
from .emitter_kind import ReductionVariant
from .hero_shapes import bits_of, reshape_is_bitcast, same_shape, transpose_description, transpose_is_bitcast

_INT_MAX = 2**31 - 1


def is_elementwise(inst: HloInstruction) -> bool:
    """XLA's ``IsElementwise``: output element i depends only on operand elements i."""
    op = inst.opcode
    if op == "map":
        dims = tuple(inst.dimensions)
        return not dims or dims == tuple(range(inst.shape.rank))
    if op == "bitcast-convert":
        return bits_of(inst.shape.element_type) == bits_of(inst.operands[0].shape.element_type)
    return op in ELEMENTWISE or op == "rng"


def is_intermediate(inst: HloInstruction, allowed_operand_count: int = 1) -> bool:
    """Ops that never decide the kernel's shape: elementwise ops (a copy only if it keeps the
    layout), bitcasts, and reshapes/transposes that are bitcasts; 1..N operands."""
    if not 1 <= len(inst.operands) <= allowed_operand_count:
        return False
    if is_elementwise(inst):
        return inst.opcode != "copy" or same_shape(inst.shape, inst.operands[0].shape)
    if inst.opcode == "bitcast":
        return True
    if inst.opcode == "reshape":
        return reshape_is_bitcast(inst.operands[0].shape, inst.shape)
    if inst.opcode == "transpose":
        return transpose_is_bitcast(inst.operands[0].shape, inst.shape, inst.dimensions)
    return False


# ---- roots and heroes ------------------------------------------------------------------------

def fusion_roots(comp: HloComputation) -> list[HloInstruction]:
    """The outputs of a fused computation: a (nested) root tuple is expanded, a
    get-tuple-element of a tuple is looked through (XLA's ``GetFusionRoots``)."""
    out: list[HloInstruction] = []

    def visit(inst: HloInstruction) -> None:
        if inst.opcode == "get-tuple-element" and inst.operands[0].opcode == "tuple":
            visit(inst.operands[0].operands[inst.tuple_index])
        elif inst.opcode == "get-tuple-element":
            out.append(inst.operands[0])
        elif inst.opcode == "tuple":
            for op in inst.operands:
                visit(op)
        else:
            out.append(inst)
    visit(comp.root)
    return out


def find_hero(root: HloInstruction) -> HloInstruction:
    """XLA's ``FindNonTrivialHero``: walk up single-operand intermediate ops; then look for a
    unique tiled transpose, else a unique concatenate, through intermediate ops of up to 3
    operands; else the reduce the walk reached, else the root itself."""
    hero = root
    while is_intermediate(hero, 1) and hero.operands[0].opcode != "parameter":
        hero = hero.operands[0]
    for predicate in (lambda n: transpose_description(n) is not None, lambda n: n.opcode == "concatenate"):
        found = _find_unique_hero(hero, predicate)
        if found is not None:
            return found
    return hero if hero.opcode == "reduce" else root


def _find_unique_hero(start: HloInstruction,
                      predicate: Callable[[HloInstruction], bool]) -> HloInstruction | None:
    """Breadth-first from ``start`` towards producers; None unless exactly one op matches and
    nothing but intermediate ops (or tuples) is reachable from its users."""
    hero, seen, queue = None, {id(start)}, deque([start])
    while queue:
        node = queue.popleft()
        if predicate(node):
            if hero is not None:
                return None
            hero = node
            continue
        if not is_intermediate(node, 3):
            continue
        for op in node.operands:
            if op.opcode != "parameter" and id(op) not in seen:
                seen.add(id(op))
                queue.append(op)
    if hero is None:
        return None
    seen, queue = set(), deque(hero.users)
    while queue:
        node = queue.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.opcode not in ("tuple", "parameter") and not is_intermediate(node, 3):
            return None
        queue.extend(node.users)
    return hero


# ---- reductions ------------------------------------------------------------------------------

def is_real_reduction_hero(root: HloInstruction, hero: HloInstruction, device: DeviceInfo | None = None) -> bool:
    """Whether ``hero`` makes the fusion a reduction fusion: a contiguous, worthwhile reduce that
    is the root itself or small enough to be emitted without atomics."""
    if not is_reduction_from_or_to_contiguous_dimensions(hero, device):
        return False
    return root is hero or is_race_free(reduction_dimensions(hero), device)


def reduction_variant(rd: ReductionDimensions, in_bits: int, out_bits: int, device: DeviceInfo) -> ReductionVariant:
    """Which of XLA's four reduction emitters runs (``CreateReductionFusion``)."""
    if rd.is_row:
        return ReductionVariant.MULTI_ROW if multi_row_vector_size(rd, in_bits, out_bits, device) \
            else ReductionVariant.ROW
    return ReductionVariant.SMALL_COLUMN if device.threads_per_warp % rd.dimensions[2] == 0 \
        else ReductionVariant.COLUMN


def multi_row_vector_size(rd: ReductionDimensions, in_bits: int, out_bits: int, device: DeviceInfo) -> int | None:
    """``MultiRowReductionFusion::TryCreate``: the vector size, or None when rows do not fit a warp."""
    _, kept, x = rd.dimensions
    if x & (x - 1):
        return None
    small, large = min(in_bits, out_bits), max(in_bits, out_bits)
    if large == _INT_MAX:
        large = out_bits
    v = max(1, min(x, 64 // small))
    if large >= 32:
        v = min(128 // large, v)
    warp = device.threads_per_warp

    def blocks(vec: int) -> int:
        reduced = x // vec
        per_block = kept if kept * reduced <= 256 else 256 // reduced
        return -(-kept // per_block)
    if x > warp * v:
        return None
    while v > 1 and blocks(v) < device.core_count:
        v //= 2
    return v if x <= warp * v else None


# ---- dot and convolution heroes -------------------------------------------------------------

def dot_hero(roots: Sequence[HloInstruction]) -> HloInstruction | None:
    """The dot of a fusion whose single root is that dot, or elementwise over it (an epilogue):
    the fusion holds exactly one dot and every op on a path from it to the root is elementwise
    with the dot's dimensions (so each output element needs the dot at its own index only)."""
    hero = _gemm_hero(roots, "dot")
    if hero is None and len(roots) == 1 and roots[0].shape.is_array:
        dots = [i for i in _reachable(roots[0]) if i.opcode == "dot"]
        if len(dots) == 1 and len(dots[0].operands) == 2 and dot_epilogue_chain(dots[0], roots[0]) is not None:
            hero = dots[0]
    return hero


# ops that move a dot's elements on their way to the root without combining them
_MOVES = frozenset({"transpose", "bitcast", "reshape", "copy"})


def dot_epilogue_chain(dot: HloInstruction, root: HloInstruction) -> list[HloInstruction] | None:
    """The instructions from ``dot`` (excluded) to ``root`` (included) when the dot's value
    reaches the root along exactly one path (each on it has one user and reads its
    predecessor once) of elementwise ops and element moves (transpose, reshape, copy, a bitcast
    of untiled layouts): each output element then needs the dot at exactly one index. None
    otherwise. XLA's Triton GEMM fusions end this way (a transposed or bitcast output)."""
    chain, x = [], dot
    while x is not root:
        users = list(dict.fromkeys(x.users))
        if len(users) != 1:
            return None
        y = users[0]
        if sum(1 for o in y.operands if o is x) != 1 or not y.shape.is_array:
            return None
        if y.opcode in _MOVES:
            if y.shape.element_count() != x.shape.element_count():
                return None
            if y.opcode == "bitcast" and any(s.layout is not None and s.layout.tiles for s in (x.shape, y.shape)):
                return None
        elif not is_elementwise(y):
            return None
        chain.append(y)
        x = y
    return chain


def _reachable(root: HloInstruction) -> list[HloInstruction]:
    """``root`` and every instruction it reads, directly or not (each once)."""
    seen: dict[int, HloInstruction] = {}
    stack = [root]
    while stack:
        x = stack.pop()
        if id(x) not in seen:
            seen[id(x)] = x
            stack.extend(x.operands)
    return list(seen.values())


def conv_hero(roots: Sequence[HloInstruction]) -> HloInstruction | None:
    """The convolution of a fusion whose single root is that convolution, or elementwise over
    it (bias, activation), by the same rule as ``dot_hero``."""
    return _gemm_hero(roots, "convolution")


def _gemm_hero(roots: Sequence[HloInstruction], opcode: str) -> HloInstruction | None:
    if len(roots) != 1 or not roots[0].shape.is_array:
        return None
    comp = roots[0].parent if getattr(roots[0], "parent", None) is not None else None
    dots = [i for i in (comp.instructions if comp is not None else []) if i.opcode == opcode]
    if comp is None:  # find the dot by walking up from the root
        dots = [x for x in _reachable(roots[0]) if x.opcode == opcode]
    if len(dots) != 1 or len(dots[0].operands) != 2:
        return None
    dot, root = dots[0], roots[0]
    below, stack = set(), list(dot.users)
    while stack:
        x = stack.pop()
        if id(x) in below:
            continue
        below.add(id(x))
        if not is_elementwise(x) or not x.shape.is_array or tuple(x.shape.dimensions) != tuple(dot.shape.dimensions):
            return None
        stack.extend(x.users)
    return dot if (root is dot or id(root) in below) else None


# ---- in-place dynamic-update-slice -----------------------------------------------------------

def defining_dus(root: HloInstruction) -> HloInstruction | None:
    inst = root
    while inst.opcode == "bitcast":
        inst = inst.operands[0]
    return inst if inst.opcode == "dynamic-update-slice" else None


def can_emit_dus_in_place(roots: list[HloInstruction]) -> bool:
    """The structural part of XLA's ``CanEmitFusedDynamicUpdateSliceInPlace``: each root is a
    DUS (through bitcasts) of a fusion parameter that nothing else reads at other positions,
    all updates have one shape. Whether the parameter's buffer may be reused for the output is
    the buffer assignment's decision, not checked here."""
    dus_list = [defining_dus(r) for r in roots]
    if not dus_list or any(d is None for d in dus_list):
        return False
    update_shape = dus_list[0].operands[1].shape
    for dus in dus_list:
        node = dus
        users = [u for u in node.users if u.opcode != "tuple"]
        while users:
            if len(users) > 1 or users[0].opcode != "bitcast":
                return False
            node = users[0]
            users = [u for u in node.users if u.opcode != "tuple"]
        operand = dus.operands[0]
        if operand.opcode == "bitcast":
            operand = operand.operands[0]
        if operand.opcode != "parameter" or not _reads_in_place(operand, dus, update_shape):
            return False
        upd = dus.operands[1].shape
        if upd.dimensions != update_shape.dimensions or upd.minor_to_major != update_shape.minor_to_major:
            return False
    return True


def _reads_in_place(param: HloInstruction, dus: HloInstruction, update_shape: Shape) -> bool:
    seen, queue = {id(param), id(dus)}, deque([param])
    while queue:
        for user in queue.popleft().users:
            if user.opcode == "dynamic-slice" and user.operands[0] is dus.operands[0] \
                    and same_shape(user.shape, update_shape):
                if update_shape.element_count() != 1 and \
                        any(a is not b for a, b in zip(user.operands[1:], dus.operands[2:])):
                    return False
            elif user is not dus and user.opcode == "dynamic-update-slice":
                return False
            elif user is not dus and not is_elementwise(user) and user.opcode not in ("bitcast", "tuple"):
                return False
            if id(user) not in seen:
                seen.add(id(user))
                queue.append(user)
    return True
