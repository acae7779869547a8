"""Sharded JAX programs for the XLA:GPU-optimized module corpus (SPMD, num_partitions = N).

Read by /work/shared/tools/xla_gpu_dump.py (`--spmd --partitions N --examples spmd_programs.py`),
never by the hlo_compile package or its tests: importing it needs jax and optax.

SPMD_EXAMPLES maps a name to a zero-argument builder returning dict(fn, mode, in_specs, out_specs,
args, tol, desc) over the 1-D mesh axis "x" (see the tool's docstring). mode "shard_map": fn is the
per-participant body and names the axis in its collectives; mode "jit": fn is the global function
and XLA's SPMD partitioner inserts the collectives. Every sharded dimension divides by 2, 4 and 8
(the corpus is built with --partitions 2, 4 and 8); inputs come from np.random.default_rng(<fixed
seed per program>).
"""
import numpy as np
import ml_dtypes
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax

bf16 = ml_dtypes.bfloat16
AX = "x"
SPMD_EXAMPLES = {}


def example(fn):
    SPMD_EXAMPLES[fn.__name__] = fn
    return fn


def rng(seed):
    return np.random.default_rng(seed)


def nrm(r, shape, scale=1.0, dtype=np.float32):
    return (r.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def mlp_params(r, sizes):
    return [{"w": nrm(r, (a, b), a ** -0.5), "b": nrm(r, (b,), 0.1)} for a, b in zip(sizes, sizes[1:])]


def mlp(params, x):
    for i, p in enumerate(params):
        x = x @ p["w"] + p["b"]
        x = jax.nn.gelu(x) if i < len(params) - 1 else x
    return x


def layernorm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) * lax.rsqrt(jnp.square(x - mu).mean(-1, keepdims=True) + eps) * g + b


# ---------------------------------------------------------------------------------------------- training
@example
def spmd_dp_train_step_mlp_adam_pmean_f32():
    r = rng(101)
    params = mlp_params(r, [64, 256, 256, 10])
    opt = optax.adam(1e-3)
    state = jax.tree.map(lambda a: np.full(a.shape, 5, a.dtype) if a.dtype == np.int32
                         else np.abs(nrm(r, a.shape, 1e-3)), jax.eval_shape(opt.init, params))
    x, y = nrm(r, (256, 64)), r.integers(0, 10, (256,)).astype(np.int32)

    def f(params, state, x, y):  # per participant: replicated params / state, its slice of the batch
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(mlp(p, x), y).mean()
        l, g = jax.value_and_grad(loss)(params)
        l, g = lax.pmean((l, g), AX)  # gradient all-reduce (mean over the data-parallel axis)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, l
    rep = jax.tree.map(lambda _: P(), (params, state))
    return dict(fn=f, mode="shard_map", in_specs=(*rep, P(AX), P(AX)), out_specs=(*rep, P()),
                args=(params, state, x, y), tol="model",
                desc="data-parallel training step in shard_map: 3-layer GELU MLP, softmax cross entropy, local "
                     "value_and_grad, pmean of loss and gradients, optax Adam update on replicated parameters")


