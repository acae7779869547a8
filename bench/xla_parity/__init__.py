"""``python -m bench --xla-parity DIR...``: our kernels against XLA:GPU's, kernel by kernel.

For each case folder made by ``xla_gpu_dump.py`` (``optimized_gpu.hlo``, ``case.json``,
``xla_dump/``): XLA's and our grid, block and shared memory, the widest global load and store
in each PTX, and registers/spills from ``ptxas -v`` on both, grouped by our emitter family,
with one summary line (issue 29). ``xla_dump.py`` reads XLA's files, ``case.py`` compares one
case, ``report.py`` sums and prints, ``cli.py`` is the command line.
"""
from __future__ import annotations

from .cli import main

__all__ = ["main"]
