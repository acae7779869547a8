"""Differential fuzzing: random valid HLO modules run on the reference interpreter and the
host target (with and without the fusion pass, optionally XLA:CPU), compared bit for bit
where the result is bit-reproducible, with failures shrunk to small reproducers.

Modules, one job each: ``shapes`` (types, shapes, layouts), ``builder`` (instruction records
→ text), ``gen_core`` (the generator's state), ``ops_*`` (op generators, registered in
``registry``), ``outline`` (fusion groupings), ``generator`` (modules), ``inputs`` (input
values), ``exactness`` (which results must match to the bit), ``compare``, ``runner`` (one
module, classified; ``spmd_runner`` for modules on R x P participants, whose collectives
``ops_collective`` generates under ``--spmd``), ``worker`` (process isolation), ``shrinker``,
``campaign``, and the command line in ``__main__``. Nothing here imports hypothesis.
"""
from .config import DEFAULT_FEATURES, FEATURES, KNOWN_BUG_FEATURES, FuzzConfig
from .generator import Generated, GeneratorError, generate

__all__ = ["FuzzConfig", "FEATURES", "KNOWN_BUG_FEATURES", "DEFAULT_FEATURES", "generate", "Generated",
           "GeneratorError"]
