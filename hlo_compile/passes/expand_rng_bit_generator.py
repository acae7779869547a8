"""Rewrite each ``rng-bit-generator`` into ordinary HLO, as XLA's ``RngBitGeneratorExpander``.

``(new_state, bits) = rng-bit-generator(state), algorithm=A`` is a pure function of ``state``
(a ``u64`` vector: key in element 0, counter after it). XLA never emits a kernel for it: before
code generation it becomes Philox-4x32-10 (``rng_philox``, and ``rng_default`` on XLA:CPU and
XLA:GPU) or Threefry-2x32-20 (``rng_three_fry``) spelled out in iota, integer arithmetic,
shifts, xor, converts, reshape, slice and concatenate. This pass does the same, so the loop
emitters of every target run it and the bits match XLA's. The interpreter has its own numpy
implementation (``interpreter/rng_bits.py``), which checks this one.

What is built, for an output of ``N`` elements of width ``w`` (all words 32-bit ``u32``, all
counters ``u64``; ``k0``/``k1`` are the low/high halves of the key):

- Philox: ``B = ceil(N / 4)`` blocks (``ceil(N / 2)`` for 64-bit outputs) over a ``[B]`` iota;
  block ``b`` encrypts the 128-bit counter ``c + b`` (low half + iota, the carry into the high
  half by an unsigned compare). The low half of ``c`` is ``state[1]``; the high half is
  ``state[2]`` (``u64[3]``) or ``state[0]`` (``u64[2]``). The words of each block are laid side by
  side (``[B,1]`` pieces concatenated into ``[B,4]``), flattened, cut to ``N`` and reshaped: output
  element ``4b + j`` is word ``j`` of block ``b``. 64-bit outputs pair the words as
  ``w0 | w1 << 32`` and ``w2 | w3 << 32``. The products of a round are ``u64`` multiplies of
  zero-extended words, split by convert (low) and a shift (high).
- Threefry, 64-bit: counter ``state[1] + i`` for row-major element ``i`` (the index from one iota
  per dimension times its stride), ``x0 | x1 << 32``. 32-bit and narrower: the output is halved
  along one dimension (the first even one, else the first largest), counters run over the
  halved shape, and ``x0``/``x1`` interleave along that dimension (``[.., h, 1, ..]`` pieces
  concatenated, reshaped, cut to size). A scalar (or any one-element shape) keeps ``x0`` of
  counter ``state[1]``.
- Narrow outputs (8, 16, 4, 2 bits) convert the 32-bit words down (truncation; an integer
  convert wraps, so signed outputs convert directly); float outputs ``bitcast-convert`` the
  unsigned bits of their width (same width only).
- The new state keeps the key and stores the advanced counter (``concatenate`` of ``[1]``
  pieces): Threefry ``[key, c + count]``; Philox ``[key, lo + B]`` for ``u64[2]`` and
  ``[key, lo + B, hi + carry]`` for ``u64[3]``.

The instructions replace the ``rng-bit-generator`` in place, in every computation of the module
(ENTRY, while bodies and conditions, branches, callees), so the rewrite reaches every
computation the runtime executes whatever runs later. The ``tuple`` of the results takes the
original instruction's name and its place for users, the root and control successors.
"""
from __future__ import annotations

from hlo_compile.hlo.builder import HloBuilder
from hlo_compile.hlo.element_types import bit_width, element_type
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import NameScope, replace_instructions, take_name
from hlo_compile.hlo.shape import Shape

# the algorithm ``rng_default`` means on XLA:CPU and XLA:GPU (both compilers register the
# expander with RNG_PHILOX)
DEFAULT_ALGORITHM = "rng_philox"

_MASK32 = (1 << 32) - 1
_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_THREE_FRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREE_FRY_PARITY = 0x1BD11BDA