@example
def spmd_dp_train_step_jit_batch_sharded_sgd_f32():
    r = rng(102)
    params = mlp_params(r, [128, 256, 32])
    x, y = nrm(r, (512, 128)), nrm(r, (512, 32))

    def f(params, x, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((mlp(p, x) - y) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.05 * g, params, g), loss
    rep = jax.tree.map(lambda _: P(), params)
    return dict(fn=f, mode="jit", in_specs=(rep, P(AX), P(AX)), out_specs=(rep, P()), args=(params, x, y),
                tol="model", desc="data-parallel SGD step under jit: batch sharded, parameters replicated; XLA's "
                                  "partitioner inserts the gradient all-reduces")


@example
def spmd_dp_sync_batchnorm_pmean_f32():
    r = rng(103)
    x, g, b = nrm(r, (32, 16, 16, 32), 2.0) + 1.0, 1 + nrm(r, (32,), 0.1), nrm(r, (32,), 0.1)

    def f(x, g, b):
        mean = lax.pmean(x.mean((0, 1, 2)), AX)
        var = lax.pmean(jnp.square(x - mean).mean((0, 1, 2)), AX)
        return jax.nn.relu((x - mean) * lax.rsqrt(var + 1e-5) * g + b), mean, var
    return dict(fn=f, mode="shard_map", in_specs=(P(AX), P(), P()), out_specs=(P(AX), P(), P()), args=(x, g, b),
                tol="f32_acc", desc="synchronized (cross-replica) batch norm: batch statistics pmean'd over the "
                                    "data-parallel axis, NHWC activations sharded on the batch")


# ---------------------------------------------------------------------------------------------- tensor parallel
@example
def spmd_tp_mlp_megatron_psum_f32():
    r = rng(104)
    x, w1, b1, w2 = nrm(r, (64, 256)), nrm(r, (256, 1024), 1 / 16), nrm(r, (1024,), 0.1), nrm(r, (1024, 256), 1 / 32)

    def f(x, w1, b1, w2):  # column-parallel w1 (its hidden slice), row-parallel w2, all-reduce of the output
        return lax.psum(jax.nn.gelu(x @ w1 + b1) @ w2, AX)
    return dict(fn=f, mode="shard_map", in_specs=(P(), P(None, AX), P(AX), P(AX, None)), out_specs=P(),
                args=(x, w1, b1, w2), tol="f32_acc",
                desc="Megatron tensor-parallel MLP: w1 split by columns, w2 by rows, psum (all-reduce) of the "
                     "partial outputs")


@example
def spmd_tp_mlp_sequence_parallel_allgather_reducescatter_bf16():
    r = rng(105)
    x = nrm(r, (256, 256), 1.0, bf16)
    w1, w2 = nrm(r, (256, 512), 1 / 16, bf16), nrm(r, (512, 256), 512 ** -0.5, bf16)

    def f(x, w1, w2):  # x: this participant's rows (sequence shard)
        xf = lax.all_gather(x, AX, axis=0, tiled=True)  # full sequence
        h = jax.nn.gelu(jnp.dot(xf, w1, preferred_element_type=jnp.float32)).astype(jnp.bfloat16)
        out = jnp.dot(h, w2, preferred_element_type=jnp.float32)  # partial sums over the hidden shard
        return lax.psum_scatter(out, AX, scatter_dimension=0, tiled=True).astype(jnp.bfloat16)
    return dict(fn=f, mode="shard_map", in_specs=(P(AX), P(None, AX), P(AX, None)), out_specs=P(AX),
                args=(x, w1, w2), tol="bf16",
                desc="sequence-parallel + tensor-parallel MLP in bf16: all_gather of the sequence shards, "
                     "column/row-parallel matmuls with f32 accumulation, reduce-scatter back to sequence shards")


@example
def spmd_tp_mlp_jit_named_sharding_f32():
    r = rng(106)
    x, w1, w2 = nrm(r, (128, 256)), nrm(r, (256, 512), 1 / 16), nrm(r, (512, 256), 512 ** -0.5)
    return dict(fn=lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2, mode="jit",
                in_specs=(P(), P(None, AX), P(AX, None)), out_specs=P(), args=(x, w1, w2), tol="f32_acc",
                desc="tensor-parallel MLP under jit: weights sharded by NamedSharding (column then row), "
                     "replicated output; XLA inserts the all-reduce")


@example
def spmd_tp_attention_heads_sharded_jit_f32():
    r = rng(107)
    b, t, h, d = 2, 64, 8, 32
    x = nrm(r, (b, t, h * d))
    wq, wk, wv = (nrm(r, (h * d, h, d), (h * d) ** -0.5) for _ in range(3))
    wo = nrm(r, (h, d, h * d), (h * d) ** -0.5)

    def f(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("btm,mhd->bthd", x, w) for w in (wq, wk, wv))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
        return jnp.einsum("bqhd,hdm->bqm", o, wo)
    return dict(fn=f, mode="jit", in_specs=(P(), P(None, AX), P(None, AX), P(None, AX), P(AX)), out_specs=P(),
                args=(x, wq, wk, wv, wo), tol="f32_acc",
                desc="causal multi-head attention under jit with the heads sharded (q/k/v/out projections split "
                     "by head); XLA all-reduces the output projection")


# ---------------------------------------------------------------------------------------------- collectives
@example
def spmd_shard_map_psum_global_sum_f32():
    r = rng(108)
    x = nrm(r, (512, 128))
    return dict(fn=lambda x: (lax.psum(x.sum(0), AX), lax.psum(jnp.sum(x * x), AX)), mode="shard_map",
                in_specs=(P(AX),), out_specs=(P(), P()), args=(x,), tol="f32_acc",
                desc="psum of per-participant column sums and sum of squares (all-reduce)")


@example
def spmd_all_gather_tiled_and_stacked_f32():
    r = rng(109)
    x = nrm(r, (256, 64))

    def f(x):
        full = lax.all_gather(x, AX, axis=0, tiled=True)  # [256, 64] on every participant
        stacked = lax.all_gather(x.mean(0), AX)  # [n, 64]
        return full @ full.T[:, :64], stacked.max(0)
    return dict(fn=f, mode="shard_map", in_specs=(P(AX),), out_specs=(P(), P()), args=(x,), tol="f32_acc",
                desc="all_gather tiled along rows and stacked (new axis), then a replicated matmul")


@example
def spmd_psum_scatter_reduce_scatter_f32():
    r = rng(110)
    g = nrm(r, (8, 512, 64))

    def f(g):  # every participant holds partial gradients (its slice of the leading axis): sum, reduce-scatter
        return lax.psum_scatter(g.sum(0), AX, scatter_dimension=0, tiled=True)
    return dict(fn=f, mode="shard_map", in_specs=(P(AX),), out_specs=P(AX), args=(g,), tol="f32_acc",
                desc="reduce-scatter (psum_scatter, tiled) of per-participant partial gradients, as in ZeRO / FSDP")


@example
def spmd_ppermute_ring_shift_and_allreduce_f32():
    r = rng(111)
    x = nrm(r, (64, 256))

    def f(x):
        n = lax.axis_size(AX)
        perm = [(i, (i + 1) % n) for i in range(n)]
        shifted = lax.ppermute(x, AX, perm)

        def step(i, carry):  # ring all-reduce by repeated neighbour exchange
            acc, buf = carry
            buf = lax.ppermute(buf, AX, perm)
            return acc + buf, buf
        total, _ = lax.fori_loop(0, n - 1, step, (x, x))
        return shifted, total
    return dict(fn=f, mode="shard_map", in_specs=(P(AX),), out_specs=(P(AX), P(AX)), args=(x,), tol="f32_acc",
                desc="ppermute: one ring shift, then a ring all-reduce as n-1 neighbour exchanges in a fori_loop")


@example
def spmd_ring_attention_ppermute_kv_f32():
    r = rng(112)
    q, k, v = (nrm(r, (256, 64)) for _ in range(3))

    def f(q, k, v):  # q, k, v: this participant's block of the sequence; kv blocks travel round the ring
        n = lax.axis_size(AX)
        perm = [(i, (i + 1) % n) for i in range(n)]

        def step(i, c):
            m, l, o, k, v = c
            s = q @ k.T / 8.0
            m_new = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - m_new[:, None])
            a = jnp.exp(m - m_new)
            l, o = l * a + p.sum(-1), o * a[:, None] + p @ v
            return m_new, l, o, lax.ppermute(k, AX, perm), lax.ppermute(v, AX, perm)
        init = (jnp.full(q.shape[:1], -jnp.inf), jnp.zeros(q.shape[:1]), jnp.zeros_like(q), k, v)
        m, l, o, _, _ = lax.fori_loop(0, n, step, init)
        return o / l[:, None]
    return dict(fn=f, mode="shard_map", in_specs=(P(AX), P(AX), P(AX)), out_specs=P(AX), args=(q, k, v),
                tol="f32_acc", desc="ring attention (non-causal): online softmax over key/value blocks passed "
                                    "round the ring with ppermute")


