"""The reference interpreter: numpy evaluation of whole HLO modules with XLA's semantics.

It imports only ``hlo_compile.hlo`` (DESIGN.md §1): the reference never shares code with
the compiler it checks."""
from .evaluator import Evaluator, evaluate_module
from .registry import OPS, TOKEN

__all__ = ["Evaluator", "evaluate_module", "OPS", "TOKEN"]