def expand_rng_bit_generators(module: HloModule) -> HloModule:
    """Replace every ``rng-bit-generator`` of every computation of ``module`` by the HLO that
    computes it; rewrites in place and returns the module. HloUnsupportedError for what XLA
    refuses too (state other than ``u64[2]``/``u64[3]``, pred/complex/6-bit outputs)."""
    names = NameScope.of_instructions(module.computations)
    for comp in module.computations:
        for inst in [i for i in comp.instructions if i.opcode == "rng-bit-generator"]:
            _expand(comp, inst, names)
    return module


def _expand(comp: HloComputation, rng: HloInstruction, names: NameScope) -> None:
    state_shape, out_shape = rng.shape.tuple_shapes
    algorithm = rng.attr("algorithm", "rng_default")
    algorithm = DEFAULT_ALGORITHM if algorithm == "rng_default" else algorithm
    _check(rng, algorithm, state_shape, out_shape)
    b = _Builder(comp, rng, names)
    state = rng.operands[0]
    dims = tuple(out_shape.dimensions)
    out_type = out_shape.element_type
    wide = bit_width(out_type) == 64
    if 0 in dims:  # nothing to generate: the counter does not move
        bits, new_state = b.splat(out_type, 0, dims), state
    elif algorithm == "rng_philox":
        raw, new_state = _philox(b, state, state_shape.dimensions[0], dims, wide)
        bits = _to_type(b, raw, out_type)
    else:
        raw, new_state = _three_fry(b, state, dims, wide)
        bits = _to_type(b, raw, out_type)
    if bits.shape != out_shape:  # the expansion builds default layouts: relay out to the declared one
        bits = b.relayout(bits, out_shape)
    result = b.tuple_of([new_state, bits])
    # the tuple stands for the rng: its name, its place, its control edges, its users
    take_name(result, rng, names)
    b.insert()
    replace_instructions(comp, {rng: result})


def _check(rng: HloInstruction, algorithm: str, state: Shape, out: Shape) -> None:
    def refuse(why: str):
        raise HloUnsupportedError(f"rng-bit-generator '{rng.name}': {why}", rng.location)
    if algorithm not in ("rng_philox", "rng_three_fry"):
        refuse(f"unknown algorithm '{algorithm}'")
    sizes = (2, 3) if algorithm == "rng_philox" else (2,)
    if state.element_type != "u64" or len(state.dimensions) != 1 or state.dimensions[0] not in sizes:
        want = " or ".join(f"u64[{n}]" for n in sizes)
        refuse(f"{algorithm} needs a {want} state, got {state.to_text(False)}")
    kind = element_type(out.element_type).kind
    if kind not in ("signed", "unsigned", "float") or bit_width(out.element_type) not in (2, 4, 8, 16, 32, 64):
        refuse(f"cannot produce {out.element_type} values")


# ---- building instructions ---------------------------------------------------------------------

