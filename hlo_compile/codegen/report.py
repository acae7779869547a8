"""``--emit=fusions``: for every kernel, its hero, the emitter chosen and why, the launch
configuration, the thread→output indexing map and the partition into functions; a row per
library call. With the cost model: each kernel's and library call's estimate (or why there is
none), the module's total and how many steps it leaves out, and the top ``TOP_N`` kernels and
calls by estimated time."""
from __future__ import annotations

from ..hlo.ir import HloInstruction
from ..hlo.calls.library_targets import library_reason
from .compiler import ModulePlan
from .model.perf_model import TOP_N, ModuleEstimate

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
        what = "every kernel" + (" and library call" if cost.library_calls else "")
        out.append(f"// cost model ({cost.device}): {m['estimated_us']:.2f} us for one run of {what}, "
                   f"{m['bytes']} B, {m['flops']} flops, {m['pct_of_bandwidth_roofline']:.0f}% of the bandwidth "
                   f"roofline; uncoalesced: {', '.join(m['uncoalesced_kernels']) or 'none'}; "
                   + (f"{m['library_calls_estimated']} library call(s) estimated; " if cost.library_calls else "")
                   + f"{m['not_estimated_count']} not estimated (left out of the total)"
                   + (f": {_names(m['not_estimated'])}" if m['not_estimated'] else ""))
    not_estimated = dict(cost.not_estimated) if cost is not None else {}
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
        static = int(k.spec.summary_fields().get("static_shared_bytes", 0) or 0)
        out.append(f"  launch: grid {list(launch.grid)} block {list(launch.block)} shared {launch.shared_bytes} B"
                   + (f" dynamic + {static} B static" if static else ""))
        if k.in_place_operands:
            out.append(f"  in-place aliasing: {'yes' if k.donated else 'no (operand copied)'}"
                       + (f": {k.aliasing}" if k.aliasing else ""))
        out.extend(f"  {line}" for line in k.spec.report_lines())
        if cost is not None:
            est = cost.for_fusion(k.fusion.name) or cost.for_kernel(k.kernel_name)
            why = not_estimated.get(k.kernel_name)
            out.append(f"  {est.report_line()}" if est is not None else f"  cost: not estimated ({why})")
    for call in calls:
        target = call.attr("custom_call_target")
        out.append(f"custom-call %{call.name} -> library {target}")
        out.append("  emitter: library")
        out.append(f"  reason: {library_reason(target)}")
        if cost is not None:
            est = cost.for_call(call.name)
            out.append(f"  {est.report_line()}" if est is not None
                       else f"  cost: not estimated ({not_estimated.get(call.name)})")
    for fft in ffts:
        out.append(f"fft %{fft.name} -> library {FFT_LIBRARY} ({fft.attr('fft_type', 'FFT')})")
        out.append("  emitter: library")
        out.append(f"  reason: {FFT_REASON}")
        if cost is not None and fft.name in not_estimated:
            out.append(f"  cost: not estimated ({not_estimated[fft.name]})")
    if cost is not None:
        out.extend(top_table_lines(cost))
    return "\n".join(out) + "\n"


def _names(names, most: int = 8) -> str:
    names = list(names)
    return ", ".join("%" + n for n in names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def top_table_lines(cost: ModuleEstimate, n: int = TOP_N) -> list[str]:
    """"Where the estimated time goes": the ``n`` kernels (launches summed) and library calls
    with the most estimated time, most first, with their share of the module's total."""
    rows = cost.top(n)
    if not rows:
        return []
    entries = len({k.kernel for k in cost.kernels}) + len(cost.library_calls)
    left = len(cost.not_estimated)
    out = [f"// top {len(rows)} of {entries} by estimated time ({cost.device}, {cost.estimated_us:.2f} us in all"
           + (f"; {left} not estimated, left out" if left else "") + "):"]
    width = max(len(r.name) for r in rows)
    for i, r in enumerate(rows, 1):
        what = (f"kernel, {r.emitter or '?'}" + (f", {r.launches} launches" if r.launches > 1 else "")
                if r.kind == "kernel" else f"library call, {r.target}")
        out.append(f"//   {i:2d}. {r.name:<{width}}  {r.estimated_us:10.2f} us  {r.pct_of_total:5.1f}%  ({what})")
    return out
