"""Benchmark of the transpose and reduction emitters (and a softmax) at sizes that fill a GPU.

For each module (text below): compile with ``compile_executable(module, "cuda")``, bind every
kernel of ENTRY to buffers once, time the kernel launches with ``CudaDevice.time_kernel``
(events, L2 warm), and report time, GB/s (bytes of the parameters + result / time), the
ratio to a device-to-device copy of the same number of bytes (read + write = the same
traffic), and XLA:GPU's time through jax when ``bench/gelu.py``'s recipe works. Reductions
that are not race-free go through the tree-reduction rewrite first (as XLA does).

Without a GPU it says so, runs the same modules at smaller sizes on the host platform and
prints ratios to a host memcpy only; it exits 0 either way.

    python bench/emitters.py [--iterations N] [--only NAME]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hlo_compile import parse_module  # noqa: E402
from hlo_compile.runtime import literals  # noqa: E402
from hlo_compile.runtime.executable import Buffer, compile_executable  # noqa: E402
from hlo_compile.runtime.physical import buffer_bytes  # noqa: E402

ADD = """add {
  a = %(t)s[] parameter(0)
  b = %(t)s[] parameter(1)
  ROOT s = %(t)s[] add(a, b)
}
"""
MAX = """max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""


def transpose_2d(n: int, m: int) -> str:
    return f"""HloModule transpose_2d
ENTRY e {{
  p = f32[{n},{m}] parameter(0)
  ROOT t = f32[{m},{n}] transpose(p), dimensions={{1,0}}
}}"""


def transpose_3d(a: int, b: int, c: int, perm: str) -> str:
    dims = [a, b, c]
    out = ",".join(str(dims[int(i)]) for i in perm.split(","))
    return f"""HloModule transpose_{perm.replace(',', '')}
ENTRY e {{
  p = f32[{a},{b},{c}] parameter(0)
  ROOT t = f32[{out}] transpose(p), dimensions={{{perm}}}
}}"""


def reduction(n: int, m: int, dim: int) -> str:
    """bf16 in, f32 accumulation, bf16 out, written as one fusion (no fusion pass yet)."""
    kept = m if dim == 0 else n
    return f"""HloModule reduce_{'row' if dim == 1 else 'column'}
{ADD % {'t': 'f32'}}
fused_reduce {{
  p = bf16[{n},{m}] parameter(0)
  c = f32[{n},{m}] convert(p)
  z = f32[] constant(0)
  r = f32[{kept}] reduce(c, z), dimensions={{{dim}}}, to_apply=add
  ROOT o = bf16[{kept}] convert(r)
}}
ENTRY e {{
  p = bf16[{n},{m}] parameter(0)
  ROOT f = bf16[{kept}] fusion(p), kind=kInput, calls=fused_reduce
}}"""


def softmax(n: int, m: int) -> str:
    return f"""HloModule softmax
{ADD % {'t': 'f32'}}
{MAX}
ENTRY e {{
  p = f32[{n},{m}] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[{n}] reduce(p, ninf), dimensions={{1}}, to_apply=max
  mb = f32[{n},{m}] broadcast(mx), dimensions={{0}}
  d = f32[{n},{m}] subtract(p, mb)
  ex = f32[{n},{m}] exponential(d)
  z = f32[] constant(0)
  s = f32[{n}] reduce(ex, z), dimensions={{1}}, to_apply=add
  sb = f32[{n},{m}] broadcast(s), dimensions={{0}}
  ROOT y = f32[{n},{m}] divide(ex, sb)
}}"""