@example
def spmd_all_to_all_moe_dispatch_f32():
    r = rng(113)
    tokens, w = nrm(r, (512, 64)), nrm(r, (8, 64, 64), 1 / 8)

    def f(tokens, w):  # tokens: [T/n, d]; w: this participant's experts [8/n, d, d]
        n = lax.axis_size(AX)
        e_local = w.shape[0]
        x = tokens.reshape(n * e_local, -1, tokens.shape[-1])  # [experts, tokens per expert, d]
        x = lax.all_to_all(x, AX, split_axis=0, concat_axis=1, tiled=True)  # -> [e_local, n * tpe, d]
        y = jax.nn.relu(jnp.einsum("etd,edf->etf", x, w))
        y = lax.all_to_all(y, AX, split_axis=1, concat_axis=0, tiled=True)  # back to token owners
        return y.reshape(tokens.shape)
    return dict(fn=f, mode="shard_map", in_specs=(P(AX), P(AX)), out_specs=P(AX), args=(tokens, w), tol="f32_acc",
                desc="expert-parallel MoE layer: all_to_all dispatch of token groups to the participants owning "
                     "the experts, per-expert matmul, all_to_all back")


@example
def spmd_pmax_pmin_distributed_softmax_f32():
    r = rng(114)
    x = nrm(r, (64, 1024), 3.0)

    def f(x):  # x: [rows, vocab shard]
        m = lax.pmax(x.max(-1, keepdims=True), AX)
        e = jnp.exp(x - m)
        p = e / lax.psum(e.sum(-1, keepdims=True), AX)
        return p, lax.pmin(x.min(), AX), lax.pmax(jnp.abs(x).max(), AX)
    return dict(fn=f, mode="shard_map", in_specs=(P(None, AX),), out_specs=(P(None, AX), P(), P()), args=(x,),
                tol="f32_acc", desc="vocab-parallel softmax: pmax of row maxima, psum of exponent sums; pmin / "
                                    "pmax of global extrema")


