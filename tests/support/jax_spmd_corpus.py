"""Generate tests/data/spmd/: SPMD modules compiled by XLA:CPU through JAX, with every device's
inputs and outputs, as references for our interpreter and runtime on R x P participants.

Run: ``python tests/support/jax_spmd_corpus.py [OUT_DIR]`` (JAX in the environment; it sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` itself). For each case it writes
``NAME.hlo`` (``compiled.as_text()``: the module after XLA's SPMD partitioner and
optimisations, per-device shapes) and ``NAME.npz`` with ``p{k}.arg{i}`` and ``p{k}.out{j}``
for participant k = partition k = mesh device k (JAX's ``jit`` runs R = 1 replica, P = devices).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map


def _mesh(shape, names):
    devices = np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


def _cases():
    m1 = _mesh((8,), ("x",))
    m2 = _mesh((2, 4), ("a", "b"))
    ring = [(i, (i + 1) % 8) for i in range(8)]
    partial = [(0, 3), (3, 5), (5, 0), (1, 2)]

    def sm(mesh, fn, in_specs, out_specs):
        return shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs)

    x16 = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) / 7 - 3
    yield "psum", m1, sm(m1, lambda x: lax.psum(x, "x"), P("x"), P("x")), [x16]
    yield "pmax_pmin", m1, sm(m1, lambda x: (lax.pmax(x, "x"), lax.pmin(x, "x")), P("x"), (P("x"), P("x"))), [x16]
    yield "all_gather", m1, sm(m1, lambda x: lax.all_gather(x, "x", tiled=True), P("x"), P("x")), [x16]
    yield "all_gather_axis1", m1, sm(m1, lambda x: lax.all_gather(x, "x", axis=1, tiled=True), P("x"), P("x")), [x16]
    x64 = np.arange(64 * 3, dtype=np.float32).reshape(64, 3) % 11 - 5
    yield "psum_scatter", m1, sm(m1, lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
                                 P("x"), P("x")), [x64]
    a2a = np.arange(8 * 8 * 16, dtype=np.float32).reshape(64, 16)
    yield "all_to_all", m1, sm(m1, lambda x: lax.all_to_all(x, "x", 0, 1, tiled=True), P("x"), P("x")), [a2a]
    yield "ppermute_ring", m1, sm(m1, lambda x: lax.ppermute(x, "x", ring), P("x"), P("x")), [x16]
    yield "ppermute_partial", m1, sm(m1, lambda x: lax.ppermute(x, "x", partial), P("x"), P("x")), [x16]
    yield "axis_index", m1, sm(m1, lambda x: x * lax.axis_index("x").astype(jnp.float32), P("x"), P("x")), [x16]
    i32 = (np.arange(16 * 4, dtype=np.int32).reshape(16, 4) * 37) % 23 - 11
    yield "psum_int", m1, sm(m1, lambda x: lax.psum(x, "x"), P("x"), P("x")), [i32]
    x8 = np.arange(8 * 8, dtype=np.float32).reshape(8, 8) / 5 - 6
    yield "mesh2d_psum_b", m2, sm(m2, lambda x: lax.psum(x, "b"), P("a", "b"), P("a", "b")), [x8]
    yield "mesh2d_gather_a", m2, sm(m2, lambda x: lax.all_gather(x, "a", tiled=True), P("a", "b"),
                                    P("a", "b")), [x8]
    yield "mesh2d_psum_both", m2, sm(m2, lambda x: lax.psum(x, ("a", "b")), P("a", "b"), P()), [x8]
    yield "mesh2d_axis_index", m2, sm(m2, lambda x: x + 10 * lax.axis_index("a") + lax.axis_index("b"),
                                      P("a", "b"), P("a", "b")), [x8]
    w = np.arange(32 * 8, dtype=np.float32).reshape(32, 8) / 50
    xin = np.arange(4 * 32, dtype=np.float32).reshape(4, 32) / 30 - 2

    def matmul(x, w):
        return jnp.tanh(x @ w)
    yield "gspmd_matmul", m1, (matmul, (NamedSharding(m1, P(None, "x")), NamedSharding(m1, P("x", None))),
                               NamedSharding(m1, P())), [xin, w]


def _shards(arr, mesh) -> list[np.ndarray]:
    """The array each device (mesh order = partition order) holds."""
    by_device = {s.device: np.asarray(s.data) for s in arr.addressable_shards}
    return [by_device[d] for d in mesh.devices.flat]


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, mesh, fn, args in _cases():
        if isinstance(fn, tuple):
            f, in_sh, out_sh = fn
            jitted = jax.jit(f, in_shardings=in_sh, out_shardings=out_sh)
            placed = [jax.device_put(a, s) for a, s in zip(args, in_sh)]
        else:
            jitted = jax.jit(fn)
            placed = [jax.device_put(a, NamedSharding(mesh, P(*mesh.axis_names))) for a in args]
        compiled = jitted.lower(*placed).compile()
        outs = jitted(*placed)
        outs = outs if isinstance(outs, tuple) else (outs,)
        arrays = {}
        for i, a in enumerate(placed):
            for k, shard in enumerate(_shards(a, mesh)):
                arrays[f"p{k}.arg{i}"] = shard
        for j, o in enumerate(outs):
            for k, shard in enumerate(_shards(o, mesh)):
                arrays[f"p{k}.out{j}"] = shard
        (out_dir / f"{name}.hlo").write_text(compiled.as_text())
        np.savez_compressed(out_dir / f"{name}.npz", **arrays)
        print(name, mesh.devices.size, "participants")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data" / "spmd")
