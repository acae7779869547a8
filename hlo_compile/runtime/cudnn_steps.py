"""Steps that run cudnn library calls on the cuda platform (see ``library_steps.py``)."""
from __future__ import annotations

from typing import Any, Callable

STEPS: dict[str, Callable[[Any, Any], Any]] = {}
