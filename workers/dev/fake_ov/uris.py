"""viking:// URIs as 0.5.2 reads them, and the fake's lexical stand-in for vector search."""

from __future__ import annotations

import re

RESERVED_USER_SEGMENTS = frozenset({"memories", "resources", "skills", "peers", "privacy", "sessions"})
SCOPES = frozenset({"resources", "user", "agent", "session", "~"})
_WORD_RE = re.compile(r"[0-9a-z_]{2,}|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", re.IGNORECASE)


def context_type_of(uri: str) -> str:
    parts = uri_parts(uri)
    if parts[:2] == ["agent", "skills"] or (len(parts) > 2 and parts[0] == "user" and parts[2] == "skills"):
        return "skill"
    if parts[:1] == ["user"] and ("memories" in parts[2:3] or (parts[2:3] == ["peers"] and "memories" in parts[4:5])):
        return "memory"
    return "resource"


def uri_parts(uri: str) -> list[str]:
    return [p for p in uri.split("?", 1)[0][len("viking://") :].split("/") if p]


def under(uri: str, prefix: str) -> bool:
    """``uri`` is ``prefix`` or inside it."""
    prefix = prefix.rstrip("/")
    return uri == prefix or uri.startswith(prefix + "/") or prefix == "viking:/"


def words(text: str) -> set[str]:
    return {w.lower() for w in _WORD_RE.findall(text)}


def lexical_score(query: str, text: str) -> float:
    """Share of the query's words found in ``text`` (0..1); the fake's stand-in for vectors."""
    q = words(query)
    if not q:
        return 0.0
    return round(len(q & words(text)) / len(q), 4)