class _Builder(HloBuilder):
    """The ``HloBuilder`` of one ``rng-bit-generator`` (instructions named ``<rng>.<what>``,
    default layouts) with the generator's helpers: constants and scalar broadcasts made once,
    integer operands taken as scalars broadcast to the other operand's shape."""

    def __init__(self, comp: HloComputation, rng: HloInstruction, names: NameScope):
        super().__init__(comp, rng, names=names)
        self._cache: dict[tuple, HloInstruction] = {}

    # constants
    def scalar(self, et: str, value: int) -> HloInstruction:
        key = ("c", et, value)
        if key not in self._cache:
            self._cache[key] = self.constant(et, str(value))
        return self._cache[key]

    def splat(self, et: str, value: int, dims) -> HloInstruction:
        """``value`` broadcast to ``et[dims]``."""
        dims = tuple(dims)
        if not dims:
            return self.scalar(et, value)
        return self.spread(self.scalar(et, value), dims)

    # shapes
    def spread(self, x: HloInstruction, dims) -> HloInstruction:
        """Scalar ``x`` broadcast to ``dims`` (``x`` itself for a scalar result), made once."""
        dims = tuple(dims)
        if not dims:
            return x
        key = ("x", id(x), dims)
        if key not in self._cache:
            self._cache[key] = self.broadcast(x, dims)
        return self._cache[key]

    def leading(self, x: HloInstruction, limits) -> HloInstruction:
        """The leading ``limits`` of ``x`` (``x`` itself when that is all of it)."""
        limits = tuple(limits)
        if tuple(x.shape.dimensions) == limits:
            return x
        return self.slice(x, [0] * len(limits), limits)

    def element(self, vector: HloInstruction, i: int) -> HloInstruction:
        """Element ``i`` of a vector, as a scalar."""
        return self.reshape(self.slice(vector, (i,), (i + 1,)), ())

    # arithmetic (operands of one shape; ints are scalars broadcast to it)
    def arith(self, opcode: str, x: HloInstruction, y) -> HloInstruction:
        if isinstance(y, int):
            y = self.splat(x.shape.element_type, y, x.shape.dimensions)
        return self.binary(opcode, x, y)

    def add_(self, x, y):
        return self.arith("add", x, y)

    def xor(self, x, y):
        return self.arith("xor", x, y)

    def or_(self, x, y):
        return self.arith("or", x, y)

    def below(self, x: HloInstruction, y: HloInstruction) -> HloInstruction:
        """``x < y`` (unsigned)."""
        return self.compare(x, y, "LT")

    # 32/64-bit word helpers
    def halves(self, x64: HloInstruction) -> tuple[HloInstruction, HloInstruction]:
        """(low, high) 32-bit halves of a u64 value."""
        return self.convert(x64, "u32"), self.convert(self.arith("shift-right-logical", x64, 32), "u32")

    def join(self, lo: HloInstruction, hi: HloInstruction) -> HloInstruction:
        """``lo | hi << 32`` as u64."""
        return self.or_(self.convert(lo, "u64"), self.arith("shift-left", self.convert(hi, "u64"), 32))

    def interleave(self, parts, axis: int, dims) -> HloInstruction:
        """``parts`` (one shape H) laid side by side along ``axis``: element ``h`` of part ``j``
        lands at position ``len(parts) * h + j`` of that axis; cut to ``dims``."""
        h = tuple(parts[0].shape.dimensions)
        unit = h[:axis + 1] + (1,) + h[axis + 1:]
        joined = self.concatenate([self.reshape(p, unit) for p in parts], axis + 1)
        flat = self.reshape(joined, h[:axis] + (h[axis] * len(parts),) + h[axis + 1:])
        return self.leading(flat, dims)


def _to_type(b: _Builder, raw: HloInstruction, out_type: str) -> HloInstruction:
    """The generated words (u32, or u64 for 64-bit outputs) as ``out_type``: an integer convert
    keeps the low bits (it wraps, signed or not); a float reinterprets the unsigned bits of its
    width."""
    if element_type(out_type).kind != "float":
        return b.convert(raw, out_type)
    return b.bitcast_convert(b.convert(raw, f"u{bit_width(out_type)}"), out_type)


def _new_state(b: _Builder, key: HloInstruction, counters) -> HloInstruction:
    """``[key, counters...]`` as a u64 vector."""
    return b.concatenate([b.reshape(x, (1,)) for x in (key, *counters)], 0)


# ---- Philox-4x32-10 ----------------------------------------------------------------------------

