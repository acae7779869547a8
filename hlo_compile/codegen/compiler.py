"""Module → kernel plans: which fusion becomes which kernel, with which emitter and launch.

``plan_module`` runs the passes (calls inlined, lone instructions wrapped as fusions) on a
copy of the module, analyses every fusion of the ENTRY computation and of the computations
that while and conditional run (hero, emitter choice), and plans it with the emitter the
analysis names (``emitters.EMITTERS``): partition and launch configuration. Kernels of loop
bodies are planned once, at compile time. A ``KernelPlan`` can then emit its kernel for any
target (``plan.emit``): the same plan gives the GPU module and the host module.
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from llvmlite import ir

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.library_targets import library_family
from ..hlo.tiling import physical_size
from ..hlo.unbounded import refuse_unbounded_dimensions
from ..options import CompileOptions
from ..passes import run_passes
from ..passes.prepare_control_flow import executed_computations
from ..gpu.archs import device_for_arch
from ..gpu.device_info import DeviceInfo
from .analysis.emitter_kind import EmitterKind
from .emitters import EMITTERS, EMPTY_KERNEL, Emitter
from .emitters.loop import plan_loop_instead
from .analysis.fusion_analysis import FusionAnalysis, analyze_fusion
from .kernel import Declined, KernelSpec, output_leaves
from .llvm_types import UnsupportedElementType, compute_type
from .analysis.plan_sharing import Correspondence, SharedPlans, analysis_signature, plan_key, retarget
from .target import LaunchDims, Target


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for the duration (as ``parse_module`` does). Planning and
    emitting a kernel allocate many objects that outlive the call (maps, plans, the kernel's
    LLVM values, which point at each other) and free few: a collection in the middle finds
    nothing to free, and a full one rescans the whole parsed module and every plan (ResNet-50:
    the collections during planning and emission took about 0.13 s of CPU, 0.11 s with these
    pauses, mostly because fewer full ones run). What they leave as garbage is collected after,
    as usual."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def available_emitters() -> frozenset[EmitterKind]:
    """The emitter kinds ``EMITTERS`` has."""
    return frozenset(EMITTERS)


@dataclass
class KernelPlan:
    """One fusion's kernel: the analysis that chose its emitter, the emitter's plan (``spec``)
    and the emitter, which emits the plan for any target (``emit``)."""

    fusion: HloInstruction
    kernel_name: str
    analysis: FusionAnalysis
    spec: KernelSpec
    emitter: Emitter
    # in-place kernels: why the operand's buffer is (or is not) donated to the output
    aliasing: str = ""
    # kernel reuse (XLA's KernelReuseCache): the fusion whose kernel this one launches
    # (``kernel_name`` is then that kernel's); None: this plan's kernel is emitted
    reuses: str | None = None
    # the fusion whose plan this one is a copy of (``plan_sharing``); None: planned on its own
    planned_from: str | None = None

    @property
    def donated(self) -> dict[int, int]:
        """{output leaf: fusion operand} whose buffer *is* that output (no copy, no allocation:
        XLA's in-place aliasing, decided by ``plan_module``); empty when the kernel starts
        from a copy or updates nothing in place."""
        return dict(self.spec.donated)

    @property
    def in_place_operands(self) -> dict[int, int]:
        """{output leaf: fusion operand} the output starts as (donated or copied)."""
        return dict(self.spec.in_place)

    @property
    def launch(self) -> LaunchDims:
        return self.spec.launch

    def emit(self, target: Target) -> ir.Module:
        with gc_paused():
            return self.emitter.emit(target, self.spec)


@dataclass
class ModulePlan:
    module: HloModule          # after the passes
    device: DeviceInfo
    kernels: list[KernelPlan]  # ENTRY's fusions, then those of each computation in ``computations[1:]``
    # the computations the runtime runs as thunk sequences: ENTRY, then those that while and
    # conditional run (transitively), each once
    computations: list[HloComputation] = field(default_factory=list)
    _by_fusion: dict[int, KernelPlan] = field(default_factory=dict, repr=False)

    @property
    def library_calls(self) -> list[HloInstruction]:
        """The library calls the runtime makes (kept as calls: ``CompileOptions.gemm``/``conv``
        = "library"), in program order."""
        return [i for c in (self.computations or [self.module.entry]) for i in c.instructions
                if i.opcode == "custom-call" and library_family(i.attr("custom_call_target", "")) is not None]

    @property
    def unique_kernels(self) -> list[KernelPlan]:
        """The kernels to emit: each once (a fusion that reuses another's kernel is left out)."""
        return [k for k in self.kernels if k.reuses is None]

    def kernel_for(self, fusion: HloInstruction) -> KernelPlan:
        k = self._by_fusion.get(id(fusion))
        if k is None or k.fusion is not fusion:
            self._by_fusion = {id(p.fusion): p for p in self.kernels}
            k = self._by_fusion.get(id(fusion))
            if k is None:
                raise KeyError(fusion.name)
        return k


def kernel_symbol(name: str, taken: set[str], reserved: frozenset[str] = frozenset()) -> str:
    """A PTX-safe, unique kernel name for a fusion (``fusion.3`` → ``fusion_3``), none of
    ``reserved`` (the ``Target.linked_symbols`` of every target: a fusion called ``sinh``
    or ``free`` would shadow the function its kernel calls)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "kernel"
    if not re.match(r"[A-Za-z]", base) or base in reserved or base.startswith("__") \
            or base.startswith("llvm"):
        base = "k_" + base
    sym, n = base, 1
    while sym in taken:
        n += 1
        sym = f"{base}_{n}"
    taken.add(sym)
    return sym


def check_element_types(fusion: HloInstruction) -> None:
    """Refuse, naming the instruction and line, a fusion using a type we cannot emit yet."""
    insts = fusion.fused_computation.instructions
    # name a real instruction rather than a parameter the wrapping pass made up
    for inst in [i for i in insts if i.opcode != "parameter"] + [i for i in insts if i.opcode == "parameter"]:
        shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else [inst.shape]
        for shape in shapes:
            if shape.is_array:
                try:
                    compute_type(shape.element_type)
                except UnsupportedElementType as e:
                    raise UnsupportedElementType(f"{e.message}: {inst.opcode} '%{inst.name}' (in fusion "
                                                 f"'%{fusion.name}')", inst.location) from None


def plan_fusion(fusion: HloInstruction, device: DeviceInfo, kernel_name: str,
                shared: SharedPlans | None = None) -> KernelPlan:
    """The analysis of ``fusion`` and the plan of the emitter it names (``EMITTERS``); a
    planner that declines hands the fusion to the loop emitter, with a new analysis that
    says so. A refusal that names no place is given the fusion's name and line. With
    ``shared`` (the first plan of each ``plan_key``), a fusion like one planned before takes
    a copy of its plan (``plan_sharing``)."""
    try:
        if shared is None:
            return _plan_fusion(fusion, device, kernel_name)
        return _plan_fusion_shared(fusion, device, kernel_name, shared)
    except HloUnsupportedError as e:
        if e.location is not None or fusion.location is None:
            raise
        raise HloUnsupportedError(f"fusion '%{fusion.name}' (line {fusion.location.line}): {e.message}",
                                  fusion.location) from None


def _analyze(fusion: HloInstruction, device: DeviceInfo) -> FusionAnalysis:
    check_element_types(fusion)
    return analyze_fusion(fusion, device, available=available_emitters())


def _plan_fusion(fusion: HloInstruction, device: DeviceInfo, kernel_name: str,
                 analysis: FusionAnalysis | None = None) -> KernelPlan:
    analysis = analysis or _analyze(fusion, device)
    if all(s.element_count() == 0 for _, s in output_leaves(fusion)):
        # nothing to compute (as XLA, no launch); the kernel exists so every fusion has one
        analysis = analysis.without_launch()
        return KernelPlan(fusion, kernel_name, analysis, EMPTY_KERNEL.plan(fusion, analysis, device, kernel_name),
                          EMPTY_KERNEL)
    emitter = EMITTERS.get(analysis.emitter) if analysis.emitter else None
    if emitter is None:
        where = f" (line {fusion.location.line})" if fusion.location else ""
        raise HloUnsupportedError(f"fusion '%{fusion.name}'{where}: {analysis.reason}")
    try:
        spec = emitter.plan(fusion, analysis, device, kernel_name)
    except Declined as declined:
        by = analysis.emitter
        analysis, emitter = analysis.declined(by, declined.why), EMITTERS[EmitterKind.LOOP]
        spec = plan_loop_instead(fusion, analysis, device, kernel_name, by, declined.why)
    return KernelPlan(fusion, kernel_name, analysis, spec, emitter)


def _plan_fusion_shared(fusion: HloInstruction, device: DeviceInfo, kernel_name: str,
                        shared: SharedPlans) -> KernelPlan:
    analysis = _analyze(fusion, device)
    if all(s.element_count() == 0 for _, s in output_leaves(fusion)):
        return _plan_fusion(fusion, device, kernel_name, analysis)  # no launch: nothing to plan
    key, signature = plan_key(fusion, shared.fingerprints), analysis_signature(analysis)
    first = shared.first.get(key)
    if first is None or first[1] != signature:
        plan = _plan_fusion(fusion, device, kernel_name, analysis)
        shared.first.setdefault(key, (plan, signature))
        return plan
    owner: KernelPlan = first[0]
    try:
        spec = retarget(owner.spec, Correspondence(owner.fusion, fusion))
    except (KeyError, ValueError, IndexError, TypeError, AttributeError):
        # the two do not pair up as their keys say they should: plan this one on its own
        return _plan_fusion(fusion, device, kernel_name, analysis)
    spec = copy.copy(spec) if spec is owner.spec else spec
    object.__setattr__(spec, "name", kernel_name)
    declined_by = getattr(spec, "declined_by", None)
    if declined_by is not None and owner.analysis.emitter != analysis.emitter:
        analysis = analysis.declined(declined_by, spec.declined_why)
    return KernelPlan(fusion, kernel_name, analysis, spec, owner.emitter, planned_from=owner.fusion.name)


def prepare_module(module: HloModule, options: CompileOptions, after_pass=None) -> HloModule:
    """The module after the passes and the code generator's own rewrites (a copy); without
    ``options.skip_passes``; ``after_pass(name, module)`` after each (``run_passes``)."""
    return run_passes(module, fusion=options.fusion, generated_calls=options.generated_call_families(),
                      skip=options.skip_passes, after_pass=after_pass, arch=options.arch)


def plan_module(module: HloModule, options: CompileOptions,
                reserved_symbols: frozenset[str] = frozenset()) -> ModulePlan:
    return plan_prepared_module(prepare_module(module, options), options, reserved_symbols)


def plan_prepared_module(wrapped: HloModule, options: CompileOptions,
                         reserved_symbols: frozenset[str] = frozenset(), *, share_plans: bool = True) -> ModulePlan:
    """The plan of a module ``prepare_module`` already rewrote (the pipeline's ``fusions``
    stage: the passes run once, in the ``hlo`` stage). No kernel takes a name in
    ``reserved_symbols``: the driver, which knows the targets, passes their
    ``Target.linked_symbols``. ``share_plans``: fusions of one structure share one plan
    (``plan_sharing``; False plans each on its own, for tests that compare the two)."""
    with gc_paused():
        return _plan_prepared_module(wrapped, options, reserved_symbols, share_plans)


def _plan_prepared_module(wrapped: HloModule, options: CompileOptions, reserved_symbols: frozenset[str],
                          share_plans: bool) -> ModulePlan:
    refuse_unbounded_dimensions(wrapped, "compile")
    device = device_for_arch(options.arch)
    computations = executed_computations(wrapped)
    taken: set[str] = set()
    shared = SharedPlans() if share_plans else None
    kernels = [plan_fusion(inst, device, kernel_symbol(inst.name, taken, reserved_symbols), shared)
               for comp in computations for inst in comp.instructions if inst.opcode == "fusion"]
    by_fusion = {id(k.fusion): k for k in kernels}
    for comp in computations:
        assign_in_place_buffers(comp, by_fusion)
    share_identical_kernels(kernels, None if shared is None else shared.fingerprints)
    for k in kernels:
        if k.reuses is None and k.planned_from is not None:
            _plan_afresh(k, device)  # its kernel is emitted: from its own plan, its own names
    return ModulePlan(wrapped, device, kernels, computations)


def _plan_afresh(k: KernelPlan, device: DeviceInfo) -> None:
    fresh = _plan_fusion(k.fusion, device, k.kernel_name)
    spec = dataclasses.replace(fresh.spec, donated=k.spec.donated) if k.spec.donated else fresh.spec
    k.analysis, k.spec, k.emitter, k.planned_from = fresh.analysis, spec, fresh.emitter, None


def kernel_reuse_key(k: KernelPlan, memo: dict[int, str] | None = None) -> tuple:
    """What must match for two fusions to launch one kernel (XLA's ``KernelReuseCache``:
    the fused computation's fingerprint and the kernel's arguments): the fused computation
    (opcodes, shapes and layouts, attributes, constants), the fusion's own attributes but its
    name and metadata (``plan_sharing.plan_key``), the emitter chosen, the launch and the
    buffers' aliasing."""
    return (plan_key(k.fusion, memo), k.analysis.emitter, k.analysis.variant, k.launch,
            tuple(sorted(k.spec.in_place.items())), tuple(sorted(k.spec.donated.items())), type(k.spec).__name__)


def share_identical_kernels(kernels: list[KernelPlan], memo: dict[int, str] | None = None) -> None:
    """Fusions with the same ``kernel_reuse_key`` launch the first one's kernel: it is emitted
    once (``ModulePlan.unique_kernels``), the others take its ``kernel_name`` and say whose it
    is in ``reuses``."""
    first: dict[tuple, KernelPlan] = {}
    memo = {} if memo is None else memo
    for k in kernels:
        owner = first.setdefault(kernel_reuse_key(k, memo), k)
        if owner is not k:
            k.kernel_name, k.reuses = owner.kernel_name, owner.fusion.name


# ---- buffer assignment for in-place kernels -------------------------------------------------------
# A value's buffers as the runtime holds them (``runtime/control_flow.py``): an array value is
# a frozenset of the buffers it may be, a tuple a list of such trees. A buffer is
# ``(fusion, output leaf)`` when a fusion of this computation allocated it, anything else
# (parameters, constants, while/conditional results) is opaque: never donated.

def _opaque_tree(inst: HloInstruction, keys: frozenset):
    def build(s):
        return [build(t) for t in s.tuple_shapes] if s.is_tuple else keys
    return build(inst.shape)


def _tree_keys(tree) -> frozenset:
    if isinstance(tree, list):
        out = frozenset()
        for t in tree:
            out |= _tree_keys(t)
        return out
    return tree


def _buffer_trees(comp: HloComputation) -> dict[HloInstruction, object]:
    trees: dict[HloInstruction, object] = {}
    for inst in comp.instructions:
        op = inst.opcode
        if op == "fusion":
            n = len(output_leaves(inst))
            if inst.shape.is_tuple and all(not s.is_tuple for s in inst.shape.tuple_shapes):
                t = [frozenset({(inst, i)}) for i in range(n)]
            elif not inst.shape.is_tuple:
                t = frozenset({(inst, 0)})
            else:  # nested tuple output: the runtime's flat leaves do not follow the shape
                t = _opaque_tree(inst, frozenset({(inst, "opaque")}))
        elif op in ("bitcast", "opt-barrier") and inst.operands:
            t = trees[inst.operands[0]]
        elif op == "get-tuple-element":
            whole = trees[inst.operands[0]]
            t = whole[inst.tuple_index] if isinstance(whole, list) else whole
        elif op == "tuple":
            t = [trees[o] for o in inst.operands]
        elif op in ("parameter", "constant"):
            t = _opaque_tree(inst, frozenset({(inst, "opaque")}))
        else:  # while, conditional, ...: the result may hold any buffer of the operands
            keys = frozenset({(inst, "opaque")})
            for o in inst.operands:
                keys |= _tree_keys(trees[o])
            t = _opaque_tree(inst, keys)
        trees[inst] = t
    return trees


def _feeds_only_in_place(fusion: HloInstruction, operand: int) -> bool:
    """Whether fused parameter ``operand`` is read by nothing but the in-place op it starts
    (through bitcasts): once donated, any other read could see updated elements."""
    comp = fusion.fused_computation
    params = [p for p in comp.parameters if p.parameter_number == operand]
    if len(params) != 1:
        return False
    users: dict[int, list[HloInstruction]] = {}
    for inst in comp.instructions:
        for o in inst.operands:
            users.setdefault(id(o), []).append(inst)
    stack = [params[0]]
    while stack:
        v = stack.pop()
        for u in users.get(id(v), []):
            positions = [i for i, o in enumerate(u.operands) if o is v]
            if u.opcode == "bitcast":
                stack.append(u)
            elif u.opcode == "dynamic-update-slice" and positions == [0]:
                pass
            elif u.opcode == "scatter" and all(i < len(u.operands) // 2 for i in positions) \
                    and len(positions) == 1:
                pass
            else:
                return False
    return True


def assign_in_place_buffers(comp: HloComputation, by_fusion: dict[int, KernelPlan]) -> None:
    """Donate the operand buffer of each in-place kernel (scatter, in-place DUS) of ``comp``
    to its output when XLA would alias them: the operand is a buffer a fusion of ``comp``
    allocated, this kernel is its last reader (through any alias: bitcast, tuple,
    get-tuple-element, a while or conditional holding it) and ``comp``'s root does not hold it.
    Records ``donated`` on the spec (its params then drop ``noalias``) and why on the plan."""
    trees = _buffer_trees(comp)
    last_read: dict = {}
    for pos, inst in enumerate(comp.instructions):
        for o in inst.operands:
            for key in _tree_keys(trees[o]):
                last_read[key] = pos
    in_root = _tree_keys(trees[comp.root])
    for pos, inst in enumerate(comp.instructions):
        plan = by_fusion.get(id(inst)) if inst.opcode == "fusion" else None
        if plan is None or not plan.in_place_operands:
            continue
        donated, why = {}, []
        leaves = output_leaves(inst)
        for leaf, k in sorted(plan.in_place_operands.items()):
            operand = inst.operands[k]
            keys = trees[operand]
            key = next(iter(keys)) if isinstance(keys, frozenset) and len(keys) == 1 else None
            param = [p for p in inst.fused_computation.parameters if p.parameter_number == k]
            if key is None or key[1] == "opaque":
                why.append(f"operand {k} (%{operand.name}) is not a buffer a fusion of this computation allocated")
            elif any(key in _tree_keys(trees[o]) for j, o in enumerate(inst.operands) if j != k):
                why.append(f"operand {k} (%{operand.name}) is also another operand")
            elif last_read.get(key) != pos:
                why.append(f"operand {k} (%{operand.name}) is read after this fusion")
            elif key in in_root:
                why.append(f"operand {k} (%{operand.name}) is part of the computation's root")
            elif not _feeds_only_in_place(inst, k):
                why.append(f"operand {k} (%{operand.name}) is read inside the fusion beyond the in-place op")
            elif len(param) != 1 or param[0].shape.element_type != leaves[leaf][1].element_type \
                    or physical_size(param[0].shape) != physical_size(leaves[leaf][1]):
                why.append(f"operand {k} (%{operand.name}) and output {leaf} differ in size or element type")
            else:
                donated[leaf] = k
        if donated:
            plan.spec = dataclasses.replace(plan.spec, donated=donated)
        plan.aliasing = "; ".join(
            [f"output {leaf} takes operand {k}'s buffer" for leaf, k in donated.items()] + why)
