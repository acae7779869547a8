"""The fmha library calls as plain HLO (see ``library_calls.py``)."""
from __future__ import annotations

from typing import Callable

from ..hlo import HloComputation, HloInstruction

LOWERINGS: dict[str, Callable[[HloComputation, HloInstruction], None]] = {}
