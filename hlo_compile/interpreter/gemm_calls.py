"""The numpy meaning of the gemm library calls (see ``library_calls.py``)."""
from __future__ import annotations
