"""XLA:CPU on an SPMD module (``--spmd --xla``): every participant a CPU device of one process.

XLA:CPU has one device unless ``XLA_FLAGS`` holds ``--xla_force_host_platform_device_count``
before jax starts (the fuzz workers set it: ``DEVICE_FLAG``). The module is compiled for
``num_replicas`` x ``num_partitions`` with the device assignment ``[r][p] = r * P + p`` (our
flattened ids); with partitions XLA runs its SPMD partitioner, which would rewrite the module
(and refuses partition-id), so every instruction is marked ``sharding={manual}``: the module is
already per device and the partitioner leaves it as it is. Each argument is handed over as one
array whose shards are the participants' own values (a "replicated" sharding whose copies
differ; XLA never checks them), each output taken apart per device.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

DEVICE_FLAG = "--xla_force_host_platform_device_count=8"


def ensure_device_flag() -> None:
    """Ask for 8 XLA:CPU devices (effective only before jax starts its CPU backend)."""
    import os
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + DEVICE_FLAG).strip()

def _leaves(line: str) -> int:
    """How many arrays the shape of the instruction on ``line`` holds (0: not a tuple)."""
    rest = line.split(" = ", 1)[1]
    if not rest.startswith("("):
        return 0
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return rest[:i].count("[")
    return 0


def manual_sharding(text: str) -> str:
    """``text`` with a manual sharding on every instruction (tuples: one per leaf)."""
    out = []
    for line in text.splitlines():
        if " = " in line and not line.lstrip().startswith(("HloModule", "//")) and "sharding=" not in line:
            n = _leaves(line)
            line += ", sharding=" + ("{" + ", ".join(["{manual}"] * n) + "}" if n else "{manual}")
        out.append(line)
    return "\n".join(out) + "\n"


def run_xla_spmd(xla_ref, text: str, args: Sequence[Sequence[np.ndarray]], replicas: int,
                 partitions: int) -> list[list[np.ndarray]]:
    """Each participant's output leaves from XLA:CPU (``xla_ref``: the loaded xla_ref.py)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    n = replicas * partitions
    xc = xla_ref._xc()
    backend = xla_ref.cpu_backend()
    devices = backend.local_devices()
    if len(devices) < n:
        raise RuntimeError(f"XLA:CPU has {len(devices)} device(s), the module runs on {n} (XLA_FLAGS={DEVICE_FLAG} "
                           "must be set before jax starts)")
    devices = devices[:n]
    comp, mlir = xla_ref.hlo_text_to_mlir(manual_sharding(xla_ref.inline_fusions(text)))
    opts = xc.CompileOptions()
    build = opts.executable_build_options
    build.num_replicas, build.num_partitions = replicas, partitions
    build.use_spmd_partitioning = partitions > 1
    build.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(replicas, partitions))
    exe = backend.compile_and_load(mlir, xc.DeviceList(tuple(devices)), opts)
    specs = xla_ref.parameter_specs(comp)
    same = NamedSharding(Mesh(np.array(devices), ("d",)), PartitionSpec())
    bufs = []
    for i, (dt, dims) in enumerate(specs):
        shards = [jax.device_put(xla_ref.coerce_input(args[k][i], dt, dims, f"p{k}.arg{i}").reshape(dims),
                                 devices[k]) for k in range(n)]
        bufs.append(jax.make_array_from_single_device_arrays(tuple(dims), same, shards))
    outs = exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    by_device = [{d: np.asarray(a) for a in per for d in a.devices()} for per in outs]
    return [[leaf[devices[k]] for leaf in by_device] for k in range(n)]
