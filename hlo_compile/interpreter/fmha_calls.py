"""The numpy meaning of the fmha library calls (see ``library_calls.py``)."""
from __future__ import annotations