def _philox(b: _Builder, state: HloInstruction, state_size: int, dims, wide: bool):
    key = b.element(state, 0)
    lo = b.element(state, 1)
    hi = b.element(state, 2) if state_size == 3 else key
    count = 1
    for d in dims:
        count *= d
    per_block = 2 if wide else 4
    blocks = -(-count // per_block)
    # counters lo + iota with the carry into the high half
    low = b.add_(b.spread(lo, (blocks,)), b.iota((blocks,), 0, "u64"))
    carried = b.below(low, b.spread(lo, (blocks,)))
    hi_plus = b.add_(hi, 1)
    high = b.select(carried, b.spread(hi_plus, (blocks,)), b.spread(hi, (blocks,)))
    words = [*b.halves(low), *b.halves(high)]
    k0, k1 = b.halves(key)
    w = _philox_rounds(b, words, k0, k1)
    if wide:
        w = [b.join(w[0], w[1]), b.join(w[2], w[3])]
    bits = b.reshape(b.interleave(w, 0, (count,)), dims)
    new_lo = b.add_(lo, blocks)
    if state_size == 3:
        new_hi = b.select(b.below(new_lo, lo), hi_plus, hi)
        return bits, _new_state(b, key, (new_lo, new_hi))
    return bits, _new_state(b, key, (new_lo,))


def _philox_rounds(b: _Builder, x, k0: HloInstruction, k1: HloInstruction):
    dims = x[0].shape.dimensions
    m0 = b.splat("u64", _PHILOX_MULTIPLIERS[0], dims)
    m1 = b.splat("u64", _PHILOX_MULTIPLIERS[1], dims)
    for r in range(10):
        # round r uses the key advanced r times (mod 2**32), computed on scalars
        a = k0 if r == 0 else b.add_(k0, r * _PHILOX_KEY_STEPS[0] & _MASK32)
        c = k1 if r == 0 else b.add_(k1, r * _PHILOX_KEY_STEPS[1] & _MASK32)
        lo0, hi0 = b.halves(b.arith("multiply", b.convert(x[0], "u64"), m0))
        lo1, hi1 = b.halves(b.arith("multiply", b.convert(x[2], "u64"), m1))
        x = [b.xor(b.xor(hi1, x[1]), b.spread(a, dims)), lo1,
             b.xor(b.xor(hi0, x[3]), b.spread(c, dims)), lo0]
    return x


# ---- Threefry-2x32-20 --------------------------------------------------------------------------

def _three_fry(b: _Builder, state: HloInstruction, dims, wide: bool):
    key = b.element(state, 0)
    start = b.element(state, 1)
    k0, k1 = b.halves(key)
    single = all(d == 1 for d in dims)  # one element: x0 of one counter, as for a scalar
    if wide or single:
        gen = tuple(dims)
    else:
        split = _split_dimension(dims)
        gen = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
    count = 1
    for d in gen:
        count *= d
    x0, x1 = _three_fry_rounds(b, *b.halves(_counters(b, start, gen)), k0, k1)
    if wide:
        bits = b.join(x0, x1)
    elif single:
        bits = x0
    else:
        bits = b.interleave([x0, x1], split, dims)
    return bits, _new_state(b, key, (b.add_(start, count),))


def _split_dimension(dims) -> int:
    """Where a 32-bit Threefry output is halved: the first even dimension, else the first of
    the largest ones."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def _counters(b: _Builder, start: HloInstruction, dims) -> HloInstruction:
    """``start + i`` (u64, wrapping) for the row-major index ``i`` of each element of ``dims``."""
    out = b.spread(start, dims)
    stride = 1
    for axis in reversed(range(len(dims))):
        if dims[axis] > 1:
            term = b.iota(dims, axis, "u64")
            out = b.add_(out, term if stride == 1 else b.arith("multiply", term, stride))
        stride *= dims[axis]
    return out


def _three_fry_rounds(b: _Builder, x0: HloInstruction, x1: HloInstruction, k0: HloInstruction,
                      k1: HloInstruction):
    dims = x0.shape.dimensions
    ks = [k0, k1, b.xor(b.xor(b.scalar("u32", _THREE_FRY_PARITY), k0), k1)]
    x0 = b.add_(x0, b.spread(k0, dims))
    x1 = b.add_(x1, b.spread(k1, dims))
    for block in range(5):
        for r in _THREE_FRY_ROTATIONS[block % 2]:
            x0 = b.add_(x0, x1)
            rotated = b.or_(b.arith("shift-left", x1, r), b.arith("shift-right-logical", x1, 32 - r))
            x1 = b.xor(rotated, x0)
        # key injection after every four rounds (scalars, then broadcast)
        x0 = b.add_(x0, b.spread(ks[(block + 1) % 3], dims))
        x1 = b.add_(x1, b.spread(b.add_(ks[(block + 2) % 3], block + 1), dims))
    return x0, x1
