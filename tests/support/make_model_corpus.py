#!/usr/bin/env python3
"""Generate the real-model corpus (tests/data/models): small but real models written with
JAX's own libraries (flax linen, optax, jax.example_libraries.stax/optimizers, jax.nn,
jax.random, jax.scipy, lax control flow), lowered by JAX and compiled and run by XLA:CPU.

    python tests/support/make_model_corpus.py --out tests/data/models [--only NAME ...]

Needs jax/jaxlib 0.10.2, flax, optax (CPU). Deterministic: every case draws its data from
``np.random.default_rng(crc32(name))`` and initialises its parameters from fixed keys.

One folder per case, in the layout of the shared JAX corpus (../shared/corpus/jax/README.md):

* ``unoptimized.hlo``: ``jax.jit(f, keep_unused=True).lower(*args).as_text(dialect="hlo")``
* ``optimized_cpu.hlo``: the module of ``lowered.compile()`` printed with large constants
  (= ``compile().as_text()`` but with every constant's value): XLA:CPU after its HLO passes
* ``inputs.npz``: ``arg0, arg1, ...``: ``jax.tree_util.tree_leaves(args)``, which is the
  ENTRY parameter order (checked: the unoptimized text run by XLA with these inputs gives
  the very outputs of the jitted executable)
* ``outputs.npz``: ``out0, out1, ...``: the outputs of that executable, flattened depth first
* ``case.json``: description, inputs/outputs with dtypes, shapes and (outputs) ``rtol``/``atol``;
  ``vs_higher_precision`` where the case could be re-run in f64 (jax x64) to calibrate them

and ``index.json`` listing the cases.

Things learnt making it (keep them in mind when adding models):
* optimizer state is warmed up by a few real steps first, so adam's moments are not zeros;
* a parameter whose gradient is exactly zero in exact arithmetic (a conv bias right before a
  BatchNorm, an attention key bias) gets rounding-noise gradients that adam normalises into
  lr-sized updates: any other correct compiler differs there by ~lr; such biases are left out;
* each threefry call is ~26 kernels of XLA:CPU's optimized module and every kernel costs the
  host target ~0.13 s to compile: the test's run time is about the number of kernels, not the
  sizes, so the models are kept to few ops;
* the stack-frame metadata of ``optimized_cpu.hlo`` names this script's line numbers: after
  editing the script, regenerate (the output is otherwise bitwise reproducible).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jaxlib  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests/support/make_model_corpus.py"

# (rtol, atol) of the "model" tolerance class (shared corpus README)
MODEL_TOL = {"float32": (5e-4, 5e-4), "float16": (1e-2, 1e-2), "bfloat16": (6e-2, 6e-2), "float64": (1e-8, 1e-8)}
HLO_DTYPE = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "s32",
             "int64": "s64", "int8": "s8", "int16": "s16", "uint8": "u8", "uint16": "u16", "uint32": "u32",
             "uint64": "u64", "bool": "pred"}


@dataclass
class Case:
    fn: Callable
    args: tuple
    description: str
    category: str = "model"
    calibrate: bool = True          # re-run in f64 (x64) to check the tolerances
    prng_impl: str | None = None    # jax_default_prng_impl while lowering / running
    tolerances: dict = field(default_factory=dict)  # output index -> (rtol, atol)
    data: dict = field(default_factory=dict)        # str(top-level argument index) -> words


CASES: dict[str, Callable[[np.random.Generator], Case]] = {}


def case(name):
    def deco(builder):
        CASES[name] = builder
        return builder
    return deco


def f32(a):
    return np.asarray(a, dtype=np.float32)


def normal(rng, *shape, scale=1.0):
    return f32(rng.standard_normal(shape) * scale)


def to_numpy(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


class prng_impl:
    """``jax_default_prng_impl`` set for the duration of a block."""

    def __init__(self, impl):
        self.impl = impl

    def __enter__(self):
        self.old = jax.config.jax_default_prng_impl
        if self.impl:
            jax.config.update("jax_default_prng_impl", self.impl)

    def __exit__(self, *exc):
        jax.config.update("jax_default_prng_impl", self.old)


def key(seed):
    """A raw PRNG key of the current default implementation (u32[2] threefry, u32[4] rbg)."""
    return np.asarray(jax.random.PRNGKey(seed))


# ================================================================================ flax / optax

def _classify_loss(logits, labels):
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _warm(step, state, batches):
    """Run a few real optimizer steps first so optimizer state inputs are not all zeros."""
    for b in batches:
        out = jax.jit(step)(*state, *b)
        state = out[: len(state)]
    return to_numpy(state)


@case("flax_mlp_adam")
def _flax_mlp_adam(rng):
    import flax.linen as nn
    import optax

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.gelu(nn.Dense(32)(x))
            return nn.Dense(10)(x)

    model, tx = MLP(), optax.adam(3e-3)
    x, y = normal(rng, 16, 20), rng.integers(0, 10, 16).astype(np.int32)
    params = model.init(jax.random.PRNGKey(1), x)
    opt = tx.init(params)

    def step(params, opt, x, y):
        loss, g = jax.value_and_grad(lambda p: _classify_loss(model.apply(p, x), y))(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss

    params, opt = _warm(step, (params, opt), [(normal(rng, 16, 20), y)] * 2)
    return Case(step, (params, opt, x, y), "flax linen MLP (Dense/gelu/Dense) + softmax cross-entropy, one "
                "optax.adam training step (after 2 warm-up steps): new params, adam state, loss",
                data={"2": "normal", "3": "labels in [0,10)"})


@case("flax_cnn_batchnorm_sgd")
def _flax_cnn_bn(rng):
    import flax.linen as nn
    import optax

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.Conv(8, (3, 3), padding="VALID", use_bias=False)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    model = CNN()
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.05, momentum=0.9))
    x, y = normal(rng, 8, 12, 12, 3), rng.integers(0, 10, 8).astype(np.int32)
    variables = model.init(jax.random.PRNGKey(2), x, train=False)
    params, stats = variables["params"], variables["batch_stats"]
    opt = tx.init(params)

    def step(params, stats, opt, x, y):
        def loss_fn(p):
            logits, new = model.apply({"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"])
            return _classify_loss(logits, y), new["batch_stats"]
        (loss, stats), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), stats, opt, loss

    params, stats, opt = _warm(step, (params, stats, opt), [(normal(rng, 8, 12, 12, 3), y)])
    return Case(step, (params, stats, opt, x, y),
                "flax linen CNN: Conv 3x3 VALID (no bias), BatchNorm (train mode, running stats updated), "
                "max_pool and avg_pool, Dense; one training step with clip_by_global_norm + sgd momentum "
                "(the max_pool gradient is a select-and-scatter)",
                data={"3": "normal NHWC images", "4": "labels in [0,10)"})


@case("flax_lstm_scan_grad")
def _flax_lstm(rng):
    import flax.linen as nn

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            cell = nn.scan(nn.OptimizedLSTMCell, variable_broadcast="params", split_rngs={"params": False},
                           in_axes=1, out_axes=1)(features=12)
            carry = (jnp.zeros((x.shape[0], 12), x.dtype), jnp.zeros((x.shape[0], 12), x.dtype))
            _, ys = cell(carry, x)
            return nn.Dense(4)(ys)

    model = Model()
    x, t = normal(rng, 4, 10, 6), normal(rng, 4, 10, 4)
    params = model.init(jax.random.PRNGKey(3), x)

    def f(params, x, t):
        def loss_fn(p):
            y = model.apply(p, x)
            return jnp.mean((y - t) ** 2), y
        (loss, y), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, y, g

    return Case(f, (params, x, t), "flax nn.scan(nn.OptimizedLSTMCell) over a [4,10,6] sequence + Dense "
                "head: loss, outputs and gradients (scan forward and backward as while loops)",
                data={"1": "normal sequences", "2": "normal targets"})


@case("flax_bilstm_seq_lengths")
def _flax_bilstm(rng):
    import flax.linen as nn

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, tokens, lengths):
            x = nn.Embed(20, 8)(tokens)
            h = nn.Bidirectional(nn.RNN(nn.OptimizedLSTMCell(8)), nn.RNN(nn.GRUCell(8)))(x, seq_lengths=lengths)
            return nn.log_softmax(nn.Dense(5)(h))

    model = Tagger()
    tokens = rng.integers(0, 20, (3, 7)).astype(np.int32)
    lengths = np.array([7, 4, 2], np.int32)
    params = model.init(jax.random.PRNGKey(5), tokens, lengths)

    def f(params, tokens, lengths):
        logp = model.apply(params, tokens, lengths)
        mask = jnp.arange(tokens.shape[1])[None, :] < lengths[:, None]
        return logp, jnp.argmax(logp, -1) * mask

    return Case(f, (params, tokens, lengths), "flax Embed + nn.Bidirectional(nn.RNN(OptimizedLSTMCell), "
                "nn.RNN(GRUCell)) tagger with "
                "seq_lengths (per-sequence reversal of the backward direction), log-softmax tags and argmax",
                data={"1": "tokens in [0,20)", "2": "sequence lengths"})


def _transformer(vocab=32, d=32, heads=4, layers=1, causal=True):
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, mask):
            h = nn.LayerNorm()(x)
            # no biases: the key bias's gradient is exactly 0 (softmax is shift invariant), so
            # adam would turn its rounding noise into lr-sized updates
            h = nn.MultiHeadDotProductAttention(num_heads=heads, qkv_features=d, use_bias=False)(h, h, mask=mask)
            x = x + h
            h = nn.LayerNorm()(x)
            h = nn.Dense(d)(nn.gelu(nn.Dense(2 * d)(h)))
            return x + h

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = nn.Embed(vocab, d)
            x = emb(tokens) + self.param("pos", nn.initializers.normal(0.02), (tokens.shape[1], d))
            mask = nn.make_causal_mask(tokens) if causal else nn.make_attention_mask(tokens > 0, tokens > 0)
            for _ in range(layers):
                x = Block()(x, mask)
            return emb.attend(nn.LayerNorm()(x))

    return LM()


@case("flax_transformer_lm_adamw")
def _flax_transformer(rng):
    import optax

    model = _transformer()
    tx = optax.adamw(3e-3, weight_decay=0.01)
    tokens = rng.integers(1, 32, (4, 12)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(6), tokens)
    opt = tx.init(params)

    def step(params, opt, tokens):
        def loss_fn(p):
            logits = model.apply(p, tokens)[:, :-1]
            return _classify_loss(logits, tokens[:, 1:])
        loss, g = jax.value_and_grad(loss_fn)(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss

    params, opt = _warm(step, (params, opt), [(rng.integers(1, 32, (4, 12)).astype(np.int32),)] * 2)
    return Case(step, (params, opt, tokens), "flax decoder-only transformer LM (Embed, learned positions, "
                "LayerNorm, causal MultiHeadDotProductAttention, gelu MLP, tied output via Embed.attend), one "
                "adamw training step (after 2 warm-up steps)",
                data={"2": "tokens in [1,32)"})


@case("flax_encoder_padding_mask")
def _flax_encoder(rng):
    model = _transformer(vocab=24, d=16, heads=2, layers=1, causal=False)
    tokens = rng.integers(1, 24, (3, 9)).astype(np.int32)
    tokens[1, 6:] = 0
    tokens[2, 3:] = 0
    params = model.init(jax.random.PRNGKey(7), tokens)

    def f(params, tokens):
        logits = model.apply(params, tokens)
        return jax.nn.log_softmax(logits), jnp.argmax(logits, -1)

    return Case(f, (params, tokens), "flax transformer encoder layer with a padding attention mask "
                "(make_attention_mask): log-probs and argmax tokens", data={"1": "tokens, 0 = padding"})


@case("flax_dropout_mlp_rbg")
def _flax_dropout(rng):
    import flax.linen as nn
    import optax

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.relu(nn.Dense(24)(x))
            x = nn.Dropout(0.3, deterministic=not train)(x)
            return nn.Dense(4)(x)

    model, tx = Net(), optax.sgd(0.1)
    with prng_impl("rbg"):
        k = key(8)
        x, y = normal(rng, 10, 6), rng.integers(0, 4, 10).astype(np.int32)
        params = model.init(jax.random.PRNGKey(9), x, train=False)
    opt = tx.init(params)

    def step(params, opt, k, x, y):
        def loss_fn(p):
            return _classify_loss(model.apply(p, x, train=True, rngs={"dropout": k}), y)
        loss, g = jax.value_and_grad(loss_fn)(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), loss

    return Case(step, (params, opt, k, x, y), "flax MLP with nn.Dropout, one sgd training step, "
                "jax_default_prng_impl='rbg' (dropout masks from rng-bit-generator, u32[4] key)",
                prng_impl="rbg", calibrate=False, data={"1": "rbg key", "2": "normal", "3": "labels"})


@case("vae_reparam_adam")
def _vae(rng):
    import flax.linen as nn
    import optax

    class VAE(nn.Module):
        @nn.compact
        def __call__(self, x, k):
            h = nn.tanh(nn.Dense(16)(x))
            mu, logvar = jnp.split(nn.Dense(8)(h), 2, -1)
            z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(k, mu.shape)
            logits = nn.Dense(x.shape[-1])(z)
            rec = optax.sigmoid_binary_cross_entropy(logits, x).sum(-1)
            kl = -0.5 * jnp.sum(1 + logvar - mu ** 2 - jnp.exp(logvar), -1)
            return jnp.mean(rec + kl)

    model, tx = VAE(), optax.adam(1e-3)
    x = (rng.random((12, 20)) < 0.3).astype(np.float32)
    k = key(10)
    params = model.init(jax.random.PRNGKey(11), x, k)
    opt = tx.init(params)

    def step(params, opt, x, k):
        loss, g = jax.value_and_grad(model.apply)(params, x, k)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss

    params, opt = _warm(step, (params, opt), [(x, key(12))])
    return Case(step, (params, opt, x, k), "flax VAE: reparameterisation with jax.random.normal (threefry) "
                "inside the step, sigmoid BCE + KL, one adam step", calibrate=False,
                data={"2": "binary data", "3": "threefry key"})


@case("optax_adafactor_mlp")
def _adafactor(rng):
    import flax.linen as nn
    import optax

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(nn.silu(nn.Dense(16)(x)))[:, 0]

    model = Net()
    tx = optax.adafactor(1e-2, min_dim_size_to_factor=8)
    x = normal(rng, 32, 12)
    y = f32(np.sin(x[:, 0]) + 0.5 * x[:, 1])
    params = model.init(jax.random.PRNGKey(13), x)
    opt = tx.init(params)

    def step(params, opt, x, y):
        loss, g = jax.value_and_grad(lambda p: optax.huber_loss(model.apply(p, x), y).mean())(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss

    params, opt = _warm(step, (params, opt), [(x, y)] * 2)
    return Case(step, (params, opt, x, y), "flax silu MLP regression with huber loss, one optax.adafactor "
                "step (factored second moments, update clipping, parameter scaling)",
                data={"2": "normal", "3": "targets"})


# ================================================================================ stax

@case("stax_resnet_adam")
def _stax_resnet(rng):
    from jax.example_libraries import optimizers, stax

    # Conv -> Relu -> BatchNorm: a conv bias right before a BatchNorm has an exactly-zero
    # gradient, which adam would turn into lr-sized updates of rounding noise
    def res_block(c):
        main = stax.serial(stax.Conv(c, (3, 3), padding="SAME"), stax.Relu, stax.BatchNorm())
        return stax.serial(stax.FanOut(2), stax.parallel(main, stax.Identity), stax.FanInSum, stax.Relu)

    init_fn, apply_fn = stax.serial(
        stax.Conv(8, (3, 3), padding="SAME"), stax.Relu, stax.BatchNorm(), res_block(8),
        stax.MaxPool((2, 2), strides=(2, 2)),
        stax.Flatten, stax.Dense(10), stax.LogSoftmax)
    x = normal(rng, 4, 8, 8, 3)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 4)]
    _, params = init_fn(jax.random.PRNGKey(14), x.shape)
    opt_init, opt_update, get_params = optimizers.adam(1e-3)
    state = opt_init(params)

    def step(i, state, x, y):
        def loss_fn(p):
            return -jnp.mean(jnp.sum(apply_fn(p, x) * y, -1))
        loss, g = jax.value_and_grad(loss_fn)(get_params(state))
        return opt_update(i, g, state), loss

    state = jax.jit(step)(0, state, x, y)[0]
    state = to_numpy(state)
    return Case(step, (np.int32(1), state, x, y), "jax.example_libraries.stax ResNet-ish CNN (Conv, BatchNorm, "
                "Relu, a FanOut/parallel/FanInSum residual block, MaxPool, Flatten, Dense, LogSoftmax), "
                "one optimizers.adam step (step 1, after one warm-up step)",
                data={"0": "step number", "2": "normal NHWC images", "3": "one-hot labels"})


# ================================================================================ jax.nn / scipy

@case("jax_nn_activations_grad")
def _jax_nn(rng):
    x, w = normal(rng, 8, 16), normal(rng, 16, 16, scale=0.3)
    labels = rng.integers(0, 8, 8).astype(np.int32)

    def f(x, w, labels):
        def loss(w, x):
            h = x @ w
            acts = [jax.nn.gelu(h, approximate=False), jax.nn.silu(h), jax.nn.softplus(h), jax.nn.elu(h),
                    jax.nn.log_sigmoid(h), jax.nn.relu6(3 * h)]
            a = sum(acts) + jax.nn.glu(jnp.concatenate([h, h[:, ::-1]], -1))
            a = jax.nn.standardize(a, axis=-1)
            logp = jax.nn.log_softmax(a[:, :8])
            return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 8) * logp, -1)) + jnp.mean(jax.nn.softmax(a) ** 2), a
        (l, a), (gw, gx) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(w, x)
        return l, a, gw, gx

    return Case(f, (x, w, labels), "a zoo of jax.nn activations (exact gelu, silu, softplus, elu, "
                "log_sigmoid, relu6, glu), "
                "standardize, log_softmax, one_hot: loss and gradients", category="nn")


@case("scipy_special_fns")
def _scipy_special(rng):
    from jax.scipy import special as sp
    from jax.scipy import stats

    x = f32(rng.uniform(0.2, 6.0, 64))
    u = f32(rng.uniform(0.02, 0.98, 64))
    z = normal(rng, 64)

    def f(x, u, z):
        return (sp.gammaln(x), sp.digamma(x), sp.erfc(z), sp.erfinv(2 * u - 1), sp.xlogy(x, u), sp.i0e(z),
                stats.t.logpdf(z, 3.0), stats.beta.logpdf(u, 2.0, 3.0))

    return Case(f, (x, u, z), "jax.scipy.special / jax.scipy.stats elementwise functions (gammaln, digamma, "
                "erfc, erfinv, xlogy, i0e, t and beta log-densities)", category="scipy",
                data={"0": "uniform [0.2,6)", "1": "uniform [0.02,0.98)", "2": "normal"})


@case("scipy_logsumexp_mixture_grad")
def _scipy_lse(rng):
    from jax.scipy.special import logsumexp

    x = normal(rng, 40, 2)
    means, log_scales = normal(rng, 5, 2), normal(rng, 5, 2, scale=0.2)
    logits = normal(rng, 5, scale=0.5)

    def f(x, means, log_scales, logits):
        def nll(means, log_scales, logits):
            d = (x[:, None, :] - means[None]) / jnp.exp(log_scales)[None]
            comp = -0.5 * jnp.sum(d ** 2, -1) - jnp.sum(log_scales, -1) - jnp.log(2 * jnp.pi)
            ll = logsumexp(comp + jax.nn.log_softmax(logits), axis=1)
            signed, sign = logsumexp(comp, axis=0, b=jnp.where(jnp.arange(5) % 2 == 0, 1.0, -0.5), return_sign=True)
            return -jnp.mean(ll), (ll, signed, sign)
        (l, aux), g = jax.value_and_grad(nll, argnums=(0, 1, 2), has_aux=True)(means, log_scales, logits)
        return l, aux, g

    return Case(f, (x, means, log_scales, logits), "Gaussian mixture negative log-likelihood with "
                "jax.scipy.special.logsumexp (also weighted, return_sign) and its gradients", category="scipy")


# ================================================================================ jax.random

def _sampling(k, logits, p):
    k1, k2, k3 = jax.random.split(k, 3)
    return (jax.random.categorical(k1, logits, axis=-1, shape=(3, logits.shape[0])),
            jax.random.normal(k2, (16, 4)),
            jax.random.bernoulli(k3, p))


@case("random_threefry_sampling")
def _random_threefry(rng):
    logits = normal(rng, 8, 10, scale=2.0)
    p = f32(rng.uniform(0, 1, (8, 10)))

    def f(k, logits, p):
        ks = jax.random.split(k, 5)
        return (jax.random.categorical(ks[0], logits, axis=-1, shape=(3, logits.shape[0])),
                jax.random.normal(ks[1], (16, 4)), jax.random.bernoulli(ks[2], p),
                jax.random.bits(ks[3], (8,), jnp.uint8), jax.random.uniform(ks[4], (6,), jnp.bfloat16))

    # (jax.random.gamma is left out: its rejection sampler alone is ~300 host kernels; each
    # threefry call is ~26 kernels of XLA:CPU's optimized module)
    return Case(f, (key(15), logits, p), "jax.random inside jit with the default threefry impl: split, "
                "categorical (gumbel argmax), normal, bernoulli, u8 bits (u32 -> u8[..,4] bitcast-convert), "
                "bf16 uniform (16-bit bits)", category="random", calibrate=False, tolerances={4: (1e-2, 1e-2)},
                data={"0": "threefry key u32[2]"})


@case("random_rbg_sampling")
def _random_rbg(rng):
    with prng_impl("rbg"):
        k = key(16)
    logits = normal(rng, 8, 10, scale=2.0)
    p = f32(rng.uniform(0, 1, (8, 10)))
    return Case(_sampling, (k, logits, p), "jax.random inside jit with jax_default_prng_impl='rbg' "
                "(rng-bit-generator; split through threefry): categorical, normal, bernoulli",
                category="random", calibrate=False, prng_impl="rbg", data={"0": "rbg key u32[4]"})


@case("gumbel_gru_sampler_scan")
def _gru_sampler(rng):
    import flax.linen as nn

    class Cell(nn.Module):
        @nn.compact
        def __call__(self, h, tok):
            h, _ = nn.GRUCell(16)(h, nn.Embed(12, 8)(tok))
            return h, nn.Dense(12)(h)

    cell = Cell()
    h0 = jnp.zeros((4, 16))
    params = cell.init(jax.random.PRNGKey(18), h0, jnp.zeros((4,), jnp.int32))

    def f(params, k, temperature):
        def body(carry, k):
            h, tok = carry
            h, logits = cell.apply(params, h, tok)
            logp = jax.nn.log_softmax(logits / temperature)
            nxt = jax.random.categorical(k, logp)
            return (h, nxt), (nxt, jnp.take_along_axis(logp, nxt[:, None], 1)[:, 0])
        (h, _), (toks, lps) = lax.scan(body, (h0, jnp.zeros((4,), jnp.int32)), jax.random.split(k, 10))
        return toks.T, lps.T.sum(-1), h

    return Case(f, (params, key(19), np.float32(0.8)), "autoregressive sampling from a flax GRU LM in "
                "lax.scan: one threefry key per step (split outside), categorical with temperature, "
                "token log-probs", category="random", calibrate=False)


# ================================================================================ lax control flow

@case("lax_scan_kalman_smoother")
def _kalman(rng):
    T = 20
    obs = f32(np.cumsum(rng.standard_normal(T)) * 0.3 + rng.standard_normal(T) * 0.5)
    params = f32([0.95, 0.3, 0.5])  # a, q, r

    def f(obs, params):
        a, q, r = params[0], params[1], params[2]

        def filt(c, y):
            m, P = c
            mp, Pp = a * m, a * a * P + q
            K = Pp / (Pp + r)
            m, P = mp + K * (y - mp), (1 - K) * Pp
            ll = -0.5 * (jnp.log(2 * jnp.pi * (Pp + r)) + (y - mp) ** 2 / (Pp + r))
            return (m, P), (m, P, mp, Pp, ll)
        _, (ms, Ps, mps, Pps, lls) = lax.scan(filt, (jnp.zeros((), obs.dtype), jnp.ones((), obs.dtype)), obs)

        def smooth(c, xs):
            ms_next, Ps_next = c
            m, P, mp, Pp = xs
            J = P * a / Pp
            return (m + J * (ms_next - mp), P + J * J * (Ps_next - Pp)), (m + J * (ms_next - mp))
        nxt = (mps[1:], Pps[1:])
        _, sm = lax.scan(smooth, (ms[-1], Ps[-1]), (ms[:-1], Ps[:-1], *nxt), reverse=True)
        return jnp.sum(lls), ms, jnp.concatenate([sm, ms[-1:]])

    return Case(f, (obs, params), "1-d Kalman filter (lax.scan) and RTS smoother (reverse lax.scan) with "
                "the log-likelihood", category="control_flow")


@case("lax_fori_logreg_gd")
def _fori_logreg(rng):
    x = normal(rng, 32, 6)
    y = (x @ normal(rng, 6) + 0.3 * rng.standard_normal(32) > 0).astype(np.float32)

    def f(x, y, w0):
        def loss(w):
            z = x @ w[:-1] + w[-1]
            return jnp.mean(jnp.logaddexp(0.0, z) - y * z) + 1e-2 * jnp.sum(w ** 2)

        def body(i, c):
            w, v = c
            v = 0.9 * v + jax.grad(loss)(w)
            return w - 0.5 * v / (1.0 + i.astype(jnp.float32) * 0.1), v
        w, v = lax.fori_loop(0, 15, body, (w0, jnp.zeros_like(w0)))
        return w, loss(w)

    return Case(f, (x, y, f32(np.zeros(7))), "logistic regression trained by 15 steps of momentum "
                "gradient descent inside lax.fori_loop (grad inside the loop body)", category="control_flow")


@case("lax_while_kmeans")
def _kmeans(rng):
    centers = normal(rng, 4, 2, scale=3.0)
    x = f32(centers[rng.integers(0, 4, 60)] + rng.standard_normal((60, 2)) * 0.6)
    init = x[:4].copy()

    def f(x, c0):
        def assign(c):
            d = jnp.sum((x[:, None] - c[None]) ** 2, -1)
            return jnp.argmin(d, 1)

        def cond(s):
            _, a, prev, it = s
            return jnp.logical_and(it < 25, jnp.any(a != prev))

        def body(s):
            c, a, _, it = s
            oh = jax.nn.one_hot(a, 4)
            cnt = oh.sum(0)
            c = jnp.where(cnt[:, None] > 0, (oh.T @ x) / jnp.maximum(cnt, 1)[:, None], c)
            return c, assign(c), a, it + 1
        a0 = assign(c0)
        c, a, _, it = lax.while_loop(cond, body, (c0, a0, jnp.full_like(a0, -1), 0))
        inertia = jnp.sum(jnp.min(jnp.sum((x[:, None] - c[None]) ** 2, -1), 1))
        return c, a, it, inertia

    return Case(f, (x, init), "k-means (Lloyd) in lax.while_loop until the assignments stop changing "
                "(data-dependent trip count), argmin assignment, one-hot centroid update",
                category="control_flow")


@case("lax_while_bisection")
def _bisection(rng):
    a = f32(rng.uniform(0.5, 3.0, 16))

    def f(a):
        def fn(x):
            return x ** 3 + a * x - 2.0 * jnp.tanh(a)

        def cond(s):
            lo, hi, it = s
            return jnp.logical_and(it < 60, jnp.max(hi - lo) > 1e-5)

        def body(s):
            lo, hi, it = s
            mid = 0.5 * (lo + hi)
            pos = fn(mid) > 0
            return jnp.where(pos, lo, mid), jnp.where(pos, mid, hi), it + 1
        lo, hi, it = lax.while_loop(cond, body, (jnp.zeros_like(a), jnp.full_like(a, 2.0), 0))
        return 0.5 * (lo + hi), it

    return Case(f, (a,), "vectorised bisection root finding in lax.while_loop (stop when every bracket "
                "is below 1e-5)", category="control_flow")


@case("lax_associative_scan_ssm")
def _assoc(rng):
    a = f32(rng.uniform(0.5, 0.99, (24, 8)))
    b = normal(rng, 24, 8)
    w = normal(rng, 8, 8, scale=0.3)

    def f(a, b, w):
        def loss(w):
            def comb(l, r):
                return r[0] * l[0], r[0] * l[1] + r[1]
            _, h = lax.associative_scan(comb, (a, b @ w))
            return jnp.mean(h ** 2), h
        (l, h), g = jax.value_and_grad(loss, has_aux=True)(w)
        rev = lax.associative_scan(jnp.add, b, reverse=True)
        return h, l, g, lax.cummax(b, axis=0), lax.cumsum(b, axis=0), lax.cumprod(a[:6], axis=0), rev

    return Case(f, (a, b, w), "linear state-space recurrence h_t = a_t h_(t-1) + b_t via "
                "lax.associative_scan (also reversed), its gradient, cummax/cumsum/cumprod",
                category="control_flow")


@case("lax_switch_in_scan")
def _switch(rng):
    kinds = rng.integers(0, 3, 12).astype(np.int32)
    xs = normal(rng, 12, 6)
    ws = normal(rng, 3, 6, 6, scale=0.4)

    def f(kinds, xs, ws):
        def loss(ws):
            def body(h, inp):
                kind, x = inp
                h = lax.switch(kind, [lambda h: jnp.tanh(h @ ws[0] + x),
                                      lambda h: jax.nn.relu(h @ ws[1]) - x,
                                      lambda h: h * jax.nn.sigmoid(x @ ws[2])], h)
                h = lax.cond(jnp.sum(h) > 0, lambda h: h * 0.9, lambda h: h + 0.1, h)
                return h, jnp.sum(h)
            h, s = lax.scan(body, jnp.zeros(6), (kinds, xs))
            return jnp.sum(s ** 2) * 1e-2, h
        (l, h), g = jax.value_and_grad(loss, has_aux=True)(ws)
        return l, h, g

    return Case(f, (kinds, xs, ws), "lax.switch (3 branches) and lax.cond inside lax.scan, with the "
                "gradient (conditionals in the backward scan)", category="control_flow")


@case("while_transpose_layouts")
def _transpose_while(rng):
    x = normal(rng, 12, 20, scale=0.5)
    w1, w2 = normal(rng, 12, 12, scale=0.3), normal(rng, 20, 20, scale=0.2)

    def f(x, w1, w2, n):
        def body(i, c):
            a, b = c                                        # a [12,20]; b [20,12] = a-like, transposed
            a_new = jnp.tanh(w1 @ a @ w2)                   # [12,20]
            b_new = jax.nn.softmax(w1 @ b.T, axis=0).T      # uses b transposed, yields [20,12]
            return a_new + 0.1 * b_new.T, (b_new + a.T) * 0.5
        a, b = lax.fori_loop(0, n, body, (x, x.T))
        return a, b, jnp.sum(a * b.T, axis=1)

    return Case(f, (x, w1, w2, np.int32(5)), "a while loop (fori_loop with a traced trip count) whose "
                "carried matrices are produced and consumed through transposes, so XLA:CPU's layout "
                "assignment may give the loop state non-default layouts", category="control_flow")


@case("topk_nucleus_sampling")
def _topk(rng):
    logits = normal(rng, 6, 40, scale=2.0)
    # the nucleus threshold must not be a near tie (another rounding of the cumsum would flip it)
    srt = np.sort(logits.astype(np.float64), -1)[:, ::-1]
    sm = np.exp(srt - srt.max(-1, keepdims=True))
    sm /= sm.sum(-1, keepdims=True)
    assert np.min(np.abs(np.cumsum(sm, -1) - sm - 0.9)) > 1e-4

    def f(k, logits):
        vals, idx = lax.top_k(logits, 5)
        pick = jax.random.categorical(k, vals)
        topk_tok = jnp.take_along_axis(idx, pick[:, None], 1)[:, 0]
        srt = jnp.sort(logits, axis=-1)[:, ::-1]
        cum = jnp.cumsum(jax.nn.softmax(srt), -1)
        cutoff = jnp.min(jnp.where(cum - jax.nn.softmax(srt) < 0.9, srt, jnp.inf), -1, keepdims=True)
        nucleus = jnp.where(logits >= cutoff, logits, -jnp.inf)
        return vals, idx, topk_tok, jax.nn.log_softmax(nucleus), jnp.argsort(-logits, -1)[:, :3]

    return Case(f, (key(20), logits), "lax.top_k + top-k sampling (categorical over the top 5, threefry), "
                "nucleus (top-p) filtering with sort / cumsum / masking to -inf, argsort",
                category="sampling", calibrate=False)


@case("beam_search_decode")
def _beam(rng):
    import flax.linen as nn

    V, D, B, K, L = 16, 12, 2, 4, 6

    class Step(nn.Module):
        @nn.compact
        def __call__(self, h, tok):
            h = jnp.tanh(nn.Dense(D)(h) + nn.Embed(V, D)(tok))
            return h, jax.nn.log_softmax(nn.Dense(V)(h))

    step = Step()
    params = step.init(jax.random.PRNGKey(21), jnp.zeros((B * K, D)), jnp.zeros((B * K,), jnp.int32))
    h0 = normal(rng, B, D)

    def f(params, h0):
        h = jnp.repeat(h0, K, 0)
        scores = jnp.tile(jnp.array([0.0] + [-1e9] * (K - 1)), (B, 1))
        seqs = jnp.zeros((B, K, L), jnp.int32)
        tok = jnp.zeros((B * K,), jnp.int32)

        def body(t, c):
            h, scores, seqs, tok = c
            h, logp = step.apply(params, h, tok)
            cand = (scores[:, :, None] + logp.reshape(B, K, V)).reshape(B, K * V)
            scores, flat = lax.top_k(cand, K)
            parent, tok = flat // V, flat % V
            seqs = jnp.take_along_axis(seqs, parent[:, :, None], 1)
            seqs = lax.dynamic_update_slice_in_dim(seqs, tok[:, :, None], t, 2)
            h = jnp.take_along_axis(h.reshape(B, K, D), parent[:, :, None], 1).reshape(B * K, D)
            return h, scores, seqs, tok.reshape(B * K)
        h, scores, seqs, _ = lax.fori_loop(0, L, body, (h, scores, seqs, tok))
        best = jnp.argmax(scores, -1)
        return scores, seqs, jnp.take_along_axis(seqs, best[:, None, None], 1)[:, 0]

    return Case(f, (params, h0), "beam search (width 4, 6 steps) over a tiny flax RNN LM in fori_loop: "
                "top_k over beam x vocab, parent gather with take_along_axis, dynamic_update_slice of the "
                "sequences, argmax of the final scores", category="sampling")


@case("ctc_loss_grad")
def _ctc(rng):
    import flax.linen as nn
    import optax

    B, T, K, N = 3, 12, 6, 4
    x = normal(rng, B, T, 5)
    labels = rng.integers(1, K, (B, N)).astype(np.int32)
    label_pad = np.zeros((B, N), np.float32)
    label_pad[1, 3:] = 1
    label_pad[2, 2:] = 1
    logit_pad = np.zeros((B, T), np.float32)
    logit_pad[2, 9:] = 1
    model = nn.Dense(K)
    params = model.init(jax.random.PRNGKey(22), x)

    def f(params, x, logit_pad, labels, label_pad):
        def loss(p):
            l = optax.ctc_loss(model.apply(p, x), logit_pad, labels, label_pad)
            return jnp.mean(l), l
        (m, l), g = jax.value_and_grad(loss, has_aux=True)(params)
        return m, l, g

    return Case(f, (params, x, logit_pad, labels, label_pad), "optax.ctc_loss over a Dense layer's logits "
                "with logit and label paddings, and its gradient (forward-backward recursions in scans)")


@case("kv_cache_greedy_decoder")
def _kv_cache(rng):
    V, D, H, T = 20, 16, 2, 10
    hd = D // H
    p = {"emb": normal(rng, V, D, scale=0.5), "wq": normal(rng, D, D, scale=0.25), "wk": normal(rng, D, D, scale=0.25),
         "wv": normal(rng, D, D, scale=0.25), "wo": normal(rng, D, D, scale=0.25), "out": normal(rng, D, V, scale=0.5)}
    first = rng.integers(0, V, 3).astype(np.int32)

    def f(p, first):
        B = first.shape[0]
        cache_k = jnp.zeros((B, T, H, hd))
        cache_v = jnp.zeros((B, T, H, hd))

        def body(c, t):
            tok, ck, cv = c
            x = p["emb"][tok]
            q = (x @ p["wq"]).reshape(B, H, hd)
            ck = lax.dynamic_update_slice(ck, (x @ p["wk"]).reshape(B, 1, H, hd), (0, t, 0, 0))
            cv = lax.dynamic_update_slice(cv, (x @ p["wv"]).reshape(B, 1, H, hd), (0, t, 0, 0))
            s = jnp.einsum("bhd,bthd->bht", q, ck) / jnp.sqrt(hd)
            s = jnp.where(jnp.arange(T)[None, None] <= t, s, -1e30)
            o = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1), cv).reshape(B, D)
            h = x + o @ p["wo"]
            logits = h @ p["out"]
            nxt = jnp.argmax(logits, -1).astype(jnp.int32)
            return (nxt, ck, cv), (nxt, jax.nn.logsumexp(logits, -1))
        (_, ck, cv), (toks, lse) = lax.scan(body, (first, cache_k, cache_v), jnp.arange(T))
        return toks.T, lse.T, ck, cv

    return Case(f, (p, first), "greedy decoding with a single-layer attention decoder and a KV cache: "
                "lax.scan over positions, dynamic_update_slice into the [B,T,H,hd] caches, masked "
                "softmax attention, argmax next token", category="sampling")


@case("gnn_segment_sum_grad")
def _gnn(rng):
    N, E, F = 10, 30, 6
    x = normal(rng, N, F)
    senders = rng.integers(0, N, E).astype(np.int32)
    receivers = rng.integers(0, N, E).astype(np.int32)
    w1, w2 = normal(rng, F, F, scale=0.4), normal(rng, 2 * F, 3, scale=0.4)
    target = normal(rng, N, 3)

    def f(x, senders, receivers, w1, w2, target):
        def loss(w1, w2):
            msg = jnp.tanh(x[senders] @ w1)
            agg = jax.ops.segment_sum(msg, receivers, N)
            mx = jax.ops.segment_max(msg, receivers, N)
            mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
            deg = jax.ops.segment_sum(jnp.ones(E), receivers, N)
            h = jnp.concatenate([agg / jnp.maximum(deg, 1)[:, None], mx], -1) @ w2
            return jnp.mean((h - target) ** 2), h
        (l, h), g = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(w1, w2)
        return l, h, g

    return Case(f, (x, senders, receivers, w1, w2, target), "graph network layer: gather messages by "
                "sender, jax.ops.segment_sum / segment_max by receiver (scatter), mean aggregation, "
                "gradients (scatter-add of the gather's transpose)", category="model")


@case("wavenet_dilated_conv1d")
def _wavenet(rng):
    import flax.linen as nn

    class WaveNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Conv(8, (1,))(x)
            skip = 0
            for d in (1, 4):
                z = nn.Conv(16, (2,), kernel_dilation=(d,), padding="CAUSAL")(h)
                z = jnp.tanh(z[..., :8]) * jax.nn.sigmoid(z[..., 8:])
                skip = skip + nn.Conv(8, (1,))(z)
                h = h + nn.Conv(8, (1,))(z)
            return nn.Conv(4, (1,))(jax.nn.relu(skip))

    model = WaveNet()
    x = normal(rng, 2, 24, 3)
    tgt = rng.integers(0, 4, (2, 24)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(23), x)

    def f(params, x, tgt):
        loss, g = jax.value_and_grad(lambda p: _classify_loss(model.apply(p, x), tgt))(params)
        return loss, g

    return Case(f, (params, x, tgt), "WaveNet-style stack of causal dilated 1-d flax Convs (dilation 1, "
                "4) with gated tanh*sigmoid units, residual and skip paths: loss and gradients "
                "(the conv backward passes)")


@case("moe_top2_router")
def _moe(rng):
    E, D, H = 4, 8, 12
    x = normal(rng, 16, D)
    p = {"router": normal(rng, D, E, scale=0.5), "w1": normal(rng, E, D, H, scale=0.3),
         "w2": normal(rng, E, H, D, scale=0.3)}

    def f(p, x):
        def loss(p):
            logits = x @ p["router"]
            gates, experts = lax.top_k(jax.nn.softmax(logits), 2)
            gates = gates / gates.sum(-1, keepdims=True)
            dispatch = jax.nn.one_hot(experts, E)                      # [N,2,E]
            combine = jnp.einsum("nk,nke->ne", gates, dispatch)
            h = jax.nn.gelu(jnp.einsum("nd,edh->neh", x, p["w1"]))
            y = jnp.einsum("neh,ehd,ne->nd", h, p["w2"], combine)
            frac = dispatch.sum((0, 1)) / dispatch.sum()
            aux = E * jnp.sum(frac * jax.nn.softmax(logits).mean(0))
            return jnp.mean((y - x) ** 2) + 0.01 * aux, (y, experts)
        (l, (y, experts)), g = jax.value_and_grad(loss, has_aux=True)(p)
        return l, y, experts, g

    return Case(f, (p, x), "mixture-of-experts layer with top-2 routing (lax.top_k of the router softmax), "
                "one-hot dispatch/combine einsums, load-balancing loss, gradients")


@case("llama_block_bf16")
def _llama(rng):
    D, H, KV, T, hd = 32, 4, 2, 8, 8

    def rope(x, pos):
        freqs = 1.0 / (10000 ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))
        ang = pos[:, None].astype(jnp.float32) * freqs[None]
        cos, sin = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]
        x1, x2 = x[..., ::2].astype(jnp.float32), x[..., 1::2].astype(jnp.float32)
        out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)
        return out.astype(x.dtype)

    def rms(x, g):
        xf = x.astype(jnp.float32)
        return (xf * lax.rsqrt(jnp.mean(xf ** 2, -1, keepdims=True) + 1e-5) * g).astype(jnp.bfloat16)

    bf = jnp.bfloat16
    p = {k: np.asarray(normal(rng, *s, scale=sc), dtype=bf) for k, s, sc in
         [("wq", (D, H * hd), 0.2), ("wk", (D, KV * hd), 0.2), ("wv", (D, KV * hd), 0.2), ("wo", (H * hd, D), 0.2),
          ("w_gate", (D, 64), 0.2), ("w_up", (D, 64), 0.2), ("w_down", (64, D), 0.15)]}
    p["g1"], p["g2"] = f32(1 + 0.1 * rng.standard_normal(D)), f32(1 + 0.1 * rng.standard_normal(D))
    x = np.asarray(normal(rng, 2, T, D), dtype=bf)

    def f(p, x):
        B = x.shape[0]
        pos = jnp.arange(T)
        h = rms(x, p["g1"])
        q = rope((h @ p["wq"]).reshape(B, T, H, hd), pos)
        k = rope((h @ p["wk"]).reshape(B, T, KV, hd), pos)
        v = (h @ p["wv"]).reshape(B, T, KV, hd)
        k, v = jnp.repeat(k, H // KV, 2), jnp.repeat(v, H // KV, 2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(hd)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        a = jax.nn.softmax(s, -1).astype(bf)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, H * hd)
        x = x + o @ p["wo"]
        h = rms(x, p["g2"])
        x = x + (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
        return x, jnp.mean(x.astype(jnp.float32) ** 2)

    return Case(f, (p, x), "Llama-style decoder block in bf16 (f32 RMSNorm and softmax): RoPE, grouped-query "
                "causal attention (repeat kv heads), SwiGLU MLP", category="model",
                # out1 is an f32 mean over bf16 activations: it inherits their rounding (a 1-ulp
                # bf16 difference is 0.4%; XLA:CPU also drops some f32->bf16->f32 round trips):
                # bf16-exact evaluation of the unoptimized module differs by 1.3e-3 relative
                tolerances={1: (1e-2, 1e-2)})


@case("int8_quantized_mlp")
def _int8(rng):
    x = normal(rng, 8, 16)
    w1, w2 = normal(rng, 16, 24, scale=0.4), normal(rng, 24, 6, scale=0.4)

    def quant(a, axis):
        scale = jnp.max(jnp.abs(a), axis=axis, keepdims=True) / 127.0
        return jnp.clip(jnp.round(a / scale), -127, 127).astype(jnp.int8), scale

    def f(x, w1, w2):
        def qdense(a, w):
            qa, sa = quant(a, 1)
            qw, sw = quant(w, 0)
            acc = lax.dot_general(qa, qw, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
            return acc.astype(jnp.float32) * sa * sw, acc
        h, acc1 = qdense(x, w1)
        y, acc2 = qdense(jax.nn.relu(h), w2)
        return y, acc1, acc2, (x @ w1)

    return Case(f, (x, w1, w2), "int8 symmetric per-row/per-column quantised 2-layer MLP: round/clip/convert "
                "to s8, s8 x s8 -> s32 dot_general, dequantise", category="model")


@case("nbody_leapfrog_fori")
def _nbody(rng):
    N = 12
    pos, vel = normal(rng, N, 3), normal(rng, N, 3, scale=0.1)
    mass = f32(rng.uniform(0.5, 1.5, N))

    def f(pos, vel, mass):
        def acc(x):
            d = x[None] - x[:, None]
            r2 = jnp.sum(d ** 2, -1) + 0.05
            return jnp.sum(d * (mass[None, :, None] * lax.rsqrt(r2)[..., None] / r2[..., None]), 1)

        def energy(x, v):
            d = x[None] - x[:, None]
            r = jnp.sqrt(jnp.sum(d ** 2, -1) + 0.05)
            pot = -0.5 * jnp.sum(jnp.triu(mass[:, None] * mass[None] / r, 1)) * 2
            return 0.5 * jnp.sum(mass * jnp.sum(v ** 2, -1)) + pot

        def body(i, c):
            x, v = c
            v = v + 0.5 * 0.01 * acc(x)
            x = x + 0.01 * v
            return x, v + 0.5 * 0.01 * acc(x)
        x, v = lax.fori_loop(0, 20, body, (pos, vel))
        return x, v, energy(pos, vel), energy(x, v)

    return Case(f, (pos, vel, mass), "softened N-body simulation: 20 leapfrog steps in lax.fori_loop, "
                "pairwise forces with rsqrt, energy before and after", category="control_flow")


@case("ranking_sort_searchsorted")
def _ranking(rng):
    scores = normal(rng, 4, 16)
    rel = rng.integers(0, 4, (4, 16)).astype(np.float32)
    edges = f32(np.linspace(-2, 2, 9))

    def f(scores, rel, edges):
        def loss(s):
            order = jnp.argsort(-s, -1)
            g = jnp.take_along_axis(rel, order, -1)
            disc = 1.0 / jnp.log2(jnp.arange(2, 18, dtype=jnp.float32))
            dcg = jnp.sum((2 ** g - 1) * disc, -1)
            ideal = jnp.sum((2 ** jnp.sort(rel, -1)[:, ::-1] - 1) * disc, -1)
            diff = s[:, :, None] - s[:, None, :]
            pair = (rel[:, :, None] > rel[:, None, :]).astype(jnp.float32)
            return jnp.sum(pair * jax.nn.softplus(-diff)) / jnp.sum(pair), dcg / ideal
        (l, ndcg), g = jax.value_and_grad(loss, has_aux=True)(scores)
        bins = jnp.searchsorted(edges, scores)
        hist = jnp.zeros(10, jnp.int32).at[bins].add(1)
        q = jnp.quantile(scores, jnp.array([0.1, 0.5, 0.9]), axis=-1)
        return l, ndcg, g, bins, hist, q

    return Case(f, (scores, rel, edges), "learning-to-rank: pairwise logistic loss and its gradient, NDCG via "
                "argsort/take_along_axis/sort, searchsorted binning with a scatter-add histogram, quantiles",
                category="model")


# ================================================================================ generation

def _hlo_dtype(a: np.ndarray) -> str:
    return HLO_DTYPE.get(np.dtype(a.dtype).name, np.dtype(a.dtype).name)


def _optimized_text(compiled) -> str:
    import jaxlib._hlo as hlo
    opts = hlo.HloPrintOptions()
    opts.print_large_constants = True
    return compiled.runtime_executable().hlo_modules()[0].to_string(opts)


def _promote(a):
    a = np.asarray(a)
    if a.dtype in (np.float32,):
        return a.astype(np.float64)
    if a.dtype.name in ("bfloat16", "float16"):
        return a.astype(np.float32)
    return a


def _calibrate(fn, args, outs, tols):
    """Re-run in higher precision (x64, inputs promoted one level); per output: max |diff|,
    and how much of the tolerance it uses."""
    jax.config.update("jax_enable_x64", True)
    try:
        hi_args = jax.tree_util.tree_map(_promote, args)
        hi = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*hi_args))]
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    finally:
        jax.config.update("jax_enable_x64", False)
    if len(hi) != len(outs):
        return None, f"{len(hi)} outputs in x64, {len(outs)} in f32"
    res = []
    for o, h, (rtol, atol) in zip(outs, hi, tols):
        if h.shape != o.shape:
            return None, f"output shape {h.shape} in x64, {o.shape} in f32"
        if o.dtype.kind in "biu":
            res.append({"mismatches": int(np.count_nonzero(h.astype(np.int64) != o.astype(np.int64)))})
            continue
        e, a = o.astype(np.float64), h.astype(np.float64)
        fin = np.isfinite(e) & np.isfinite(a)
        nonfinite = int(np.count_nonzero(np.isfinite(e) != np.isfinite(a)))
        d = np.abs(e[fin] - a[fin])
        use = d / (atol + rtol * np.abs(e[fin])) if d.size else np.zeros(1)
        res.append({"max_abs_dev": float(d.max()) if d.size else 0.0, "nonfinite_mismatch": nonfinite,
                    "tolerance_use": float(use.max())})
    return res, None


def _xla_ref():
    tools = REPO.parent / "shared" / "tools"
    if (tools / "xla_ref.py").is_file():
        sys.path.insert(0, str(tools))
        import xla_ref  # noqa: WPS433
        return xla_ref
    return None


def _same(outs, got) -> str:
    if len(outs) != len(got):
        return f"{len(got)} outputs, expected {len(outs)}"
    worst = 0.0
    for o, g in zip(outs, got):
        if o.shape != g.shape or o.dtype != g.dtype:
            return f"output {o.dtype}{o.shape} vs {g.dtype}{g.shape}"
        if o.tobytes() != g.tobytes():
            if o.dtype.kind in "biu" or o.dtype == bool:
                return "integer outputs differ"
            of, gf = o.astype(np.float64), g.astype(np.float64)
            if not np.array_equal(np.isnan(of), np.isnan(gf)):
                return "NaN positions differ"
            m = np.isfinite(of)
            worst = max(worst, float(np.max(np.abs(of[m] - gf[m]), initial=0.0)))
    return "bitwise identical" if worst == 0.0 else f"max abs diff {worst:.3g}"


def build_case(name: str, out_dir: Path, xla_ref) -> dict:
    seed = zlib.crc32(name.encode())
    rng = np.random.default_rng(seed)
    c = CASES[name](rng)
    with prng_impl(c.prng_impl):
        args = jax.tree_util.tree_map(np.asarray, c.args)
        leaves_with_path, _ = jax.tree_util.tree_flatten_with_path(args)
        leaves = [np.asarray(v) for _, v in leaves_with_path]
        jitted = jax.jit(c.fn, keep_unused=True)
        lowered = jitted.lower(*args)
        unopt = lowered.as_text(dialect="hlo")
        compiled = lowered.compile()
        opt = _optimized_text(compiled)
        outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(compiled(*args))]
        _check_entry_parameters(name, unopt, leaves)
        checks = {}
        if xla_ref is not None:
            got = xla_ref.run_hlo_text(unopt, leaves)
            checks["unoptimized.hlo"] = _same(outs, [np.asarray(g) for g in got])
            if checks["unoptimized.hlo"] != "bitwise identical":
                print(f"warning: {name}: unoptimized.hlo re-run by XLA: {checks['unoptimized.hlo']}", file=sys.stderr)
            try:
                got = xla_ref.run_hlo_text(opt, leaves, inline=True, bitcast_to_reshape=True)
                checks["optimized_cpu.hlo --inline-fusions --bitcast-to-reshape"] = \
                    _same(outs, [np.asarray(g) for g in got])
            except (SystemExit, Exception) as e:  # noqa: BLE001
                checks["optimized_cpu.hlo --inline-fusions --bitcast-to-reshape"] = \
                    f"not re-checked: {str(e).splitlines()[0][:160]}"

    tols = []
    for i, o in enumerate(outs):
        if i in c.tolerances:
            tols.append(c.tolerances[i])
        elif o.dtype.kind in "biu" or o.dtype == bool:
            tols.append((0.0, 0.0))
        else:
            tols.append(MODEL_TOL[np.dtype(o.dtype).name])
    calib, calib_err = (_calibrate(c.fn, args, outs, tols) if c.calibrate else (None, "not run: sampling case"))

    d = out_dir / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "unoptimized.hlo").write_text(unopt)
    (d / "optimized_cpu.hlo").write_text(opt)
    np.savez_compressed(d / "inputs.npz", **{f"arg{i}": a for i, a in enumerate(leaves)})
    np.savez_compressed(d / "outputs.npz", **{f"out{i}": a for i, a in enumerate(outs)})

    inputs = [{"name": f"arg{i}", "path": jax.tree_util.keystr(p), "dtype": _hlo_dtype(a), "shape": list(a.shape),
               "data": c.data.get(str(_top_index(p))) or _describe(a, len(p) > 1)}
              for i, (p, a) in enumerate(zip([p for p, _ in leaves_with_path], leaves))]
    outputs = []
    for i, (o, (rtol, atol)) in enumerate(zip(outs, tols)):
        e = {"name": f"out{i}", "dtype": _hlo_dtype(o), "shape": list(o.shape), "rtol": rtol, "atol": atol}
        if calib is not None:
            e["vs_higher_precision"] = calib[i]
        outputs.append(e)
    info = {
        "name": name, "category": c.category, "description": c.description, "split": "ours",
        "primary_hlo": "unoptimized.hlo", "tolerance_class": "model",
        "hlo_files": {
            "unoptimized.hlo": "jax.jit(f, keep_unused=True).lower(*args).as_text(dialect='hlo')",
            "optimized_cpu.hlo": "...lower(*args).compile() module text (= compile().as_text() with large "
                                 "constants printed): XLA:CPU after its HLO passes (fusions, layouts, schedule)"},
        "prng_impl": c.prng_impl or "threefry2x32",
        "inputs": inputs, "seed": seed, "outputs": outputs, "outputs_file": "outputs.npz",
        "reference_checks": checks,
        "generator": {"script": SCRIPT, "jax": jax.__version__, "jaxlib": jaxlib.__version__, "backend": "XLA:CPU",
                      "x64": False},
    }
    if calib is None:
        info["calibration"] = f"no higher-precision re-run ({calib_err})"
    else:
        info["calibration"] = ("outputs[i].vs_higher_precision: the case re-run with inputs promoted one level "
                               "(f32->f64, bf16/f16->f32, jax x64) vs the stored XLA outputs; tolerance_use = "
                               "max |diff|/(atol+rtol*|ref|); integer outputs: mismatches")
    (d / "case.json").write_text(_dumps(info))
    return info


def _check_entry_parameters(name: str, text: str, leaves: list[np.ndarray]) -> None:
    """The ENTRY parameters (``entry_computation_layout`` of the module header) are the
    flattened arguments, in order: same count, dtypes and shapes."""
    header = text.split("\n", 1)[0]
    params = re.search(r"entry_computation_layout=\{\((.*?)\)->", header).group(1)
    sig = [(et, [int(d) for d in dims.split(",") if d])
           for et, dims in re.findall(r"([a-z][a-z0-9]*)\[([0-9,]*)\]", params)]
    mine = [(_hlo_dtype(a), list(a.shape)) for a in leaves]
    if sig != mine:
        raise SystemExit(f"{name}: ENTRY parameters {sig} do not match the flattened arguments {mine}")


def _describe(a: np.ndarray, nested: bool) -> str:
    what = "parameters / optimizer state, " if nested else ""
    if a.size == 0:
        return what + "empty"
    lo, hi = a.min(), a.max()
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return what + f"values in [{float(lo):.3g}, {float(hi):.3g}]"
    return what + f"integers in [{int(lo)}, {int(hi)}]"


def _dumps(obj) -> str:
    """JSON with one key per line but number lists (shapes) kept on one line."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[\s*([-0-9.e,\s]*?)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]",
                  text) + "\n"


