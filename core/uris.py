"""viking:// URIs from callers: one canonical spelling, then what they point at.

Pure functions. A caller's URI is checked on its canonical form, never as
text: percent escapes are decoded (``%2e%2e`` is ``..``) and dot segments
resolved (``memories/../../resources`` is ``resources``), so what is checked is
what OV is asked about; OV 0.5.2 resolves neither, so the canonical form is
also what is sent.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from core.ov.layout import MEMORY_URI

SCHEME = "viking://"
MAX_DECODE_ROUNDS = 3
"""Percent-decoding passes before a URI counts as encoded too many times to trust."""

_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")


class UriError(ValueError):
    """A URI that has no canonical viking:// form (the message says why)."""


def _decoded(text: str) -> str:
    for _ in range(MAX_DECODE_ROUNDS):
        try:
            once = unquote(text, errors="strict")
        except UnicodeDecodeError:
            raise UriError("its percent escapes are not UTF-8") from None
        if once == text:
            return text
        text = once
    if unquote(text) != text:
        raise UriError(f"it is percent-encoded more than {MAX_DECODE_ROUNDS} times")
    return text


def normalize_uri(uri: str) -> str:
    """The canonical form of a viking:// URI: percent escapes decoded, ``.`` and
    ``..`` segments resolved, empty segments and a trailing ``/`` dropped.

    Raises ``UriError`` for a URI of another scheme, one whose ``..`` climbs
    above ``viking://``, one with control characters or backslashes (a path
    separator on some hosts), or one encoded past ``MAX_DECODE_ROUNDS``.
    """
    if not uri.startswith(SCHEME):
        raise UriError(f"a URI must start with {SCHEME}")
    path = _decoded(uri[len(SCHEME) :])
    if _UNSAFE.search(path):
        raise UriError("it holds a control character or a backslash")
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                raise UriError(f"its '..' climbs above {SCHEME}")
            segments.pop()
            continue
        segments.append(segment)
    return SCHEME + "/".join(segments)


def is_memory_uri(uri: str, *, user: str | None = None) -> bool:
    """Whether a canonical URI is a memory (or memory directory) in OV 0.5.2's layout.

    ``user``: the one user a spelled-out ``viking://user/<id>/...`` may name
    (the identity the caller acts as); None accepts any, for a caller whose own
    OV key decides which user it is.
    """
    match = MEMORY_URI.match(uri)
    if match is None:
        return False
    named = match.group("user")
    return user is None or named is None or named == user
