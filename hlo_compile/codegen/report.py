"""``--emit=fusions``: for every kernel, its hero, the emitter chosen and why, the launch
configuration, the thread→output indexing map and the partition into functions."""
from __future__ import annotations

from ..hlo.library_targets import library_reason
from .compiler import ModulePlan


def fusion_report_text(plan: ModulePlan) -> str:
    calls = plan.library_calls
    extra = f", {len(calls)} library call(s)" if calls else ""
    out = [f"// device: {plan.device.name} ({plan.device.arch}), {len(plan.kernels)} kernel(s){extra}"]
    for k in plan.kernels:
        a = k.analysis
        launch = k.launch
        out.append(f"fusion %{k.fusion.name} -> kernel {k.kernel_name}")
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
    for call in calls:
        target = call.attr("custom_call_target")
        out.append(f"custom-call %{call.name} -> library {target}")
        out.append("  emitter: library")
        out.append(f"  reason: {library_reason(target)}")
    return "\n".join(out) + "\n"