@example
def spmd_axis_index_offsets_cumsum_f32():
    r = rng(115)
    x = nrm(r, (1024,))

    def f(x):  # global cumulative sum of a sharded vector: local cumsum + exclusive prefix of shard totals
        i = lax.axis_index(AX)
        totals = lax.all_gather(x.sum(), AX)
        offset = jnp.sum(jnp.where(jnp.arange(totals.shape[0]) < i, totals, 0.0))
        return jnp.cumsum(x) + offset
    return dict(fn=f, mode="shard_map", in_specs=(P(AX),), out_specs=P(AX), args=(x,), tol="f32_acc",
                desc="axis_index + all_gather of shard totals: distributed prefix sum")


# ---------------------------------------------------------------------------------------------- jit + NamedSharding
@example
def spmd_jit_sharded_matmul_rows_f32():
    r = rng(116)
    a, b = nrm(r, (512, 256)), nrm(r, (256, 256), 1 / 16)
    return dict(fn=lambda a, b: a @ b, mode="jit", in_specs=(P(AX, None), P()), out_specs=P(AX, None),
                args=(a, b), tol="f32_acc", desc="row-sharded A times replicated B under jit (no communication)")


@example
def spmd_jit_sharded_matmul_contracting_dim_bf16():
    r = rng(117)
    a, b = nrm(r, (256, 512), 1.0, bf16), nrm(r, (512, 256), 512 ** -0.5, bf16)
    return dict(fn=lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32), mode="jit",
                in_specs=(P(None, AX), P(AX, None)), out_specs=P(AX, None), args=(a, b), tol="f32_acc",
                desc="matmul with the contracting dimension sharded, output row-sharded: XLA emits a "
                     "reduce-scatter (or all-reduce + slice)")


@example
def spmd_jit_reshard_rows_to_columns_f32():
    r = rng(118)
    x = nrm(r, (256, 512))
    return dict(fn=lambda x: jnp.tanh(x) * 2.0, mode="jit", in_specs=(P(AX, None),), out_specs=P(None, AX),
                args=(x,), tol="f32", desc="elementwise op whose output sharding differs from its input's: "
                                           "XLA reshards rows -> columns with an all-to-all")


@example
def spmd_jit_sharded_reductions_f32():
    r = rng(119)
    x = nrm(r, (512, 256))
    return dict(fn=lambda x: (x.sum(0), jax.nn.logsumexp(x, 0), x.max(), jnp.argmax(x, 0)), mode="jit",
                in_specs=(P(AX, None),), out_specs=(P(), P(), P(), P()), args=(x,), tol="f32_acc",
                desc="reductions over the sharded axis under jit (sum, logsumexp, max, argmax): partial "
                     "reductions + all-reduces")


@example
def spmd_jit_sharded_layernorm_hidden_f32():
    r = rng(120)
    x, g, b = nrm(r, (128, 1024)), 1 + nrm(r, (1024,), 0.1), nrm(r, (1024,), 0.1)
    return dict(fn=layernorm, mode="jit", in_specs=(P(None, AX), P(AX), P(AX)), out_specs=P(None, AX),
                args=(x, g, b), tol="f32_acc",
                desc="layernorm with the normalized (hidden) axis sharded under jit: mean / variance need "
                     "all-reduces")


@example
def spmd_shard_map_layernorm_hidden_psum_f32():
    r = rng(121)
    x, g, b = nrm(r, (256, 512)), 1 + nrm(r, (512,), 0.1), nrm(r, (512,), 0.1)
    dim = x.shape[1]

    def f(x, g, b):
        mu = lax.psum(x.sum(-1, keepdims=True), AX) / dim
        var = lax.psum(jnp.square(x - mu).sum(-1, keepdims=True), AX) / dim
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b
    return dict(fn=f, mode="shard_map", in_specs=(P(None, AX), P(AX), P(AX)), out_specs=P(None, AX),
                args=(x, g, b), tol="f32_acc", desc="tensor-parallel layernorm in shard_map: psum of partial "
                                                    "sums for mean and variance")


@example
def spmd_jit_batch_sharded_layernorm_bf16():
    r = rng(122)
    x, g, b = nrm(r, (256, 768), 1.0, bf16), 1 + nrm(r, (768,), 0.1), nrm(r, (768,), 0.1)
    return dict(fn=lambda x, g, b: layernorm(x.astype(jnp.float32), g, b).astype(jnp.bfloat16), mode="jit",
                in_specs=(P(AX), P(), P()), out_specs=P(AX), args=(x, g, b), tol="bf16",
                desc="bf16 layernorm with f32 statistics, batch (row) sharded under jit: no communication")
