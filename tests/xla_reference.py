"""The project's XLA:CPU reference tool (``shared/tools/xla_ref.py`` beside the checkout), loaded
once by path for the tests that compare with real XLA; None where jax or the tool is absent
(CI has neither: those tests skip)."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

XLA_REF = Path(__file__).resolve().parents[2] / "shared" / "tools" / "xla_ref.py"


@functools.lru_cache(maxsize=None)
def xla_ref_module() -> ModuleType | None:
    """``xla_ref.py`` as a module, or None without jax or the tool."""
    if importlib.util.find_spec("jax") is None or not XLA_REF.is_file():
        return None
    spec = importlib.util.spec_from_file_location("xla_ref", XLA_REF)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
