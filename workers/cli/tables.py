"""Text tables and UTC times, as the operator commands print them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime


def when(ts: float | None) -> str:
    """``ts`` (epoch seconds) as UTC ``YYYY-mm-dd HH:MM:SS``; "-" for none."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    lines = [list(header), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines)
