"""The numpy meaning of the conv library calls (see ``library_calls.py``)."""
from __future__ import annotations
