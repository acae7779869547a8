"""HLO opcodes (``xla/hlo/ir/hlo_opcode.h``): text names and fixed arities (None = variadic)."""
from __future__ import annotations

OPCODE_ARITY: dict[str, int | None] = {
    "abs": 1, "acos": 1, "acosh": 1, "add": 2, "add-dependency": 2, "after-all": None, "all-gather": None,
    "all-gather-done": 1, "all-gather-start": None, "all-reduce": None, "all-reduce-done": 1,
    "all-reduce-start": None, "all-to-all": None, "and": 2, "asin": 1, "asinh": 1, "async-done": 1,
    "async-start": None, "async-update": 1, "atan2": 2, "atanh": 1, "batch-norm-grad": 5,
    "batch-norm-inference": 5, "batch-norm-training": 3, "bitcast": 1, "bitcast-convert": 1,
    "broadcast": 1, "call": None, "cbrt": 1, "ceil": 1, "cholesky": 1, "clamp": 3,
    "collective-broadcast": None, "collective-permute": None, "collective-permute-done": 1,
    "collective-permute-start": None, "compare": 2, "complex": 2, "concatenate": None, "conditional": None,
    "constant": 0, "convert": 1, "convolution": None, "copy": 1, "copy-done": 1, "copy-start": 1,
    "cosh": 1, "cosine": 1, "count-leading-zeros": 1, "custom-call": None, "divide": 2, "domain": 1,
    "dot": 2, "dynamic-reshape": None, "dynamic-slice": None, "dynamic-update-slice": None, "erf": 1,
    "exponential": 1, "exponential-minus-one": 1, "fft": 1, "floor": 1, "fusion": None, "gather": 2,
    "get-dimension-size": 1, "get-tuple-element": 1, "imag": 1, "infeed": 1, "iota": 0, "is-finite": 1,
    "log": 1, "log-plus-one": 1, "logistic": 1, "map": None, "maximum": 2, "minimum": 2, "mulhi": 2,
    "multiply": 2, "negate": 1, "not": 1, "opt-barrier": 1, "or": 2, "outfeed": 2, "pad": 2,
    "parameter": 0, "partition-id": 0, "popcnt": 1, "power": 2, "ragged-all-to-all": 6, "ragged-dot": 3,
    "real": 1, "recv": 1, "recv-done": 1, "reduce": None, "reduce-precision": 1, "reduce-scatter": None,
    "reduce-window": None, "remainder": 2, "replica-id": 0, "reshape": 1, "reverse": 1, "rng": None,
    "rng-bit-generator": 1, "rng-get-and-update-state": 0, "round-nearest-afz": 1,
    "round-nearest-even": 1, "rsqrt": 1, "scaled-dot": 4, "scan": None, "scatter": None, "select": 3,
    "select-and-scatter": 3, "send": 2, "send-done": 1, "set-dimension-size": 2, "shift-left": 2,
    "shift-right-arithmetic": 2, "shift-right-logical": 2, "sign": 1, "sine": 1, "sinh": 1, "slice": 1,
    "sort": None, "sqrt": 1, "stochastic-convert": 2, "subtract": 2, "tan": 1, "tanh": 1, "topk": 1,
    "transpose": 1, "triangular-solve": 2, "tuple": None, "while": 1, "xor": 2,
}
OPCODES = frozenset(OPCODE_ARITY)

UNARY_ELEMENTWISE = frozenset({
    "abs", "acos", "acosh", "asin", "asinh", "atanh", "cbrt", "ceil", "copy", "cosh", "cosine",
    "count-leading-zeros", "erf", "exponential", "exponential-minus-one", "floor", "is-finite", "log",
    "log-plus-one", "logistic", "negate", "not", "popcnt", "real", "imag", "round-nearest-afz",
    "round-nearest-even", "rsqrt", "sign", "sine", "sinh", "sqrt", "tan", "tanh", "convert",
    "bitcast-convert", "reduce-precision",
})
BINARY_ELEMENTWISE = frozenset({
    "add", "and", "atan2", "compare", "complex", "divide", "maximum", "minimum", "mulhi", "multiply",
    "or", "power", "remainder", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "subtract", "xor", "stochastic-convert",
})
TERNARY_ELEMENTWISE = frozenset({"select", "clamp"})
ELEMENTWISE = UNARY_ELEMENTWISE | BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE

# Opcodes whose `<op>-start/-update/-done` spelling is the async sugar (others have native
# start/done opcodes or none).
ASYNC_SUGAR_EXCLUDED = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "recv", "send"})
