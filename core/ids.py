"""Identity: OpenClaw session and agent ids mapped to what OpenViking stores.

Pure functions. The TypeScript plugin maps session ids the same way, so both
sides name a session identically (the shard of a session depends on it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

from core.defaults import DEFAULT_AGENT_ID

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# A session id becomes one AGFS path segment, and OV's storage may sit on
# Windows: these characters cannot appear in a file name there. The reference
# plugin's set lacks `*`; it is just as illegal on Windows, so we add it.
_WINDOWS_ILLEGAL = re.compile(r'[:<>"\\/|?*\x00-\x1f]')

_SESSION_HASH_SALT = "openclaw-session:"

_AGENT_IN_SESSION_KEY = re.compile(r"agent:([^:]+):")
_NOT_AGENT_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_UNDERSCORE_RUN = re.compile(r"_{2,}")


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_DOT_SEGMENTS = frozenset({".", ".."})


def ov_session_id(session_id: str, session_key: str | None) -> str:
    """The OV session id of an OpenClaw session.

    In order: a UUID session id, lower-cased; else sha256 of a non-empty
    sessionKey; else, when the id holds a character a Windows file name cannot,
    sha256 of ``"openclaw-session:" + id``; else the id itself. Both inputs are
    trimmed first. Raises ``ValueError`` when neither gives anything.

    ovstream's extension of the seed's rule: an id that is a dot segment (``.``,
    ``..``: a URL path would collapse it, so the session's routes would miss) is
    hashed like a Windows-illegal one; so is an id that is all whitespace, untrimmed
    (the seed would have no id left; hashing the raw text keeps two such ids apart).
    """
    raw = session_id or ""
    sid = raw.strip()
    key = (session_key or "").strip()
    if sid and _UUID.fullmatch(sid):
        return sid.lower()
    if key:
        return _sha256_hex(key)
    if not raw:
        raise ValueError("an OpenClaw session needs a non-empty sessionId or sessionKey")
    if not sid:
        return _sha256_hex(_SESSION_HASH_SALT + raw)
    if _WINDOWS_ILLEGAL.search(sid) or sid in _DOT_SEGMENTS:
        return _sha256_hex(_SESSION_HASH_SALT + sid)
    return sid


def sanitize_agent_id(raw: str) -> str:
    """``raw`` reduced to ``[a-zA-Z0-9_-]``: others become ``_``, runs of ``_``
    collapse to one, leading/trailing ``_`` go. May return ``""``."""
    replaced = _NOT_AGENT_CHAR.sub("_", raw.strip())
    return _UNDERSCORE_RUN.sub("_", replaced).strip("_")


def agent_id_from_session_key(session_key: str | None) -> str | None:
    """``<id>`` of a sessionKey shaped ``agent:<id>:<rest>``, else None."""
    match = _AGENT_IN_SESSION_KEY.match((session_key or "").strip())
    if match is None:
        return None
    return match.group(1).strip() or None


def resolve_agent_id(session_key: str | None, runtime_agent_id: str | None, prefix: str = "") -> str:
    """The OV agent (peer) id for a call.

    The sessionKey's ``agent:<id>:`` wins, then runtimeContext.agentId, then
    ``"main"``. The id is sanitised (``sanitize_agent_id``) and falls back to
    ``"main"`` if nothing survives; a prefix that survives sanitising is joined
    as ``<prefix>_<id>``.
    """
    raw = agent_id_from_session_key(session_key) or (runtime_agent_id or "").strip()
    agent = sanitize_agent_id(raw) or DEFAULT_AGENT_ID
    clean_prefix = sanitize_agent_id(prefix or "")
    return f"{clean_prefix}_{agent}" if clean_prefix else agent


@lru_cache(maxsize=256)
def _compile_session_glob(pattern: str) -> re.Pattern[str]:
    # `**` spans anything; `*` stays inside one `:`-separated segment, so
    # "agent:*:cron:**" names the cron sessions of every agent. Everything
    # else, `?` included, is literal: the reference leaves `?` unescaped (so it
    # acts as a regex quantifier there), which nobody writing a glob expects.
    parts: list[str] = []
    for i, chunk in enumerate(pattern.split("**")):
        if i:
            parts.append(".*")
        parts.append("[^:]*".join(re.escape(piece) for piece in chunk.split("*")))
    return re.compile("".join(parts), re.DOTALL)


@lru_cache(maxsize=64)
def _compile_session_globs(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(_compile_session_glob(p) for p in patterns)


def is_bypassed(patterns: Sequence[str], session_id: str | None, session_key: str | None) -> bool:
    """Whether a session matches one of the bypass globs (so OV is skipped).

    Matched in full against the trimmed sessionKey when it is non-empty, else
    the trimmed sessionId; nothing to match against means not bypassed.
    """
    if not patterns:
        return False
    candidate = (session_key or "").strip() or (session_id or "").strip()
    if not candidate:
        return False
    return any(rx.fullmatch(candidate) for rx in _compile_session_globs(tuple(patterns)))
