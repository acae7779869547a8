"""``--emit=fusions``: for every kernel, its hero, the emitter chosen and why, the launch
configuration, the thread→output indexing map and the partition into functions."""
from __future__ import annotations

from ..hlo.ir import HloInstruction
from ..hlo.library_targets import library_reason
from .compiler import ModulePlan
from .perf_model import ModuleEstimate

FFT_LIBRARY = "cufft"
FFT_REASON = "fft runs as a runtime step: cuFFT on cuda, numpy's FFT on the host (no kernel)"


def fft_calls(plan: ModulePlan) -> list[HloInstruction]:
    """The ``fft`` instructions the runtime runs as steps, in program order."""
    return [i for c in (plan.computations or [plan.module.entry]) for i in c.instructions if i.opcode == "fft"]


def fusion_report_text(plan: ModulePlan, cost: ModuleEstimate | None = None) -> str:
    """The report; with ``cost``, each kernel's estimate (``perf_model``) and the module's."""
    calls = plan.library_calls
    ffts = fft_calls(plan)
    extra = f", {len(calls) + len(ffts)} library call(s)" if calls or ffts else ""
    out = [f"// device: {plan.device.name} ({plan.device.arch}), {len(plan.kernels)} kernel(s){extra}"]
    if cost is not None:
        m = cost.summary_fields()
        out.append(f"// cost model ({cost.device}): {m['estimated_us']:.2f} us for one run of every kernel, "
                   f"{m['bytes']} B, {m['flops']} flops, {m['pct_of_bandwidth_roofline']:.0f}% of the bandwidth "
                   f"roofline; uncoalesced: {', '.join(m['uncoalesced_kernels']) or 'none'}")
    for k in plan.kernels:
        a = k.analysis
        launch = k.launch
        out.append(f"fusion %{k.fusion.name} -> kernel {k.kernel_name}"
                   + (f" (reuses the kernel of %{k.reuses})" if k.reuses else ""))
        out.append(f"  roots: {', '.join('%' + r.name for r in a.roots)}")
        out.append(f"  heroes: {', '.join('%' + h.name for h in a.heroes)}")
        out.append(f"  xla emitter: {a.xla_emitter}")
        out.append(f"  emitter: {a.emitter}" + (f" ({a.variant})" if a.variant else ""))
        out.append(f"  reason: {a.reason}")
        out.append(f"  launch: grid {list(launch.grid)} block {list(launch.block)} shared {launch.shared_bytes} B")
        if k.in_place_operands:
            out.append(f"  in-place aliasing: {'yes' if k.donated else 'no (operand copied)'}"
                       + (f": {k.aliasing}" if k.aliasing else ""))
        out.extend(f"  {line}" for line in k.spec.report_lines())
        if cost is not None:
            est = cost.for_kernel(k.kernel_name)
            why = dict(cost.not_estimated).get(k.kernel_name)
            out.append(f"  {est.report_line()}" if est is not None else f"  cost: not estimated ({why})")
    for call in calls:
        target = call.attr("custom_call_target")
        out.append(f"custom-call %{call.name} -> library {target}")
        out.append("  emitter: library")
        out.append(f"  reason: {library_reason(target)}")
    for fft in ffts:
        out.append(f"fft %{fft.name} -> library {FFT_LIBRARY} ({fft.attr('fft_type', 'FFT')})")
        out.append("  emitter: library")
        out.append(f"  reason: {FFT_REASON}")
    return "\n".join(out) + "\n"
