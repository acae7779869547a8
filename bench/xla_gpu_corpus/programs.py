"""JAX programs for the XLA:GPU-optimized module corpus (single device).

Read by /work/shared/tools/xla_gpu_dump.py (`--examples programs.py`), never by the hlo_compile
package or its tests: importing it needs jax, flax, optax and equinox.

EXAMPLES is a list of (name, fn, args): args are concrete numpy arrays (or pytrees of them, e.g.
model parameters and optimizer states), all drawn from np.random.default_rng(<fixed seed per
program>); flax / equinox / optax only give the parameter and state *shapes* (jax.eval_shape), so
importing this file compiles nothing.
Names are prefixed by category: model_, loop_, rng_, sort_, conv_, attn_, mixed_, int8_, misc_.
Every array stays <= 256K elements and every program is cheap enough for a numpy interpreter.
"""
import numpy as np
import ml_dtypes
import jax
import jax.numpy as jnp
from jax import lax
import optax
import equinox as eqx
import flax.linen as nn

bf16 = ml_dtypes.bfloat16
f16 = np.float16
EXAMPLES = []


def add(name, fn, *args):
    EXAMPLES.append((name, fn, tuple(args)))


def rng(seed):
    return np.random.default_rng(seed)


def nrm(r, shape, scale=1.0, dtype=np.float32):
    return (r.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def uni(r, shape, lo=0.0, hi=1.0, dtype=np.float32):
    return r.uniform(lo, hi, shape).astype(np.float32).astype(dtype)


def ints(r, shape, lo, hi, dtype=np.int32):
    return r.integers(lo, hi, shape).astype(dtype)


def to_np(tree):
    return jax.tree.map(np.asarray, tree)


def _fill_param(r, path, s, fan_in):
    """Deterministic numpy value for a parameter of shape s, chosen by its name (flax / equinox naming)."""
    name = jax.tree_util.keystr(path).lower()
    if len(s.shape) <= 1 or "bias" in name or "mean" in name or "var" in name or "scale" in name:
        if "scale" in name or "var" in name:  # layer-norm / batch-norm scale, running variance: ~1, > 0
            return (1 + np.abs(nrm(r, s.shape, 0.1))).astype(s.dtype)
        return nrm(r, s.shape, 0.05, s.dtype)
    if "pos" in name or "cls" in name:
        return nrm(r, s.shape, 0.02, s.dtype)
    return nrm(r, s.shape, fan_in(name, s.shape) ** -0.5, s.dtype)


def flax_vars(module, seed, *sample, **kw):
    """Variables of a flax module: shapes from module.init (traced only), values from default_rng(seed)."""
    shapes = jax.eval_shape(lambda k: module.init(k, *sample, **kw), jax.random.key(0))
    r = rng(seed)

    def fan_in(name, shape):  # flax kernels are [..., in, out]; attention q/k/v kernels [d, heads, dh]
        return shape[0] if any(t in name for t in ("query", "'key'", "value")) else int(np.prod(shape[:-1]))
    return jax.tree_util.tree_map_with_path(lambda p, s: _fill_param(r, p, s, fan_in), shapes)


def eqx_split(make, seed):
    """(array leaves, static rest) of an equinox module; shapes from make(key) (traced only), values from
    default_rng(seed). Equinox weights are [out, in, ...]."""
    params, static = eqx.partition(eqx.filter_eval_shape(make, jax.random.key(0)),
                                   lambda x: isinstance(x, jax.ShapeDtypeStruct))
    r = rng(seed)
    fan_in = lambda name, shape: int(np.prod(shape[1:]))  # noqa: E731
    return jax.tree_util.tree_map_with_path(lambda p, s: _fill_param(r, p, s, fan_in), params), static


def opt_state(opt, params, r):
    """optax state of `params` as after a few steps: float moments small and >= 0, step counts 10."""
    st = jax.eval_shape(opt.init, params)
    return jax.tree.map(lambda a: np.full(a.shape, 10, a.dtype) if jnp.issubdtype(a.dtype, jnp.integer)
                        else np.abs(nrm(r, a.shape, 1e-3)).astype(a.dtype), st)


def train_step(loss_fn, opt):
    def step(params, state, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss
    return step


def dense_init(r, sizes, dtype=np.float32):
    return [{"w": nrm(r, (a, b), a ** -0.5, dtype), "b": nrm(r, (b,), 0.1, dtype)} for a, b in zip(sizes, sizes[1:])]


def mlp_apply(params, x, act=jax.nn.relu):
    for i, p in enumerate(params):
        x = x @ p["w"] + p["b"]
        if i < len(params) - 1:
            x = act(x)
    return x


def xent(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def layernorm(x, g, b, eps=1e-5):
    xf = x.astype(jnp.float32)
    mu = xf.mean(-1, keepdims=True)
    var = jnp.square(xf - mu).mean(-1, keepdims=True)
    return ((xf - mu) * lax.rsqrt(var + eps) * g + b).astype(x.dtype)


def rmsnorm(x, g, eps=1e-6):
    xf = x.astype(jnp.float32)
    return (xf * lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps) * g.astype(jnp.float32)).astype(x.dtype)


def attention(q, k, v, mask=None):
    """q [b, tq, h, d], k/v [b, tk, h, d]; f32 softmax."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * q.shape[-1] ** -0.5
    if mask is not None:
        s = jnp.where(mask, s, -1e30)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1).astype(v.dtype), v)


def causal(t):
    return jnp.tril(jnp.ones((t, t), bool))


def conv(x, w, stride=1, padding="SAME", dn=("NHWC", "HWIO", "NHWC"), **kw):
    nsp = len(dn[0]) - 2
    return lax.conv_general_dilated(x, w, (stride,) * nsp, padding, dimension_numbers=dn, **kw)


# ==============================================================================================
# model_: MLP / CNN / transformer / RNN / autoencoder / VAE / ResNet / ViT, forward and training
# ==============================================================================================
r = rng(1001)
add("model_mlp_forward_f32", lambda params, x: jax.nn.softmax(mlp_apply(params, x)),
    dense_init(r, [256, 512, 512, 10]), nrm(r, (128, 256)))

r = rng(1002)
_p = dense_init(r, [256, 512, 10])
_sgd = optax.sgd(0.05, momentum=0.9)
add("model_mlp_train_sgd_momentum_f32", train_step(lambda p, x, y: xent(mlp_apply(p, x), y), _sgd),
    _p, opt_state(_sgd, _p, r), nrm(r, (128, 256)), ints(r, (128,), 0, 10))

r = rng(1003)
_p = dense_init(r, [128, 256, 256, 16])
_adam = optax.adam(1e-3)
add("model_mlp_train_adam_gelu_f32",
    train_step(lambda p, x, y: jnp.mean((mlp_apply(p, x, jax.nn.gelu) - y) ** 2), _adam),
    _p, opt_state(_adam, _p, r), nrm(r, (256, 128)), nrm(r, (256, 16)))

r = rng(1004)
_p = dense_init(r, [64, 256, 256, 10])
_opt = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000), weight_decay=0.01))
add("model_mlp_train_clip_adamw_schedule_f32", train_step(lambda p, x, y: xent(mlp_apply(p, x), y), _opt),
    _p, opt_state(_opt, _p, r), nrm(r, (128, 64)), ints(r, (128,), 0, 10))


class FlaxMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(256)(x))
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(10)(x)


r = rng(1005)
_x = nrm(r, (64, 196))
_v = flax_vars(FlaxMLP(), 5, _x)
_opt = optax.adamw(3e-4, weight_decay=1e-4)
add("model_flax_mlp_train_adamw_f32",
    train_step(lambda v, x, y: xent(FlaxMLP().apply(v, x), y), _opt),
    _v, opt_state(_opt, _v, r), _x, ints(r, (64,), 0, 10))


class FlaxCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


r = rng(1006)
_x = uni(r, (8, 28, 28, 1))
_v = flax_vars(FlaxCNN(), 6, _x)
add("model_flax_cnn_forward_f32", lambda v, x: jax.nn.log_softmax(FlaxCNN().apply(v, x)), _v, _x)

r = rng(1007)
_x = uni(r, (8, 28, 28, 1))
_v = flax_vars(FlaxCNN(), 7, _x)
_adam = optax.adam(1e-3)
add("model_flax_cnn_train_adam_f32", train_step(lambda v, x, y: xent(FlaxCNN().apply(v, x), y), _adam),
    _v, opt_state(_adam, _v, r), _x, ints(r, (8,), 0, 10))


class ResBlock(nn.Module):
    ch: int
    train: bool = False

    @nn.compact
    def __call__(self, x):
        bn = lambda: nn.BatchNorm(use_running_average=not self.train, momentum=0.9)  # noqa: E731
        y = nn.relu(bn()(nn.Conv(self.ch, (3, 3), use_bias=False)(x)))
        y = bn()(nn.Conv(self.ch, (3, 3), use_bias=False)(y))
        if x.shape[-1] != self.ch:
            x = bn()(nn.Conv(self.ch, (1, 1), use_bias=False)(x))
        return nn.relu(x + y)


r = rng(1008)
_x = nrm(r, (4, 16, 16, 16))
_v = flax_vars(ResBlock(32), 8, _x)
add("model_flax_resnet_block_forward_f32", lambda v, x: ResBlock(32).apply(v, x), _v, _x)

r = rng(1009)
_x = nrm(r, (8, 16, 16, 16))
_v = flax_vars(ResBlock(16, train=True), 9, _x)
_sgd = optax.sgd(0.1, momentum=0.9, nesterov=True)


def _resnet_train(params, stats, state, x, y):
    def loss(p):
        out, upd = ResBlock(16, train=True).apply({"params": p, "batch_stats": stats}, x, mutable=["batch_stats"])
        return xent(out.mean((1, 2)), y), upd["batch_stats"]
    (l, stats), g = jax.value_and_grad(loss, has_aux=True)(params)
    updates, state = _sgd.update(g, state, params)
    return optax.apply_updates(params, updates), stats, state, l


add("model_flax_resnet_block_train_batchnorm_sgd_f32", _resnet_train, _v["params"], _v["batch_stats"],
    opt_state(_sgd, _v["params"], r), _x, ints(r, (8,), 0, 16))


class FlaxBlock(nn.Module):
    d: int = 128
    heads: int = 4

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=nn.make_causal_mask(x[..., 0]))
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h)))


r = rng(1010)
_x = nrm(r, (4, 64, 128))
_v = flax_vars(FlaxBlock(), 10, _x)
add("model_flax_transformer_block_forward_f32", lambda v, x: FlaxBlock().apply(v, x), _v, _x)


class TinyLM(nn.Module):
    vocab: int = 512
    d: int = 128

    @nn.compact
    def __call__(self, ids):
        emb = nn.Embed(self.vocab, self.d)
        x = emb(ids) + self.param("pos", nn.initializers.normal(0.02), (ids.shape[1], self.d))
        x = FlaxBlock(self.d, 4)(x)
        return emb.attend(nn.LayerNorm()(x))


r = rng(1011)
_ids = ints(r, (4, 33), 0, 512)
_v = flax_vars(TinyLM(), 11, _ids[:, :-1])
_opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, b2=0.95, weight_decay=0.1))
add("model_flax_tiny_lm_train_adamw_f32",
    train_step(lambda v, ids: xent(TinyLM().apply(v, ids[:, :-1]), ids[:, 1:]), _opt),
    _v, opt_state(_opt, _v, r), _ids)

r = rng(1012)
_x = nrm(r, (8, 32, 32))
_lstm = nn.RNN(nn.OptimizedLSTMCell(64))
add("model_flax_lstm_forward_f32", lambda v, x: _lstm.apply(v, x), flax_vars(_lstm, 12, _x), _x)

r = rng(1013)
_x = nrm(r, (8, 32, 32))
_gru = nn.RNN(nn.GRUCell(64))
add("model_flax_gru_forward_f32", lambda v, x: _gru.apply(v, x)[:, -1], flax_vars(_gru, 13, _x), _x)


def _lstm_params(r, din, h):
    return {"wx": nrm(r, (din, 4 * h), din ** -0.5), "wh": nrm(r, (h, 4 * h), h ** -0.5),
            "b": nrm(r, (4 * h,), 0.1), "wo": nrm(r, (h, 1), h ** -0.5)}


def _lstm_loss(p, xs, y):  # xs [t, b, din]
    def cell(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ p["wx"] + h @ p["wh"] + p["b"], 4, -1)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), None
    z = jnp.zeros((xs.shape[1], p["wh"].shape[0]), xs.dtype)
    (h, _), _ = lax.scan(cell, (z, z), xs)
    return jnp.mean((h @ p["wo"] - y) ** 2)


r = rng(1014)
_p = _lstm_params(r, 16, 64)
_adam = optax.adam(1e-3)
add("model_lstm_scan_train_adam_f32", train_step(_lstm_loss, _adam), _p, opt_state(_adam, _p, r),
    nrm(r, (24, 16, 16)), nrm(r, (16, 1)))


class AutoEncoder(nn.Module):
    @nn.compact
    def __call__(self, x):
        z = nn.Dense(32)(nn.relu(nn.Dense(256)(x)))
        return nn.Dense(x.shape[-1])(nn.relu(nn.Dense(256)(z)))


r = rng(1015)
_x = uni(r, (64, 784))
_v = flax_vars(AutoEncoder(), 15, _x)
_adam = optax.adam(1e-3)
add("model_flax_autoencoder_train_adam_f32",
    train_step(lambda v, x: optax.sigmoid_binary_cross_entropy(AutoEncoder().apply(v, x), x).mean(), _adam),
    _v, opt_state(_adam, _v, r), _x)


class VAE(nn.Module):
    latent: int = 16

    @nn.compact
    def __call__(self, x, key):
        h = nn.relu(nn.Dense(256)(x))
        mu, logvar = nn.Dense(self.latent)(h), nn.Dense(self.latent)(h)
        z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape)
        return nn.Dense(x.shape[-1])(nn.relu(nn.Dense(256)(z))), mu, logvar


def _vae_loss(v, x, key_data):
    logits, mu, logvar = VAE().apply(v, x, jax.random.wrap_key_data(key_data))
    rec = optax.sigmoid_binary_cross_entropy(logits, x).sum(-1)
    kl = -0.5 * jnp.sum(1 + logvar - mu ** 2 - jnp.exp(logvar), -1)
    return jnp.mean(rec + kl)


r = rng(1016)
_x = (uni(r, (32, 784)) > 0.5).astype(np.float32)
_v = flax_vars(VAE(), 16, _x, jax.random.key(0))
_adam = optax.adam(1e-3)
add("model_flax_vae_train_adam_f32", train_step(_vae_loss, _adam), _v, opt_state(_adam, _v, r), _x,
    np.array([0, 1016], np.uint32))


class ViT(nn.Module):
    patch: int = 4
    d: int = 128

    @nn.compact
    def __call__(self, img):
        x = nn.Conv(self.d, (self.patch, self.patch), strides=self.patch, padding="VALID")(img)
        x = x.reshape(x.shape[0], -1, self.d)
        cls = self.param("cls", nn.initializers.zeros, (1, 1, self.d))
        x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, self.d)), x], 1)
        x = x + self.param("pos", nn.initializers.normal(0.02), x.shape[1:])
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=4)(h, h)
        x = x + nn.Dense(self.d)(nn.gelu(nn.Dense(2 * self.d)(nn.LayerNorm()(x))))
        return nn.Dense(10)(nn.LayerNorm()(x[:, 0]))


r = rng(1017)
_img = nrm(r, (4, 32, 32, 3))
add("model_flax_vit_forward_f32", lambda v, img: ViT().apply(v, img), flax_vars(ViT(), 17, _img), _img)


def _patch_embed(img, w, b, pos, p=8):  # img [b, h, w, c] -> tokens [b, n, d], patchify by reshape
    bsz, hh, ww, c = img.shape
    x = img.reshape(bsz, hh // p, p, ww // p, p, c).transpose(0, 1, 3, 2, 4, 5).reshape(bsz, -1, p * p * c)
    return x @ w + b + pos


r = rng(1018)
add("model_vit_patch_embed_reshape_f32", _patch_embed, nrm(r, (8, 64, 64, 3)), nrm(r, (192, 256), 192 ** -0.5),
    nrm(r, (256,), 0.02), nrm(r, (64, 256), 0.02))


class DropoutMLP(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        x = nn.Dropout(0.2, deterministic=not train)(nn.relu(nn.Dense(256)(x)))
        return nn.Dense(10)(x)


r = rng(1019)
_x = nrm(r, (64, 128))
_v = flax_vars(DropoutMLP(), 19, _x, False)
_sgd = optax.sgd(0.01)
add("model_flax_dropout_mlp_train_sgd_f32",
    train_step(lambda v, x, y, kd: xent(DropoutMLP().apply(v, x, True, rngs={"dropout": jax.random.wrap_key_data(kd)}),
                                        y), _sgd),
    _v, opt_state(_sgd, _v, r), _x, ints(r, (64,), 0, 10), np.array([7, 1019], np.uint32))


r = rng(1020)
_ep, _es = eqx_split(lambda k: eqx.nn.MLP(64, 10, 128, 3, activation=jax.nn.silu, key=k), 20)
add("model_eqx_mlp_forward_f32", lambda p, x: jax.vmap(eqx.combine(p, _es))(x), _ep, nrm(r, (128, 64)))

r = rng(1021)
_ep2, _es2 = eqx_split(lambda k: eqx.nn.MLP(32, 1, 128, 2, key=k), 21)
_adam = optax.adam(3e-3)
add("model_eqx_mlp_train_adam_f32",
    train_step(lambda p, x, y: jnp.mean((jax.vmap(eqx.combine(p, _es2))(x)[:, 0] - y) ** 2), _adam),
    _ep2, opt_state(_adam, _ep2, r), nrm(r, (256, 32)), nrm(r, (256,)))


class EqxCNN(eqx.Module):
    c1: eqx.nn.Conv2d
    c2: eqx.nn.Conv2d
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.c1 = eqx.nn.Conv2d(3, 16, 3, padding=1, key=k1)
        self.c2 = eqx.nn.Conv2d(16, 32, 3, stride=2, padding=1, key=k2)
        self.head = eqx.nn.Linear(32, 10, key=k3)

    def __call__(self, x):  # x [c, h, w]
        x = jax.nn.relu(self.c2(jax.nn.relu(self.c1(x))))
        return self.head(x.mean((1, 2)))


r = rng(1022)
_cp, _cs = eqx_split(EqxCNN, 22)
add("model_eqx_cnn_forward_f32", lambda p, x: jax.vmap(eqx.combine(p, _cs))(x), _cp, nrm(r, (8, 3, 32, 32)))

r = rng(1023)
_lp, _ls = eqx_split(lambda k: eqx.nn.LSTMCell(16, 64, key=k), 23)


def _eqx_lstm(p, xs):  # xs [t, b, 16]
    cell = jax.vmap(eqx.combine(p, _ls))
    z = jnp.zeros((xs.shape[1], 64), xs.dtype)
    (h, c), hs = lax.scan(lambda hc, x: (cell(x, hc),) * 2, (z, z), xs)
    return h, hs[0].mean(0)


add("model_eqx_lstm_scan_forward_f32", _eqx_lstm, _lp, nrm(r, (32, 8, 16)))

r = rng(1024)
_mp, _ms = eqx_split(lambda k: eqx.nn.MultiheadAttention(4, 64, key=k), 24)
add("model_eqx_mha_forward_f32",
    lambda p, x: jax.vmap(lambda s: eqx.combine(p, _ms)(s, s, s, mask=causal(s.shape[0])))(x),
    _mp, nrm(r, (4, 64, 64)))

r = rng(1025)
_gp, _gs = eqx_split(lambda k: eqx.nn.GRUCell(32, 64, key=k), 25)
_adam = optax.adam(1e-3)


def _eqx_gru_loss(p, xs, y):
    cell = jax.vmap(eqx.combine(p, _gs))
    h, _ = lax.scan(lambda h, x: (cell(x, h), None), jnp.zeros((xs.shape[1], 64)), xs)
    return jnp.mean((h.sum(-1) - y) ** 2)


add("model_eqx_gru_train_adam_f32", train_step(_eqx_gru_loss, _adam), _gp, opt_state(_adam, _gp, r),
    nrm(r, (16, 8, 32)), nrm(r, (8,)))

# ==============================================================================================
# loop_: fori_loop, while_loop, scan, associative_scan, cond / switch
# ==============================================================================================


def _power_iteration(a, v):
    def body(i, v):
        v = a @ v
        return v / jnp.linalg.norm(v)
    v = lax.fori_loop(0, 50, body, v)
    return v, v @ a @ v


r = rng(2001)
_a = nrm(r, (256, 256))
add("loop_fori_power_iteration_f32", _power_iteration, (_a + _a.T) / 2, nrm(r, (256,)))


def _heat(u):
    def body(i, u):
        return u + 0.1 * (jnp.roll(u, 1, -1) - 2 * u + jnp.roll(u, -1, -1))
    return lax.fori_loop(0, 64, body, u, unroll=4)


r = rng(2002)
add("loop_fori_unrolled_heat_stencil_f32", _heat, nrm(r, (16, 1024)))


def _newton_sqrt(a):
    def cond(s):
        x, xp, i = s
        return (jnp.max(jnp.abs(x - xp)) > 1e-6) & (i < 50)

    def body(s):
        x, _, i = s
        return 0.5 * (x + a / x), x, i + 1
    x, _, n = lax.while_loop(cond, body, (a, a + 1.0, 0))
    return x, n


r = rng(2003)
add("loop_while_newton_sqrt_converge_f32", _newton_sqrt, uni(r, (64, 256), 0.5, 100.0))


def _dyn_trip(x, n):
    return lax.fori_loop(0, n, lambda i, x: jnp.tanh(x * 1.5 + i.astype(x.dtype) * 0.01), x)


r = rng(2004)
add("loop_fori_dynamic_trip_count_f32", _dyn_trip, nrm(r, (128, 128)), np.array(17, np.int32))


def _ema(xs, decay):
    def step(m, x):
        m = decay * m + (1 - decay) * x
        return m, m
    return lax.scan(step, jnp.zeros_like(xs[0]), xs)


r = rng(2005)
add("loop_scan_ema_f32", _ema, nrm(r, (128, 512)), np.array(0.9, np.float32))


def _returns(rewards, dones, gamma):
    def step(g, rd):
        rw, d = rd
        g = rw + gamma * g * (1.0 - d)
        return g, g
    return lax.scan(step, jnp.zeros_like(rewards[0]), (rewards, dones), reverse=True)[1]


r = rng(2006)
add("loop_scan_reverse_discounted_returns_f32", _returns, nrm(r, (128, 256)),
    (uni(r, (128, 256)) < 0.05).astype(np.float32), np.array(0.99, np.float32))


def _rnn_unroll(xs, h0, wx, wh):
    def step(h, x):
        h = jnp.tanh(x @ wx + h @ wh)
        return h, h.mean(-1)
    return lax.scan(step, h0, xs, unroll=4)


r = rng(2007)
add("loop_scan_unroll4_rnn_f32", _rnn_unroll, nrm(r, (32, 16, 64)), nrm(r, (16, 128), 0.5),
    nrm(r, (64, 128), 0.125), nrm(r, (128, 128), 0.09))

r = rng(2008)
add("loop_associative_scan_cumsum_f32", lambda x: lax.associative_scan(jnp.add, x, axis=1), nrm(r, (64, 1024)))


def _linear_recurrence(a, b):  # h_t = a_t * h_{t-1} + b_t (diagonal SSM / linear RNN)
    def combine(l, rr):
        return rr[0] * l[0], rr[0] * l[1] + rr[1]
    return lax.associative_scan(combine, (a, b), axis=0)[1]


r = rng(2009)
add("loop_associative_scan_linear_recurrence_f32", _linear_recurrence, uni(r, (256, 512), 0.8, 1.0),
    nrm(r, (256, 512)))

r = rng(2010)
add("loop_associative_scan_logcumsumexp_reverse_f32",
    lambda x: lax.associative_scan(jnp.logaddexp, x, reverse=True, axis=1), nrm(r, (128, 512)))


def _cond(pred, x, w):
    return lax.cond(pred, lambda x: jax.nn.relu(x @ w), lambda x: jnp.tanh(x) * 2.0, x)


r = rng(2011)
add("loop_cond_pred_matmul_or_tanh_f32", _cond, np.array(True), nrm(r, (128, 256)), nrm(r, (256, 256), 0.06))


def _switch(idx, x):
    return lax.switch(idx, [jax.nn.relu, jnp.tanh, jnp.sin, lambda v: v * jax.nn.sigmoid(v)], x)


r = rng(2012)
add("loop_switch_activation_index_f32", _switch, np.array(2, np.int32), nrm(r, (256, 256)))


def _cond_in_scan(xs):
    def step(c, x):
        c = lax.cond(jnp.sum(x) > 0, lambda c: c + x, lambda c: c * 0.5, c)
        return c, jnp.max(c)
    return lax.scan(step, jnp.zeros_like(xs[0]), xs)


r = rng(2013)
add("loop_scan_with_cond_f32", _cond_in_scan, nrm(r, (64, 256)))


def _gd_linreg(x, y):
    def loss(w):
        return jnp.mean((x @ w - y) ** 2)

    def body(i, w):
        return w - 0.1 * jax.grad(loss)(w)
    w = lax.fori_loop(0, 100, body, jnp.zeros((x.shape[1],), x.dtype))
    return w, loss(w)


r = rng(2014)
add("loop_fori_gradient_descent_linreg_f32", _gd_linreg, nrm(r, (256, 32)), nrm(r, (256,)))


def _collatz_steps(n):
    def one(n):
        return lax.while_loop(lambda s: s[0] != 1, lambda s: (jnp.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1),
                                                              s[1] + 1), (n, 0))[1]
    return jax.vmap(one)(n)


r = rng(2015)
add("loop_vmap_while_collatz_int32", _collatz_steps, ints(r, (256,), 1, 1000))


def _map_rows(x, w):
    return lax.map(lambda row: jax.nn.softmax(row @ w), x)


r = rng(2016)
add("loop_map_rows_softmax_f32", _map_rows, nrm(r, (16, 64, 128)), nrm(r, (128, 64), 0.1))


def _kalman(zs, q, rv):  # 1-D Kalman filter per channel; carries (mean, var)
    def step(s, z):
        m, p = s
        p = p + q
        k = p / (p + rv)
        m = m + k * (z - m)
        return (m, (1 - k) * p), m
    return lax.scan(step, (jnp.zeros_like(zs[0]), jnp.ones_like(zs[0])), zs)


r = rng(2017)
add("loop_scan_kalman_filter_f32", _kalman, nrm(r, (128, 256)), np.array(0.01, np.float32),
    np.array(0.5, np.float32))


def _nested(x):
    def outer(i, x):
        return lax.fori_loop(0, 4, lambda j, y: jnp.sin(y) + 0.1 * (i + j).astype(y.dtype), x) * 0.9
    return lax.fori_loop(0, 8, outer, x)


r = rng(2018)
add("loop_nested_fori_f32", _nested, nrm(r, (256, 256)))

# ==============================================================================================
# rng_: threefry / rbg / unsafe_rbg, keys given as input arrays
# ==============================================================================================
tf_key = jax.random.wrap_key_data  # uint32[2] -> threefry2x32 key (the default impl)


def rbg_key(kd):
    return jax.random.wrap_key_data(kd, impl="rbg")


def urbg_key(kd):
    return jax.random.wrap_key_data(kd, impl="unsafe_rbg")


def kd2(seed):
    return np.array([seed >> 16, seed * 2654435761 % 2**32], np.uint32)


def kd4(seed):
    return np.array([seed, seed * 2654435761 % 2**32, 0x9E3779B9, seed ^ 0x7F4A7C15], np.uint32)


add("rng_threefry_normal_f32", lambda kd: jax.random.normal(tf_key(kd), (256, 512)), kd2(3001))
add("rng_threefry_uniform_bf16", lambda kd: jax.random.uniform(tf_key(kd), (512, 256), bf16, -1.0, 1.0), kd2(3002))


def _dropout(keyfn, rate=0.1):
    def f(kd, x):
        keep = jax.random.bernoulli(keyfn(kd), 1 - rate, x.shape)
        return jnp.where(keep, x / (1 - rate), 0)
    return f


r = rng(3003)
add("rng_threefry_dropout_f32", _dropout(tf_key), kd2(3003), nrm(r, (128, 1024)))

r = rng(3004)
add("rng_threefry_categorical_f32", lambda kd, logits: jax.random.categorical(tf_key(kd), logits, -1),
    kd2(3004), nrm(r, (256, 512)))

r = rng(3005)
add("rng_threefry_permutation_rows_f32", lambda kd, x: jax.random.permutation(tf_key(kd), x, axis=0),
    kd2(3005), nrm(r, (1024, 16)))


def _split_fold(kd, step):
    k = jax.random.fold_in(tf_key(kd), step)
    ks = jax.random.split(k, 4)
    return jax.vmap(lambda k: jax.random.normal(k, (128, 128)))(ks)


add("rng_threefry_fold_in_split_normal_f32", _split_fold, kd2(3006), np.array(123, np.int32))


def _randint_trunc(kd):
    k1, k2, k3 = jax.random.split(tf_key(kd), 3)
    return (jax.random.randint(k1, (256, 256), 0, 1000), jax.random.truncated_normal(k2, -2.0, 2.0, (256, 256)),
            jax.random.gumbel(k3, (256, 256)))


add("rng_threefry_randint_truncnormal_gumbel", _randint_trunc, kd2(3007))
add("rng_threefry_key_from_int_seed_normal_f32", lambda s: jax.random.normal(jax.random.key(s), (256, 256)),
    np.array(42, np.int32))

r = rng(3009)
add("rng_threefry_choice_with_p_f32",
    lambda kd, p: jax.random.choice(tf_key(kd), 1024, (4096,), p=p), kd2(3009),
    (lambda w: (w / w.sum()).astype(np.float32))(uni(r, (1024,), 0.1, 1.0)))


def _dropout_scan(kd, xs):
    def step(k, x):
        k, sub = jax.random.split(k)
        return k, jnp.where(jax.random.bernoulli(sub, 0.9, x.shape), x / 0.9, 0.0)
    return lax.scan(step, tf_key(kd), xs)[1]


r = rng(3010)
add("rng_threefry_dropout_in_scan_f32", _dropout_scan, kd2(3010), nrm(r, (16, 64, 256)))

add("rng_rbg_normal_f32", lambda kd: jax.random.normal(rbg_key(kd), (256, 512)), kd4(3011))
add("rng_rbg_uniform_f32", lambda kd: jax.random.uniform(rbg_key(kd), (512, 512)), kd4(3012))
r = rng(3013)
add("rng_rbg_dropout_bf16", _dropout(rbg_key, 0.2), kd4(3013), nrm(r, (256, 512), 1.0, bf16))
r = rng(3014)
add("rng_rbg_categorical_f32", lambda kd, logits: jax.random.categorical(rbg_key(kd), logits, -1),
    kd4(3014), nrm(r, (128, 1000)))
r = rng(3015)
add("rng_rbg_permutation_i32", lambda kd, x: jax.random.permutation(rbg_key(kd), x), kd4(3015),
    np.arange(4096, dtype=np.int32))
add("rng_rbg_key_from_int_seed_split_f32",
    lambda s: jax.vmap(lambda k: jax.random.uniform(k, (64, 256)))(jax.random.split(jax.random.key(s, impl="rbg"), 4)),
    np.array(7, np.int32))
add("rng_unsafe_rbg_normal_f32", lambda kd: jax.random.normal(urbg_key(kd), (512, 256)), kd4(3017))
r = rng(3018)
add("rng_unsafe_rbg_bernoulli_dropout_f32", _dropout(urbg_key, 0.5), kd4(3018), nrm(r, (256, 512)))
add("rng_unsafe_rbg_split_uniform_randint",
    lambda kd: (lambda ks: (jax.random.uniform(ks[0], (256, 256)), jax.random.randint(ks[1], (256, 256), -50, 50)))(
        jax.random.split(urbg_key(kd))), kd4(3019))
add("rng_unsafe_rbg_key_from_int_seed_normal_f32",
    lambda s: jax.random.normal(jax.random.key(s, impl="unsafe_rbg"), (128, 512)), np.array(2024, np.int32))

# ==============================================================================================
# sort_: sort, argsort, top_k, multi-operand sort, scatter, gather, segment ops, one-hot
# ==============================================================================================
r = rng(4001)
add("sort_rows_f32", lambda x: jnp.sort(x, axis=-1), nrm(r, (256, 512)))
r = rng(4002)
add("sort_descending_1d_f32", lambda x: jnp.sort(x, descending=True), nrm(r, (65536,)))
r = rng(4003)
add("sort_argsort_rows_f32", lambda x: jnp.argsort(x, axis=-1), nrm(r, (128, 1024)))
r = rng(4004)
add("sort_argsort_stable_int32", lambda x: jnp.argsort(x, stable=True), ints(r, (8192,), 0, 100))
r = rng(4005)
add("sort_top_k_f32", lambda x: lax.top_k(x, 8), nrm(r, (256, 1024)))
r = rng(4006)
add("sort_top_k_large_k_bf16", lambda x: lax.top_k(x, 64), nrm(r, (64, 2048), 1.0, bf16))
r = rng(4007)
add("sort_lax_multi_operand_f32_i32", lambda k, v1, v2: lax.sort((k, v1, v2), dimension=-1, num_keys=1),
    nrm(r, (64, 1024)), ints(r, (64, 1024), 0, 10**6), nrm(r, (64, 1024)))
r = rng(4008)
add("sort_lax_two_keys_i32_f32", lambda k1, k2, v: lax.sort((k1, k2, v), num_keys=2, is_stable=True),
    ints(r, (16384,), 0, 16), nrm(r, (16384,)), np.arange(16384, dtype=np.int32))
r = rng(4009)
add("sort_rows_bf16", lambda x: jnp.sort(x, axis=0), nrm(r, (512, 256), 1.0, bf16))
r = rng(4010)
add("sort_scatter_add_duplicates_f32", lambda x, idx, u: x.at[idx].add(u), nrm(r, (1024, 64)),
    ints(r, (4096,), 0, 1024), nrm(r, (4096, 64)))
r = rng(4011)
add("sort_scatter_max_f32", lambda x, idx, u: x.at[idx].max(u), nrm(r, (4096,)), ints(r, (16384,), 0, 4096),
    nrm(r, (16384,)))
r = rng(4012)
add("sort_scatter_mul_f32", lambda x, idx, u: x.at[idx].multiply(u), nrm(r, (512, 32)), ints(r, (256,), 0, 512),
    uni(r, (256, 32), 0.5, 1.5))
r = rng(4013)
add("sort_scatter_set_2d_index_f32", lambda x, i, j, u: x.at[i, j].set(u), nrm(r, (256, 256)),
    ints(r, (1024,), 0, 256), ints(r, (1024,), 0, 256), nrm(r, (1024,)))
r = rng(4014)
add("sort_gather_embedding_lookup_f32", lambda table, ids: table[ids], nrm(r, (8192, 32)),
    ints(r, (16, 128), 0, 8192))
r = rng(4015)
add("sort_take_along_axis_f32", lambda x, idx: jnp.take_along_axis(x, idx, axis=1), nrm(r, (256, 512)),
    ints(r, (256, 64), 0, 512))
r = rng(4016)
add("sort_segment_sum_f32", lambda x, seg: jax.ops.segment_sum(x, seg, num_segments=128), nrm(r, (8192, 16)),
    np.sort(ints(r, (8192,), 0, 128)))
r = rng(4017)
add("sort_segment_max_unsorted_f32", lambda x, seg: jax.ops.segment_max(x, seg, num_segments=64),
    nrm(r, (4096, 32)), ints(r, (4096,), 0, 64))
r = rng(4018)
add("sort_one_hot_matmul_f32", lambda ids, w: jax.nn.one_hot(ids, 512) @ w, ints(r, (256,), 0, 512),
    nrm(r, (512, 128)))
r = rng(4019)
add("sort_bincount_histogram_i32", lambda x: jnp.bincount(x, length=256), ints(r, (65536,), 0, 256))
r = rng(4020)
add("sort_searchsorted_f32", lambda edges, x: jnp.searchsorted(edges, x), np.sort(nrm(r, (1024,))),
    nrm(r, (16384,)))
r = rng(4021)
add("sort_unique_fixed_size_i32", lambda x: jnp.unique(x, size=512, fill_value=-1), ints(r, (4096,), 0, 700))
r = rng(4022)
add("sort_median_quantile_f32", lambda x: (jnp.median(x, axis=-1), jnp.quantile(x, 0.9, axis=-1)),
    nrm(r, (128, 1024)))
r = rng(4023)
add("sort_gather_scatter_grad_f32", jax.grad(lambda t, ids: jnp.sum(jnp.tanh(t[ids]) ** 2)), nrm(r, (2048, 64)),
    ints(r, (512,), 0, 2048))

# ==============================================================================================
# conv_: 1d / 2d / 3d, strided, dilated, grouped, depthwise, transposed, layouts, gradients
# ==============================================================================================
r = rng(5001)
add("conv_1d_nwc_f32", lambda x, w: conv(x, w, dn=("NWC", "WIO", "NWC")), nrm(r, (8, 256, 32)),
    nrm(r, (5, 32, 64), 0.08))
r = rng(5002)
add("conv_1d_causal_ncw_f32", lambda x, w: conv(x, w, padding=[(2, 0)], dn=("NCH", "OIH", "NCH")),
    nrm(r, (8, 64, 256)), nrm(r, (64, 64, 3), 0.07))
r = rng(5003)
add("conv_2d_nhwc_same_f32", lambda x, w, b: jax.nn.relu(conv(x, w) + b), nrm(r, (4, 32, 32, 32)),
    nrm(r, (3, 3, 32, 64), 0.06), nrm(r, (64,), 0.1))
r = rng(5004)
add("conv_2d_nchw_oihw_f32", lambda x, w: conv(x, w, dn=("NCHW", "OIHW", "NCHW")), nrm(r, (4, 32, 32, 32)),
    nrm(r, (64, 32, 3, 3), 0.06))
r = rng(5005)
add("conv_2d_strided_valid_f32", lambda x, w: conv(x, w, stride=2, padding="VALID"), nrm(r, (4, 64, 64, 16)),
    nrm(r, (4, 4, 16, 32), 0.06))
r = rng(5006)
add("conv_2d_dilated_f32", lambda x, w: conv(x, w, rhs_dilation=(2, 2)), nrm(r, (4, 32, 32, 32)),
    nrm(r, (3, 3, 32, 32), 0.06))
r = rng(5007)
add("conv_2d_grouped_f32", lambda x, w: conv(x, w, feature_group_count=4), nrm(r, (4, 32, 32, 64)),
    nrm(r, (3, 3, 16, 64), 0.08))
r = rng(5008)
add("conv_2d_depthwise_f32", lambda x, w: conv(x, w, feature_group_count=64), nrm(r, (4, 32, 32, 64)),
    nrm(r, (3, 3, 1, 64), 0.3))
r = rng(5009)
add("conv_2d_depthwise_separable_bf16",
    lambda x, wd, wp: jax.nn.relu6(conv(jax.nn.relu6(conv(x, wd, feature_group_count=32)), wp)),
    nrm(r, (4, 32, 32, 32), 1.0, bf16), nrm(r, (3, 3, 1, 32), 0.3, bf16), nrm(r, (1, 1, 32, 64), 0.17, bf16))
r = rng(5010)
add("conv_2d_transposed_nhwc_f32",
    lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
    nrm(r, (4, 16, 16, 64)), nrm(r, (4, 4, 64, 32), 0.05))
r = rng(5011)
add("conv_2d_transposed_lhs_dilation_nchw_f32",
    lambda x, w: conv(x, w, padding=[(2, 2), (2, 2)], dn=("NCHW", "OIHW", "NCHW"), lhs_dilation=(2, 2)),
    nrm(r, (4, 32, 16, 16)), nrm(r, (16, 32, 3, 3), 0.06))
r = rng(5012)
add("conv_3d_ndhwc_f32", lambda x, w: conv(x, w, dn=("NDHWC", "DHWIO", "NDHWC")), nrm(r, (2, 16, 16, 16, 8)),
    nrm(r, (3, 3, 3, 8, 16), 0.07))
r = rng(5013)
add("conv_3d_strided_ncdhw_f32",
    lambda x, w: conv(x, w, stride=2, padding="VALID", dn=("NCDHW", "OIDHW", "NCDHW")),
    nrm(r, (2, 8, 16, 16, 16)), nrm(r, (16, 8, 2, 2, 2), 0.12))


def _conv_bn_relu(x, w, gamma, beta):
    y = conv(x, w)
    mu = y.mean((0, 1, 2))
    var = y.var((0, 1, 2))
    return jax.nn.relu((y - mu) * lax.rsqrt(var + 1e-5) * gamma + beta)


r = rng(5014)
add("conv_2d_batchnorm_relu_f32", _conv_bn_relu, nrm(r, (8, 32, 32, 16)), nrm(r, (3, 3, 16, 32), 0.08),
    1 + nrm(r, (32,), 0.1), nrm(r, (32,), 0.1))
r = rng(5015)
add("conv_2d_grad_input_weight_f32",
    jax.grad(lambda x, w: jnp.sum(jnp.tanh(conv(x, w, stride=2))), argnums=(0, 1)),
    nrm(r, (4, 32, 32, 16)), nrm(r, (3, 3, 16, 32), 0.08))
r = rng(5016)
add("conv_1d_grad_weight_grouped_f32",
    jax.grad(lambda w, x: jnp.sum(conv(x, w, dn=("NWC", "WIO", "NWC"), feature_group_count=4) ** 2)),
    nrm(r, (5, 8, 32), 0.1), nrm(r, (8, 128, 32)))
r = rng(5017)
add("conv_2d_bf16_f32_out", lambda x, w: conv(x, w, preferred_element_type=jnp.float32),
    nrm(r, (4, 32, 32, 32), 1.0, bf16), nrm(r, (3, 3, 32, 64), 0.06, bf16))
r = rng(5018)
add("conv_2d_nchw_f16", lambda x, w: jax.nn.silu(conv(x, w, dn=("NCHW", "OIHW", "NCHW"))),
    nrm(r, (8, 32, 32, 32), 1.0, f16), nrm(r, (32, 32, 3, 3), 0.06, f16))
r = rng(5019)
add("conv_2d_pointwise_1x1_f32", lambda x, w: conv(x, w), nrm(r, (8, 16, 16, 64)), nrm(r, (1, 1, 64, 128), 0.12))
r = rng(5020)
add("conv_2d_asymmetric_padding_f32", lambda x, w: conv(x, w, padding=[(0, 2), (1, 3)]),
    nrm(r, (4, 31, 29, 8)), nrm(r, (3, 5, 8, 16), 0.1))
r = rng(5021)
add("conv_2d_maxpool_avgpool_f32",
    lambda x, w: (lambda y: (lax.reduce_window(y, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
                             y.mean((1, 2))))(jax.nn.relu(conv(x, w))),
    nrm(r, (8, 32, 32, 16)), nrm(r, (3, 3, 16, 32), 0.08))

# ==============================================================================================
# attn_: attention variants, softmax, layer / RMS norm
# ==============================================================================================
r = rng(6001)
add("attn_softmax_rows_f32", lambda x: jax.nn.softmax(x, -1), nrm(r, (256, 1024), 3.0))
r = rng(6002)
add("attn_single_head_causal_f32",
    lambda q, k, v: attention(q[:, :, None], k[:, :, None], v[:, :, None], causal(q.shape[1]))[:, :, 0],
    nrm(r, (4, 128, 64)), nrm(r, (4, 128, 64)), nrm(r, (4, 128, 64)))


def _mha(x, wq, wk, wv, wo, heads, kv_heads=None, mask=None):
    b, t, d = x.shape
    kv_heads = kv_heads or heads
    dh = wq.shape[1] // heads
    q = (x @ wq).reshape(b, t, heads, dh)
    k = (x @ wk).reshape(b, t, kv_heads, dh)
    v = (x @ wv).reshape(b, t, kv_heads, dh)
    k, v = jnp.repeat(k, heads // kv_heads, 2), jnp.repeat(v, heads // kv_heads, 2)
    return attention(q, k, v, mask).reshape(b, t, heads * dh) @ wo


def _mha_args(r, b, t, d, heads, kv_heads, dtype):
    dkv = d // heads * kv_heads
    return (nrm(r, (b, t, d), 1.0, dtype), nrm(r, (d, d), d ** -0.5, dtype), nrm(r, (d, dkv), d ** -0.5, dtype),
            nrm(r, (d, dkv), d ** -0.5, dtype), nrm(r, (d, d), d ** -0.5, dtype))


r = rng(6003)
add("attn_mha_projections_f32", lambda *a: _mha(*a, heads=8), *_mha_args(r, 2, 128, 256, 8, 8, np.float32))
r = rng(6004)
add("attn_mha_causal_bf16", lambda *a: _mha(*a, heads=4, mask=causal(a[0].shape[1])),
    *_mha_args(r, 2, 128, 256, 4, 4, bf16))
r = rng(6005)
add("attn_gqa_causal_bf16", lambda *a: _mha(*a, heads=8, kv_heads=2, mask=causal(a[0].shape[1])),
    *_mha_args(r, 2, 128, 256, 8, 2, bf16))
r = rng(6006)
add("attn_dpa_xla_causal_bf16",
    lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla"),
    *(nrm(r, (2, 128, 4, 64), 1.0, bf16) for _ in range(3)))
r = rng(6007)
add("attn_dpa_xla_bias_mask_f32",
    lambda q, k, v, bias, mask: jax.nn.dot_product_attention(q, k, v, bias, mask, implementation="xla"),
    nrm(r, (2, 64, 4, 32)), nrm(r, (2, 96, 4, 32)), nrm(r, (2, 96, 4, 32)), nrm(r, (1, 4, 64, 96), 0.5),
    uni(r, (2, 1, 64, 96)) < 0.9)
r = rng(6008)
add("attn_dpa_xla_gqa_seq_lengths_bf16",
    lambda q, k, v, lens: jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lens, implementation="xla"),
    nrm(r, (4, 64, 8, 32), 1.0, bf16), nrm(r, (4, 64, 2, 32), 1.0, bf16), nrm(r, (4, 64, 2, 32), 1.0, bf16),
    np.array([64, 40, 17, 55], np.int32))
r = rng(6009)
add("attn_dpa_xla_sliding_window_f32",
    lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=(32, 0),
                                                 implementation="xla"),
    *(nrm(r, (2, 128, 4, 32)) for _ in range(3)))
r = rng(6010)
add("attn_layernorm_f32", layernorm, nrm(r, (256, 768)), 1 + nrm(r, (768,), 0.1), nrm(r, (768,), 0.1))
r = rng(6011)
add("attn_layernorm_bf16", layernorm, nrm(r, (512, 512), 1.0, bf16), 1 + nrm(r, (512,), 0.1),
    nrm(r, (512,), 0.1))
r = rng(6012)
add("attn_rmsnorm_bf16", rmsnorm, nrm(r, (512, 512), 1.0, bf16), (1 + nrm(r, (512,), 0.1)).astype(bf16))


def _rope(x, pos):  # x [b, t, h, d]
    d = x.shape[-1] // 2
    freq = 1.0 / (10000.0 ** (jnp.arange(d, dtype=jnp.float32) / d))
    ang = pos[:, :, None, None].astype(jnp.float32) * freq
    x1, x2 = x[..., :d], x[..., d:]
    return jnp.concatenate([x1 * jnp.cos(ang) - x2 * jnp.sin(ang), x1 * jnp.sin(ang) + x2 * jnp.cos(ang)], -1)


r = rng(6013)
add("attn_rope_causal_f32", lambda q, k, v, pos: attention(_rope(q, pos), _rope(k, pos), v, causal(q.shape[1])),
    nrm(r, (2, 128, 4, 64)), nrm(r, (2, 128, 4, 64)), nrm(r, (2, 128, 4, 64)),
    np.tile(np.arange(128, dtype=np.int32), (2, 1)))
r = rng(6014)
add("attn_backward_f32",
    jax.grad(lambda q, k, v: jnp.sum(attention(q, k, v, causal(q.shape[1])) ** 2), argnums=(0, 1, 2)),
    nrm(r, (2, 64, 4, 32)), nrm(r, (2, 64, 4, 32)), nrm(r, (2, 64, 4, 32)))
r = rng(6015)
add("attn_cross_attention_padding_mask_f32",
    lambda q, kv, lens: attention(q, kv, kv, (jnp.arange(kv.shape[1]) < lens[:, None])[:, None, None, :]),
    nrm(r, (4, 32, 4, 32)), nrm(r, (4, 96, 4, 32)), np.array([96, 50, 10, 73], np.int32))


def _decode_step(q, k_new, v_new, k_cache, v_cache, pos):  # one token, cache [b, T, h, d]
    k_cache = lax.dynamic_update_slice(k_cache, k_new, (0, pos, 0, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v_new, (0, pos, 0, 0))
    mask = (jnp.arange(k_cache.shape[1]) <= pos)[None, None, None, :]
    return attention(q, k_cache, v_cache, mask), k_cache, v_cache


r = rng(6016)
add("attn_kv_cache_decode_step_bf16", _decode_step, nrm(r, (4, 1, 8, 64), 1.0, bf16),
    nrm(r, (4, 1, 8, 64), 1.0, bf16), nrm(r, (4, 1, 8, 64), 1.0, bf16), nrm(r, (4, 128, 8, 64), 1.0, bf16),
    nrm(r, (4, 128, 8, 64), 1.0, bf16), np.array(100, np.int32))
r = rng(6017)
add("attn_prenorm_block_rmsnorm_swiglu_bf16",
    lambda x, g1, wq, wk, wv, wo, g2, w1, w3, w2: (lambda h: h + (jax.nn.silu(rmsnorm(h, g2) @ w1)
                                                                  * (rmsnorm(h, g2) @ w3)) @ w2)(
        x + _mha(rmsnorm(x, g1), wq, wk, wv, wo, heads=4, mask=causal(x.shape[1]))),
    *(lambda m: (m[0], np.ones(256, bf16), *m[1:], np.ones(256, bf16), nrm(r, (256, 512), 1 / 16, bf16),
                 nrm(r, (256, 512), 1 / 16, bf16), nrm(r, (512, 256), 512 ** -0.5, bf16)))(
        _mha_args(r, 2, 64, 256, 4, 4, bf16)))

# ==============================================================================================
# mixed_: bf16 / f16 mixed precision
# ==============================================================================================
r = rng(7001)
add("mixed_bf16_matmul_f32_acc",
    lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32),
    nrm(r, (256, 512), 1.0, bf16), nrm(r, (512, 256), 1.0, bf16))
r = rng(7002)
add("mixed_f16_matmul_f32_acc_bias_relu",
    lambda a, b, c: jax.nn.relu(lax.dot(a, b, preferred_element_type=jnp.float32) + c).astype(jnp.float16),
    nrm(r, (256, 256), 1.0, f16), nrm(r, (256, 512), 0.06, f16), nrm(r, (512,), 0.1))
r = rng(7003)
add("mixed_bf16_batched_einsum_f32_out",
    lambda a, b: jnp.einsum("bij,bjk->bik", a, b, preferred_element_type=jnp.float32),
    nrm(r, (8, 128, 64), 1.0, bf16), nrm(r, (8, 64, 128), 1.0, bf16))


def _mp_loss(params, x, y):  # f32 master weights, bf16 compute, f32 loss
    p16 = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)
    logits = mlp_apply(p16, x.astype(jnp.bfloat16), jax.nn.gelu).astype(jnp.float32)
    return xent(logits, y)


r = rng(7004)
_p = dense_init(r, [256, 512, 10])
_adam = optax.adamw(1e-3)
add("mixed_bf16_compute_f32_master_train_adamw", train_step(_mp_loss, _adam), _p, opt_state(_adam, _p, r),
    nrm(r, (128, 256)), ints(r, (128,), 0, 10))


def _loss_scaled_step(params, x, y, scale):
    def loss(p):
        p16 = jax.tree.map(lambda a: a.astype(jnp.float16), p)
        out = mlp_apply(p16, x.astype(jnp.float16)).astype(jnp.float32)
        return jnp.mean((out - y) ** 2) * scale
    g = jax.tree.map(lambda a: a / scale, jax.grad(loss)(params))
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(g)]))
    new = jax.tree.map(lambda p, g: jnp.where(finite, p - 0.01 * g, p), params, g)
    return new, jnp.where(finite, scale * 2.0, scale * 0.5)


r = rng(7005)
add("mixed_f16_dynamic_loss_scaling_step", _loss_scaled_step, dense_init(r, [128, 256, 16]), nrm(r, (128, 128)),
    nrm(r, (128, 16)), np.array(1024.0, np.float32))
r = rng(7006)
add("mixed_bf16_layernorm_f32_stats", lambda x, g, b: layernorm(x, g, b).astype(jnp.bfloat16),
    nrm(r, (256, 1024), 2.0, bf16), 1 + nrm(r, (1024,), 0.1), nrm(r, (1024,), 0.1))
r = rng(7007)
add("mixed_casts_f32_bf16_f16_int_roundtrip",
    lambda x: (x.astype(jnp.bfloat16), x.astype(jnp.float16), x.astype(jnp.bfloat16).astype(jnp.float16),
               x.astype(jnp.float16).astype(jnp.float32) - x, jnp.round(x * 10).astype(jnp.int32),
               x.astype(jnp.bfloat16).astype(jnp.int8)),
    nrm(r, (256, 256), 20.0))
r = rng(7008)
add("mixed_bf16_logits_softmax_xent_f32",
    lambda h, w, y: xent(lax.dot(h, w, preferred_element_type=jnp.float32), y),
    nrm(r, (128, 256), 1.0, bf16), nrm(r, (256, 1024), 1 / 16, bf16), ints(r, (128,), 0, 1024))
r = rng(7009)
add("mixed_f16_attention_f32_softmax", lambda q, k, v: attention(q, k, v, causal(q.shape[1])),
    *(nrm(r, (2, 128, 4, 64), 1.0, f16) for _ in range(3)))
r = rng(7010)
add("mixed_bf16_matmul_bf16_out_gelu", lambda a, b: jax.nn.gelu(a @ b),
    nrm(r, (512, 256), 1.0, bf16), nrm(r, (256, 384), 1 / 16, bf16))

# ==============================================================================================
# int8_: int8 GEMMs with int32 accumulation, quantize / dequantize
# ==============================================================================================
r = rng(8001)
add("int8_matmul_int32_acc", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
    ints(r, (256, 512), -128, 128, np.int8), ints(r, (512, 256), -128, 128, np.int8))
r = rng(8002)
add("int8_batched_matmul_int32_acc",
    lambda a, b: jnp.einsum("bik,bkj->bij", a, b, preferred_element_type=jnp.int32),
    ints(r, (8, 128, 128), -128, 128, np.int8), ints(r, (8, 128, 128), -128, 128, np.int8))


def quantize(x, axis=None):
    scale = jnp.max(jnp.abs(x), axis=axis, keepdims=axis is not None) / 127.0
    return jnp.clip(jnp.round(x / scale), -127, 127).astype(jnp.int8), scale


r = rng(8003)
add("int8_quantize_per_tensor_f32", quantize, nrm(r, (512, 512)))
r = rng(8004)
add("int8_quantize_per_channel_f32", lambda w: quantize(w, axis=0), nrm(r, (512, 256)))
r = rng(8005)
add("int8_dequantize_per_channel_f32", lambda q, s: q.astype(jnp.float32) * s,
    ints(r, (512, 256), -127, 128, np.int8), uni(r, (1, 256), 0.001, 0.02))
r = rng(8006)
add("int8_weight_only_matmul_bf16",
    lambda x, q, s: x @ (q.astype(jnp.bfloat16) * s.astype(jnp.bfloat16)),
    nrm(r, (128, 512), 1.0, bf16), ints(r, (512, 256), -127, 128, np.int8), uni(r, (256,), 0.001, 0.01))


def _w8a8(x, wq, ws):  # dynamic per-row activation quantization, int8 GEMM, f32 rescale
    xq, xs = quantize(x, axis=-1)
    acc = lax.dot(xq, wq, preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * xs * ws


r = rng(8007)
add("int8_w8a8_dynamic_quant_linear_f32", _w8a8, nrm(r, (256, 512)), ints(r, (512, 256), -127, 128, np.int8),
    uni(r, (256,), 0.001, 0.01))
r = rng(8008)
add("int8_uint8_image_normalize_f32",
    lambda img, mean, std: (img.astype(jnp.float32) / 255.0 - mean) / std,
    ints(r, (8, 64, 64, 3), 0, 256, np.uint8), np.array([0.485, 0.456, 0.406], np.float32),
    np.array([0.229, 0.224, 0.225], np.float32))


@jax.custom_vjp
def fake_quant(x, s):
    return jnp.clip(jnp.round(x / s), -127, 127) * s


fake_quant.defvjp(lambda x, s: (fake_quant(x, s), (x, s)),
                  lambda res, g: (jnp.where(jnp.abs(res[0]) <= 127 * res[1], g, 0.0), jnp.zeros_like(res[1])))
r = rng(8009)
add("int8_fake_quant_ste_grad_f32",
    jax.grad(lambda w, x, s: jnp.sum(jnp.tanh(x @ fake_quant(w, s)) ** 2)),
    nrm(r, (256, 256), 0.06), nrm(r, (64, 256)), np.array(0.002, np.float32))
r = rng(8010)
add("int8_matvec_int32_acc_requantize",
    lambda w, x, m: jnp.clip(jnp.round(lax.dot(w, x, preferred_element_type=jnp.int32).astype(jnp.float32) * m),
                             -128, 127).astype(jnp.int8),
    ints(r, (1024, 256), -128, 128, np.int8), ints(r, (256, 16), -128, 128, np.int8), np.array(1e-4, np.float32))

# ==============================================================================================
# misc_: scans, reductions, data movement, complex, FFT, linalg, elementwise math, integer ops
# ==============================================================================================
r = rng(9001)
add("misc_cumsum_cumprod_f32", lambda x: (jnp.cumsum(x, 0), jnp.cumprod(1 + 0.01 * x, 1)), nrm(r, (256, 512)))
r = rng(9002)
add("misc_cummax_cummin_cumlogsumexp_f32",
    lambda x: (lax.cummax(x, 1), lax.cummin(x, 0), lax.cumlogsumexp(x, 1)), nrm(r, (128, 512)))
r = rng(9003)
add("misc_reductions_sum_mean_max_min_prod_f32",
    lambda x: (x.sum(), x.mean(0), x.max(1), x.min((0, 2)), jnp.prod(1 + 0.01 * x, -1), x.var(1), x.std()),
    nrm(r, (32, 64, 128)))
r = rng(9004)
add("misc_reductions_bool_int_any_all_count",
    lambda x, m: (jnp.any(m, 1), jnp.all(m, 0), jnp.count_nonzero(m), x.sum(1), x.max(0), jnp.bitwise_or.reduce(x, 1)),
    ints(r, (256, 512), -1000, 1000), uni(r, (256, 512)) < 0.98)
r = rng(9005)
add("misc_argmax_argmin_f32", lambda x: (jnp.argmax(x, -1), jnp.argmin(x, 0), jnp.argmax(x)), nrm(r, (256, 1000)))
r = rng(9006)
add("misc_lax_pad_negative_interior_f32",
    lambda x: lax.pad(x, np.float32(0.5), [(2, -3, 1), (-1, 4, 0)]), nrm(r, (128, 256)))
r = rng(9007)
add("misc_jnp_pad_reflect_edge_f32",
    lambda x: (jnp.pad(x, ((0, 0), (3, 3), (3, 3), (0, 0)), "reflect"), jnp.pad(x, ((0, 0), (1, 2), (2, 1), (0, 0)),
                                                                                   "edge")),
    nrm(r, (4, 64, 64, 8)))
r = rng(9008)
add("misc_reverse_concatenate_f32",
    lambda a, b: jnp.concatenate([a[::-1], lax.rev(b, (0, 1)), a[:, ::-1] * 2], 1), nrm(r, (128, 256)),
    nrm(r, (128, 128)))
r = rng(9009)
add("misc_dynamic_slice_update_f32",
    lambda x, u, i, j: (lax.dynamic_slice(x, (i, j), (64, 64)), lax.dynamic_update_slice(x, u, (j, i))),
    nrm(r, (256, 256)), nrm(r, (32, 32)), np.array(37, np.int32), np.array(200, np.int32))
r = rng(9010)
add("misc_complex_arith_c64",
    lambda z, w: (z * w + jnp.conj(z), jnp.abs(z), jnp.angle(w), jnp.exp(z * 0.1), (z / w).real, jnp.sqrt(z)),
    (nrm(r, (256, 256)) + 1j * nrm(r, (256, 256))).astype(np.complex64),
    (1 + nrm(r, (256, 256)) + 1j * nrm(r, (256, 256))).astype(np.complex64))
r = rng(9011)
add("misc_complex_matmul_c64", lambda a, b: a @ b,
    (nrm(r, (128, 128)) + 1j * nrm(r, (128, 128))).astype(np.complex64),
    (nrm(r, (128, 128)) + 1j * nrm(r, (128, 128))).astype(np.complex64))
r = rng(9012)
add("misc_fft_ifft_c64", lambda z: (jnp.fft.fft(z, axis=-1), jnp.fft.ifft(z, axis=0)),
    (nrm(r, (128, 512)) + 1j * nrm(r, (128, 512))).astype(np.complex64))
r = rng(9013)
add("misc_rfft2_irfft2_lowpass_f32",
    lambda x: jnp.fft.irfft2(jnp.fft.rfft2(x) * (jnp.arange(33) < 12), s=x.shape[-2:]), nrm(r, (16, 64, 64)))
r = rng(9014)
add("misc_fft_conv1d_f32",
    lambda x, k: jnp.fft.irfft(jnp.fft.rfft(x, 1024) * jnp.fft.rfft(k, 1024), 1024), nrm(r, (64, 512)),
    nrm(r, (64, 512), 0.05))


def _newton_schulz_inverse(a):
    x = a.T / (jnp.linalg.norm(a, 1) * jnp.linalg.norm(a, jnp.inf))
    x = lax.fori_loop(0, 30, lambda i, x: x @ (2 * jnp.eye(a.shape[0], dtype=a.dtype) - a @ x), x)
    return x, jnp.abs(a @ x - jnp.eye(a.shape[0])).max()


r = rng(9015)
add("misc_linalg_newton_schulz_inverse_f32", _newton_schulz_inverse,
    (np.eye(128) * 4 + nrm(r, (128, 128), 0.1)).astype(np.float32))
r = rng(9016)
add("misc_linalg_norms_trace_matrix_power_f32",
    lambda a, v: (jnp.linalg.norm(a), jnp.linalg.norm(v, axis=-1), jnp.linalg.norm(v, 1, axis=0), jnp.trace(a),
                  jnp.linalg.matrix_power(a, 5), jnp.outer(v[0], v[1]), jnp.kron(a[:8, :8], a[:16, :16])),
    nrm(r, (128, 128), 128 ** -0.5), nrm(r, (64, 128)))


def _gram_schmidt(a):  # modified Gram-Schmidt QR of the columns, plain HLO (no cuSOLVER)
    def body(j, q):
        v = q[:, j]
        proj = (q.T @ v) * (jnp.arange(q.shape[1]) < j)
        v = v - q @ proj
        return q.at[:, j].set(v / jnp.linalg.norm(v))
    q = lax.fori_loop(0, a.shape[1], body, a)
    return q, q.T @ a


r = rng(9017)
add("misc_linalg_gram_schmidt_qr_f32", _gram_schmidt, nrm(r, (256, 32)))
r = rng(9018)
add("misc_einsum_variants_f32",
    lambda a, b, c: (jnp.einsum("ij,jk->ik", a[0], b[0]), jnp.einsum("bij,bkj->bik", a, b), jnp.einsum("bii->b", a),
                     jnp.einsum("bij,bij->b", a, b), jnp.einsum("bij,jk,bkl->bil", a, c, b),
                     jnp.einsum("abc->cab", a), jnp.einsum("bij->j", a)),
    nrm(r, (8, 64, 64)), nrm(r, (8, 64, 64)), nrm(r, (64, 64)))
r = rng(9019)
add("misc_logsumexp_log_softmax_f32",
    lambda x: (jax.nn.logsumexp(x, -1), jax.nn.log_softmax(x, 0), jax.scipy.special.logsumexp(x, b=0.5)),
    nrm(r, (256, 1000), 5.0))
r = rng(9020)
add("misc_erf_gelu_exact_tanh_f32",
    lambda x: (jax.nn.gelu(x, approximate=False), jax.nn.gelu(x), lax.erf(x), lax.erfc(x), lax.erf_inv(0.99 * jnp.tanh(x))),
    nrm(r, (256, 512), 2.0))
r = rng(9021)
add("misc_activations_f32",
    lambda x: (jax.nn.silu(x), jax.nn.softplus(x), jax.nn.elu(x), jax.nn.selu(x), jax.nn.leaky_relu(x),
               jax.nn.hard_tanh(x), jax.nn.mish(x), jax.nn.log_sigmoid(x)),
    nrm(r, (256, 256), 3.0))
r = rng(9022)
add("misc_special_functions_f32",
    lambda x, y: (lax.lgamma(x), lax.digamma(x), jnp.expm1(y), jnp.log1p(x), jnp.arctan2(y, x - 2),
                  jax.scipy.special.xlogy(x, x), lax.igamma(x, x * 0.5), jnp.cbrt(y), jnp.sinh(y)),
    uni(r, (256, 256), 0.1, 8.0), nrm(r, (256, 256)))


def _int_ops(a, b, s):
    return (a << s, a >> s, lax.shift_right_logical(a, s), a & b, a | b, a ^ b, ~a, a // b, a % b,
            lax.rem(a, b), lax.population_count(a), lax.clz(a), jnp.abs(a), jnp.sign(a), a * b + 7,
            jnp.maximum(a, b), (a.astype(jnp.uint32) >> 3).astype(jnp.int32))


r = rng(9023)
add("misc_integer_ops_i32", _int_ops, ints(r, (256, 256), -10**6, 10**6), ints(r, (256, 256), 1, 1000)
    * np.where(uni(r, (256, 256)) < 0.5, -1, 1).astype(np.int32), ints(r, (256, 256), 0, 31))
r = rng(9024)
add("misc_integer_ops_u8_i16_u32",
    lambda a, b, c: ((a + b) // 3, a ^ (b >> 2), (c.astype(jnp.int16) * 3 - 100), lax.population_count(a),
                     (c.astype(jnp.uint32) * np.uint32(2654435761)) >> 7),
    ints(r, (512, 256), 0, 256, np.uint8), ints(r, (512, 256), 0, 256, np.uint8), ints(r, (512, 256), 0, 30000,
                                                                                       np.int16))
r = rng(9025)
add("misc_bitcast_convert_type_f32_u32_bf16",
    lambda x, h: (lax.bitcast_convert_type(x, jnp.uint32) >> 23, lax.bitcast_convert_type(
        (lax.bitcast_convert_type(x, jnp.int32) & 0x7FFFFFFF), jnp.float32),
                  lax.bitcast_convert_type(h, jnp.uint16), lax.bitcast_convert_type(x, jnp.uint16)),
    nrm(r, (256, 256), 10.0), nrm(r, (256, 256), 1.0, bf16))
r = rng(9026)
add("misc_clamp_remainder_rounding_f32",
    lambda x, y: (lax.clamp(-1.5, x, 2.0), jnp.remainder(x, y), jnp.fmod(x, y), jnp.floor(x), jnp.ceil(x),
                  jnp.round(x), lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), jnp.trunc(x), jnp.sign(x),
                  jnp.isfinite(x / (y - 1)), jnp.nextafter(x, y), jnp.copysign(x, y - 2)),
    nrm(r, (256, 256), 5.0), uni(r, (256, 256), 0.5, 3.0))
r = rng(9027)
add("misc_reduce_window_pools_f32",
    lambda x: (lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "VALID"),
               lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4,
               lax.reduce_window(x, jnp.inf, lax.min, (1, 1, 5, 1), (1, 1, 1, 1), "SAME")),
    nrm(r, (8, 32, 32, 16)))
r = rng(9028)
add("misc_maxpool_grad_select_and_scatter_f32",
    jax.grad(lambda x: jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") ** 2)),
    nrm(r, (8, 32, 32, 16)))
r = rng(9029)
add("misc_transpose_reshape_broadcast_f32",
    lambda x, b: (x.transpose(2, 0, 1).reshape(64, -1), x.reshape(16, 2, 16, 64).transpose(1, 2, 0, 3),
                  x[:, :, :, None] + b, jnp.broadcast_to(x.sum(0), (4, 32, 64))),
    nrm(r, (16, 32, 64)), nrm(r, (8,)))
r = rng(9030)
add("misc_iota_where_tril_triu_f32",
    lambda x: (jnp.where(jnp.arange(x.shape[0])[:, None] >= jnp.arange(x.shape[1]), x, 0), jnp.triu(x, 3),
               jnp.eye(256, dtype=x.dtype) * x.diagonal(), jnp.where(x > 0, x, jnp.nan_to_num(jnp.log(-x + 1)))),
    nrm(r, (256, 256)))
r = rng(9032)
add("misc_reduce_precision_stochastic_like_f32",
    lambda x: (lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7), lax.reduce_precision(x, 5, 10),
               lax.reduce_precision(x, 4, 3)),
    nrm(r, (256, 512), 4.0))
r = rng(9033)
add("misc_softmax_cross_entropy_label_smoothing_f32",
    lambda logits, y: optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(y, 1000), 0.1)).mean(),
    nrm(r, (128, 1000), 2.0), ints(r, (128,), 0, 1000))
r = rng(9034)
add("misc_variadic_reduce_argmax_value_pair_f32",
    lambda x: lax.reduce((x, lax.broadcasted_iota(jnp.int32, x.shape, 1)), (np.float32(-np.inf), np.int32(0)),
                         lambda a, b: (lambda take_a: (jnp.where(take_a, a[0], b[0]), jnp.where(take_a, a[1], b[1])))(
                             (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))), (1,)),
    nrm(r, (256, 1024)))
r = rng(9035)
add("misc_cosine_similarity_l2_normalize_f32",
    lambda a, b: (lambda an, bn: (an @ bn.T, jnp.sum(an * bn[:an.shape[0]], -1)))(
        a / jnp.linalg.norm(a, axis=-1, keepdims=True), b / jnp.linalg.norm(b, axis=-1, keepdims=True)),
    nrm(r, (256, 128)), nrm(r, (512, 128)))