def cases(gpu: bool) -> list[tuple[str, str]]:
    k = 1 if gpu else 8          # host: 1/8 of each dim that is scaled
    return [("transpose 2-D f32[%d,%d]" % (8192 // k, 8192 // k), transpose_2d(8192 // k, 8192 // k)),
            ("transpose 021 f32[64,%d,%d]" % (512 // k, 512 // k), transpose_3d(64, 512 // k, 512 // k, "0,2,1")),
            ("transpose 210 f32[64,%d,%d]" % (512 // k, 512 // k), transpose_3d(64, 512 // k, 512 // k, "2,1,0")),
            ("row reduction bf16[%d,%d]" % (8192 // k, 8192 // k), reduction(8192 // k, 8192 // k, 1)),
            ("column reduction bf16[%d,%d]" % (8192 // k, 8192 // k), reduction(8192 // k, 8192 // k, 0)),
            ("softmax f32[%d,%d]" % (4096 // k, 4096 // k), softmax(4096 // k, 4096 // k))]


# ---- binding and launching every kernel of ENTRY -------------------------------------------------

def bind(exe, args, with_copies: bool = False):
    """Upload the arguments once and allocate every kernel's outputs; returns a function that
    launches all kernels of ENTRY in order (no host work besides the launches), and their count.
    An in-place kernel (scatter, dynamic-update-slice) whose output was not donated starts from
    a copy of its operand, made here once; ``with_copies`` makes the function repeat those copies
    before each launch, as ``Executable.run`` does (the whole module's work)."""
    from hlo_compile.codegen.kernel import output_leaves
    p, values, launches = exe.platform, {}, []
    for inst in exe.module.entry.instructions:
        if inst.opcode == "parameter":
            values[inst] = exe.upload_value(args[inst.parameter_number], inst.shape)
        elif inst.opcode == "constant":
            values[inst] = exe.constant(inst)
        elif inst.opcode == "bitcast":
            values[inst] = Buffer(inst.shape, values[inst.operands[0]].data)
        elif inst.opcode == "fusion":
            plan = exe.plan.kernel_for(inst)
            ins = [values[op].data for op in inst.operands]
            outs = [Buffer(s, p.allocate(s)) for _, s in output_leaves(inst)]
            values[inst] = outs if inst.shape.is_tuple else outs[0]
            copy = [(outs[o].data, ins[i], outs[o].shape) for o, i in plan.in_place_operands.items()]
            for c in copy:
                p.copy(*c)
            launches.append((exe.kernels[inst.name], plan, ins + [b.data for b in outs], copy))
        elif inst.opcode in ("tuple", "get-tuple-element"):
            values[inst] = (list(values[o] for o in inst.operands) if inst.opcode == "tuple"
                            else values[inst.operands[0]][inst.tuple_index])
        else:
            raise RuntimeError(f"cannot bind %{inst.name} ({inst.opcode})")

    def run(with_copies: bool = with_copies):
        for kernel, plan, bufs, copy in launches:
            if with_copies:
                for c in copy:
                    p.copy(*c)
            p.launch(kernel, plan, bufs)
    return run, len(launches)


def traffic(module) -> int:
    entry = module.entry
    return sum(buffer_bytes(q.shape) for q in entry.parameters) + buffer_bytes(entry.root.shape)


def prepare(text: str, arch: str):
    """The parsed module (the tree-reduction split runs inside compilation)."""
    del arch
    return parse_module(text)


def _median(xs):
    return float(statistics.median(xs))


def _wall_ms(fn, n: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


# ---- XLA through jax (bench/gelu.py's recipe, when importable) -----------------------------------

def xla_ms(module, text: str, x, iterations: int) -> tuple[float | None, str]:
    try:
        sys.path.insert(0, str(REPO / "bench"))
        import gelu  # noqa: PLC0415
        xr, why = gelu.find_xla_ref(None)
        if xr is None:
            return None, why
        expected = None
        res = gelu.time_xla(xr, module, text, x, expected, "cuda", iterations, 10)
        return (res.get("ms"), res.get("how") or res.get("why", "")) if isinstance(res, dict) else (None, "?")
    except Exception as e:  # jax missing, GPU busy, recipe changed: say so, do not fail
        return None, f"not measured: {type(e).__name__}: {e}"[:160]


# ---- main ----------------------------------------------------------------------------------------

def bench_gpu(ns) -> None:
    print(f"{'case':34} {'kernels':>7} {'us':>10} {'GB/s':>8} {'/copy':>6} {'XLA us':>9} {'/XLA':>6}")
    for name, text in cases(True):
        if ns.only and ns.only not in name:
            continue
        module = prepare(text, "sm_90")
        x = literals.random_inputs(module, 0)
        exe = compile_executable(module, "cuda")
        dev = exe.platform.device
        try:
            run, n_kernels = bind(exe, x)
            nbytes = traffic(module)
            ms = _median(dev.time_kernel(run, iterations=ns.iterations, warmup=2))
            src, dst = dev.alloc(nbytes // 2), dev.alloc(nbytes // 2)
            copy = _median(dev.time_kernel(lambda: dev.copy_device_to_device(dst, src), iterations=ns.iterations,
                                           warmup=2))
        finally:
            dev.close()
        xms, how = xla_ms(module, text, x[0], ns.iterations) if ns.xla else (None, "skipped (--no-xla)")
        print(f"{name:34} {n_kernels:7d} {ms * 1e3:10.1f} {nbytes / ms / 1e6:8.0f} {ms / copy:6.2f} "
              f"{'-' if xms is None else f'{xms * 1e3:9.1f}':>9} {'-' if xms is None else f'{ms / xms:6.2f}':>6}"
              + ("" if xms is not None else f"  (XLA: {how})"))


def bench_host(ns) -> None:
    print(f"{'case (host, smaller sizes)':34} {'kernels':>7} {'ms':>9} {'/copy':>7}")
    for name, text in cases(False):
        if ns.only and ns.only not in name:
            continue
        module = prepare(text, "sm_90")
        x = literals.random_inputs(module, 0)
        exe = compile_executable(module, "host")
        run, n_kernels = bind(exe, x)
        nbytes = traffic(module)
        n = max(1, ns.iterations // 10)
        ms = _median(_wall_ms(run, n))
        src, dst = np.ones(nbytes // 2, np.uint8), np.empty(nbytes // 2, np.uint8)
        copy = _median(_wall_ms(lambda: np.copyto(dst, src), 5))
        print(f"{name:34} {n_kernels:7d} {ms:9.1f} {ms / copy:7.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--no-xla", dest="xla", action="store_false")
    ns = ap.parse_args(argv)
    from hlo_compile.runtime import cuda as rt
    ok, why = rt.available()
    if ok:
        bench_gpu(ns)
    else:
        print(f"no GPU ({why}): timing the host platform at 1/8 of each size, ratios only")
        bench_host(ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