def _top_index(path) -> int:
    k = path[0]
    return getattr(k, "idx", getattr(k, "key", 0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(REPO / "tests" / "data" / "models"))
    p.add_argument("--only", nargs="*", help="build just these cases (index.json keeps the others)")
    p.add_argument("--list", action="store_true")
    ns = p.parse_args(argv)
    if ns.list:
        print("\n".join(CASES))
        return 0
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    xla_ref = _xla_ref()
    if xla_ref is None:
        print("warning: ../shared/tools/xla_ref.py not found: HLO texts are not re-run through XLA", file=sys.stderr)
    names = ns.only or list(CASES)
    for n in names:
        if n not in CASES:
            raise SystemExit(f"unknown case {n}; --list shows them")
    for n in names:
        info = build_case(n, out, xla_ref)
        warn = []
        for o in info["outputs"]:
            v = o.get("vs_higher_precision") or {}
            if v.get("mismatches") or v.get("nonfinite_mismatch") or v.get("tolerance_use", 0) > 0.25:
                warn.append(f"{o['name']} {v}")
        size = sum(f.stat().st_size for f in (out / n).iterdir())
        print(f"{n}: {len(info['inputs'])} inputs, {len(info['outputs'])} outputs, {size / 1024:.0f} KiB"
              f"{'; CALIBRATION: ' + '; '.join(warn) if warn else ''}", flush=True)
    if not ns.only:  # cases that no longer exist
        for d in out.iterdir():
            if (d / "case.json").is_file() and d.name not in CASES:
                shutil.rmtree(d)
    index = []
    for d in sorted(out.iterdir()):
        if (d / "case.json").is_file() and d.name in CASES:
            info = json.loads((d / "case.json").read_text())
            index.append({k: info[k] for k in ("name", "category", "primary_hlo", "description", "reference_checks")})
    (out / "index.json").write_text(_dumps(index))
    return 0


if __name__ == "__main__":
    sys.exit(main())
