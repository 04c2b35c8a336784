"""What an attacker or a careless client sends, as hypothesis strategies, shared by the
hostile-input tiers (stream entries in tests/capture, HTTP bodies in tests/rpc)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

ODD_STRINGS = [
    "",
    " ",
    ".",
    "..",
    "%2e%2e",
    "\x00",
    "\ud800",  # a lone surrogate: not encodable as UTF-8
    "a" * 5000,
    "viking://~/memories/../../resources/x",
    "viking://~/memories/%2e%2e/%2e%2e/resources",
    "viking://agent/memories/../..",
    "viking://~/memories/%252e%252e/x",
    "viking://user/other/memories/m.md",
    "agent:main:x",
    "11111111-2222-3333-4444-555555555555",
]

odd_text = st.sampled_from(ODD_STRINGS) | st.text(max_size=30)
"""Strings that have broken parsers, ids and URI checks, and arbitrary text."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | odd_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=10,
)
"""Any JSON value (NaN and infinities included), built from odd strings."""


def encoded(value: Any) -> bytes:
    """``value`` as JSON bytes as a careless client writes it: NaN allowed, lone surrogates kept."""
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


def nested(depth: int) -> bytes:
    """An array nested ``depth`` deep: ``[[[...]]]``."""
    return b"[" * depth + b"]" * depth


def bodies(structured: st.SearchStrategy[Any], *, min_depth: int = 1) -> st.SearchStrategy[bytes]:
    """Bytes from ``structured`` values, any JSON, raw binary, or absurd nesting."""
    return (
        structured.map(encoded)
        | json_values.map(encoded)
        | st.binary(max_size=300)
        | st.integers(min_value=min_depth, max_value=20_000).map(nested)
    )
