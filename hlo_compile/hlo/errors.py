"""Errors raised by the front end. Every one carries a source location when it has one and
formats like a compiler diagnostic: ``file:line:col: error: message``, the line, a caret."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    filename: str
    line: int  # 1-based
    column: int  # 1-based
    source_line: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}"


class HloError(Exception):
    """Base class of every error the project reports about its input."""

    def __init__(self, message: str, location: SourceLocation | None = None):
        super().__init__(message)
        self.message = message
        self.location = location

    @property
    def filename(self) -> str | None:
        return self.location.filename if self.location else None

    @property
    def line(self) -> int | None:
        return self.location.line if self.location else None

    @property
    def column(self) -> int | None:
        return self.location.column if self.location else None

    def __str__(self) -> str:
        if self.location is None:
            return f"error: {self.message}"
        loc = self.location
        text = f"{loc}: error: {self.message}"
        if loc.source_line:
            line = loc.source_line.expandtabs(1)
            if len(line) > 200:  # keep the caret visible on very long lines
                start = max(0, loc.column - 100)
                line, col = line[start:start + 200], loc.column - start
            else:
                col = loc.column
            text += f"\n{line}\n{' ' * (col - 1)}^"
        return text


class HloParseError(HloError):
    """The text is not valid HLO."""


class HloVerifyError(HloError):
    """The module parsed but is not well formed (shapes, operand counts, attributes)."""


class HloUnsupportedError(HloError):
    """Valid HLO that this project does not handle (yet); the message names what is missing."""


def location_at(text: str, offset: int, filename: str) -> SourceLocation:
    """The location of character ``offset`` in ``text`` (one lookup; use LineIndex for many)."""
    return LineIndex(text, filename).location(offset)


class LineIndex:
    """Offsets → locations for one text, in O(log n) per lookup (parsers ask for thousands)."""

    def __init__(self, text: str, filename: str):
        import re
        self.text = text
        self.filename = filename
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def location(self, offset: int) -> SourceLocation:
        from bisect import bisect_right
        offset = max(0, min(offset, len(self.text)))
        i = bisect_right(self.starts, offset) - 1
        start = self.starts[i]
        end = self.starts[i + 1] - 1 if i + 1 < len(self.starts) else len(self.text)
        return SourceLocation(self.filename, i + 1, offset - start + 1, self.text[start:end].rstrip("\r"))
