"""How much host memory an ``hlo-run`` run will take, estimated before anything is allocated.

A run holds, at its peak:

* the **inputs**, one set per participant (generated in their own element type, chunk by
  chunk: ``literals.GENERATION_TEMPORARY_BYTES`` on top; read from an npz: the same size);
* the **platform's work**: on the interpreter, the values live at once while it walks each
  computation in order (a value is dropped after its last use, as ``Evaluator`` does), plus the
  largest called computation's own peak at the instruction calling it; numpy's temporaries
  on the way (an elementwise chain, a dot's accumulation, a broadcast operand, a reduction's
  casts) are covered by ``INTERPRETER_FACTOR``, measured on the modules of tests/data/models
  and examples/ and on larger ones (see ``INTERPRETER_FACTOR``). On the host platform the same liveness without
  the factor (compiled kernels write their buffers in place); on cuda only the outputs come
  back to the host;
* after the platform's run, its **outputs** while the **reference** runs (the same estimate
  for the reference platform), and the expected literals when ``--expected-literals`` is
  given;
* with ``--iterations`` > 1, the previous iteration's inputs and outputs while the next
  inputs are generated.

SPMD runs on the interpreter or the host run every participant at once (one thread each):
their work is counted once per participant.

``estimate_run`` gives the parts and the total; ``check_run`` refuses (``HloError``: hlo-run prints it, exit 2)
when the total exceeds the limit, naming the flags that would make it fit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..hlo.ir import HloComputation, HloModule
from ..hlo.sizes import available_memory, format_bytes, shape_bytes

# Peak host memory of the interpreter over ``interpreter_live_peak`` (tracemalloc peak of
# evaluate_module, inputs excluded), measured: 0.50-0.78 on modules of 10-200 MB of values
# (examples/gelu.hlo 0.50; a softmax of f32[2048,8192] as XLA:GPU fuses it 0.67; an f32 MLP of
# two dots 0.78; a bf16 RMS norm computed in f32 0.67: broadcasts are numpy views, fusions'
# roots are their results), 1.14-1.7 on the larger modules of tests/data/models
# (flax_cnn_batchnorm_sgd 1.14, llama_block_bf16 1.26, stax_resnet_adam 1.67), up to 38 on
# those of a few KB, where the interpreter's fixed cost (INTERPRETER_OVERHEAD) dominates.
# 1.5 leaves room for numpy temporaries the measured modules did not need.
INTERPRETER_FACTOR = 1.5
INTERPRETER_OVERHEAD = 16 << 20

# Results that are not a buffer of their own in the interpreter (views or Python tuples of
# other values).
_ALIASES = frozenset({"parameter", "tuple", "get-tuple-element", "bitcast", "constant"})

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40}


def parse_limit(text: str) -> int | str | None:
    """``--memory-limit``'s value: ``auto`` (the memory available now), ``none`` (no check)
    or a size in bytes (``17179869184``, ``16G``, ``16GiB``, ``500MB``). ``ValueError`` otherwise."""
    t = str(text).strip().lower()
    if t in ("auto", "none"):
        return None if t == "none" else "auto"
    number = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(number):].strip()
    if unit not in _UNITS or not number:
        raise ValueError(f"'{text}' is not a size (BYTES, e.g. 16G or 500MB), auto or none")
    value = float(number) * _UNITS[unit]
    if value < 0:
        raise ValueError(f"'{text}' is negative")
    return int(value)


def _called(inst) -> list[HloComputation]:
    return inst.called_computations()


def interpreter_live_peak(comp: HloComputation, _memo: dict | None = None) -> int:
    """The largest sum of instruction results held at once while the interpreter evaluates
    ``comp`` (its parameters are the caller's values: not counted), a called computation's own
    peak counted at the instruction that calls it."""
    memo = {} if _memo is None else _memo
    key = id(comp)
    if key in memo:
        return memo[key]
    memo[key] = 0  # a recursive call (not valid HLO) counts nothing more
    insts = comp.instructions
    last: dict[int, int] = {}
    for k, inst in enumerate(insts):
        last.setdefault(id(inst), k)
        for op in inst.operands:
            last[id(op)] = k
    last.pop(id(comp.root), None)
    dead_after: dict[int, list[int]] = {}
    for value, k in last.items():
        dead_after.setdefault(k, []).append(value)
    size: dict[int, int] = {}
    live = peak = 0
    for k, inst in enumerate(insts):
        if k:
            for value in dead_after.get(k - 1, ()):
                live -= size.pop(value, 0)
        own = 0 if inst.opcode in _ALIASES else shape_bytes(inst.shape)
        inner = max((interpreter_live_peak(c, memo) for c in _called(inst)), default=0)
        peak = max(peak, live + max(own, inner))  # a called computation's root is the result
        live += own
        size[id(inst)] = own
    memo[key] = peak
    return peak


def output_bytes(module: HloModule) -> int:
    return shape_bytes(module.entry.root.shape)


def input_bytes(module: HloModule) -> int:
    return sum(shape_bytes(p.shape) for p in module.entry.parameters)


@dataclass(frozen=True)
class RunRequest:
    """What an hlo-run run does, as far as memory goes."""

    platform: str = "interpreter"       # interpreter | host | cuda
    reference: str = "none"             # the platform compared with, or none
    participants: int = 1
    iterations: int = 1
    expected_literals: bool = False     # --expected-literals: the stored outputs held too


@dataclass(frozen=True)
class MemoryEstimate:
    """The parts of a run's peak host memory, in bytes (``total`` is the estimate)."""

    inputs: int                  # all participants' inputs
    platform_work: int           # the platform's run, its outputs included
    outputs: int                 # the platform's outputs, held while the reference runs
    reference_work: int          # the reference's run, its outputs included
    expected: int                # --expected-literals
    iterations_extra: int        # the previous iteration's values while the next are made
    generation: int              # the per-chunk draws of generated inputs
    request: RunRequest = field(default_factory=RunRequest)

    @property
    def total(self) -> int:
        return (self.inputs + max(self.platform_work, self.outputs + self.reference_work) + self.expected
                + self.iterations_extra + self.generation)

    def describe(self) -> str:
        r = self.request
        per = f" x {r.participants} participants" if r.participants > 1 else ""
        parts = [f"inputs {format_bytes(self.inputs)}{per}", f"{r.platform} run {format_bytes(self.platform_work)}"]
        if self.reference_work:
            parts.append(f"{r.reference} reference {format_bytes(self.reference_work)} "
                         f"(+ outputs {format_bytes(self.outputs)} held)")
        if self.expected:
            parts.append(f"expected literals {format_bytes(self.expected)}")
        if self.iterations_extra:
            parts.append(f"previous iteration {format_bytes(self.iterations_extra)}")
        return ", ".join(parts)


def _work(module: HloModule, platform: str, live_peak: int, outputs: int) -> int:
    if platform == "interpreter":
        return int(live_peak * INTERPRETER_FACTOR) + INTERPRETER_OVERHEAD
    if platform == "host":
        return max(live_peak, outputs)
    return outputs  # cuda: device memory is the device's; the outputs come back


def estimate_run(module: HloModule, request: RunRequest, *, generated_inputs: bool = True) -> MemoryEstimate:
    """The peak host memory of running ``module`` as ``request`` says (module docstring)."""
    from .literals import GENERATION_TEMPORARY_BYTES
    n = max(request.participants, 1)
    inputs = input_bytes(module) * n
    outputs = output_bytes(module) * n
    live = interpreter_live_peak(module.entry) if "interpreter" in (request.platform, request.reference) or \
        "host" in (request.platform, request.reference) else 0
    platform_work = _work(module, request.platform, live, output_bytes(module)) * n
    compared = request.reference not in ("none", "", request.platform)
    reference_work = _work(module, request.reference, live, output_bytes(module)) * n if compared else 0
    expected = output_bytes(module) * n if request.expected_literals else 0
    extra = (inputs + outputs * (1 + compared)) if request.iterations > 1 else 0
    generation = GENERATION_TEMPORARY_BYTES if generated_inputs else 0
    return MemoryEstimate(inputs, platform_work, outputs if compared else 0, reference_work, expected, extra,
                          generation, request)


def _remedies(module: HloModule, request: RunRequest, total: int, generated_inputs: bool) -> list[str]:
    """The flags that lower the estimate, each with what it would be."""
    out = []
    options = []
    if request.reference not in ("none", "", request.platform):
        options.append(("--reference=none", replace(request, reference="none")))
    if request.iterations > 1:
        options.append(("--iterations=1", replace(request, iterations=1)))
    if request.platform == "interpreter":
        options.append(("--platform=host", replace(request, platform="host")))
        if request.reference != "none":
            options.append(("--platform=host --reference=none", replace(request, platform="host", reference="none")))
    if request.expected_literals:
        options.append(("no --expected-literals", replace(request, expected_literals=False)))
    for flag, changed in options:
        t = estimate_run(module, changed, generated_inputs=generated_inputs).total
        if t < total:
            out.append(f"{flag} (about {format_bytes(t)})")
    return out


def check_run(module: HloModule, request: RunRequest, limit: int | str | None = "auto", *,
              generated_inputs: bool = True, available=None) -> MemoryEstimate:
    """The estimate of the run; raises ``HloError`` (exit 2) when it exceeds ``limit``
    (``auto``: the memory available now; an int: bytes; None: never). ``available``: a
    stand-in for ``available_memory`` (tests)."""
    from ..hlo.errors import HloError
    from ..hlo.unbounded import refuse_unbounded_dimensions
    refuse_unbounded_dimensions(module, "run")
    est = estimate_run(module, request, generated_inputs=generated_inputs)
    if limit is None:
        return est
    if limit == "auto":
        free = (available or available_memory)()
        what = "available (MemAvailable)"
        if free is None:
            return est
    else:
        free, what = int(limit), "allowed (--memory-limit)"
    if est.total > free:
        fixes = _remedies(module, request, est.total, generated_inputs)
        helps = f"; try {', '.join(fixes)}" if fixes else ""
        raise HloError(f"{module.name}: the run needs about {format_bytes(est.total)} of host memory "
                        f"({est.describe()}); {format_bytes(free)} {'are' if limit == 'auto' else 'is'} {what}"
                        f"{helps}; --memory-limit=none runs it anyway")
    return est
