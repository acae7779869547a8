"""Reading an instruction's ``backend_config``: XLA:GPU's ``GpuBackendConfig`` as JSON.

XLA prints it as proto3 JSON: 64-bit integers as quoted strings, enums by name, defaults
omitted. Hand-written test modules also use unquoted keys (``{conv_result_scale:1}``), so
the reader accepts those too. Unknown keys are kept (old dumps carry fields XLA has since
reserved); an absent field is its proto default, which the callers supply.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .errors import HloUnsupportedError
from .ir import HloInstruction

_BARE_KEY = re.compile(r'([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)')


def backend_config(inst: HloInstruction) -> dict[str, Any]:
    """The instruction's backend config as a dict ({} when it has none or it is not JSON)."""
    raw = inst.attr("backend_config", None)
    if not isinstance(raw, str) or not raw.strip().startswith("{"):
        return {}
    for text in (raw, _BARE_KEY.sub(r'\1"\2"\3', raw)):
        try:
            value = json.loads(text)
        except ValueError:
            continue
        return value if isinstance(value, dict) else {}
    raise HloUnsupportedError(f"{inst.opcode} '%{inst.name}': its backend_config is not valid JSON", inst.location)


def fusion_backend_config(inst: HloInstruction) -> dict[str, Any]:
    """A fusion's ``fusion_backend_config`` ({} when absent, or when the backend config cannot
    be read: such a fusion is an ordinary one)."""
    raw = inst.attr("backend_config", None)
    if not isinstance(raw, str) or "fusion_backend_config" not in raw:  # most fusions: no JSON to parse
        return {}
    try:
        cfg = backend_config(inst).get("fusion_backend_config", {})
    except HloUnsupportedError:
        return {}
    return cfg if isinstance(cfg, dict) else {}


def config_int(value: Any, default: int = 0) -> int:
    """A proto int64 field as JSON prints it (a quoted string or a number)."""
    if value is None or value == "":
        return default
    return int(value)


def config_float(value: Any, default: float = 0.0) -> float:
    """A proto double field (a number, or a string such as "NaN")."""
    if value is None or value == "":
        return default
    return float(value)
