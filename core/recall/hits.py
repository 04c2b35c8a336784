"""Recall post-processing: from search hits already fetched to the block that
auto-recall injects. Used by assemble's auto-recall and the memory_recall tool.

Pure, no IO: fetching hits and reading full memory text are the caller's.
Filtering and ranking follow the reference plugin's memory-ranking.ts; the
code is ours.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from core.ov.layout import MEMORY_CATEGORIES
from core.recall.text import AUTO_RECALL_SOURCE_MARKER, has_recall_marker, latest_user_index

LEAF_LEVEL = 2
"""OV's level of a memory's own text; 0 and 1 are directory abstracts/overviews."""

LEAF_BOOST = 0.12
LEXICAL_OVERLAP_MAX_BOOST = 0.2
EVENT_BOOST = 0.1
"""For event memories when the query asks about time."""
PREFERENCE_BOOST = 0.08
"""For preference memories when the query asks about likes."""

_LEXICAL_TOKENS_CONSIDERED = 8
_LEXICAL_TOKENS_FOR_FULL_BOOST = 4

_BLOCK_HEADER = (
    "<relevant-memories>",
    AUTO_RECALL_SOURCE_MARKER,
    "The following OpenViking memories may be relevant:",
)
_BLOCK_FOOTER = "</relevant-memories>"

DEFAULT_CATEGORY = "memory"


class RecallHit(msgspec.Struct, kw_only=True, frozen=True):
    """One search hit, whatever shape it came in (OV JSON, ov_models.Hit)."""

    uri: str
    level: int | None = None
    score: float = 0.0
    abstract: str = ""
    context_type: str | None = None
    category: str = ""
    """As OV reported it; often empty, then derived from the URI."""


def _field(hit: Any, name: str, default: Any = None) -> Any:
    if isinstance(hit, Mapping):
        return hit.get(name, default)
    return getattr(hit, name, default)


def _as_level(raw: Any) -> int | None:
    if raw is None or isinstance(raw, bool):
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _as_score(raw: Any) -> float:
    # A missing or broken score ranks last rather than failing the recall.
    if isinstance(raw, bool):
        return 0.0
    try:
        score = float(raw)
    except (TypeError, ValueError):
        return 0.0
    return score if math.isfinite(score) else 0.0


def to_hit(hit: Any) -> RecallHit:
    """A ``RecallHit`` from a dict or any object with the hit's attributes."""
    if isinstance(hit, RecallHit):
        return hit
    context_type = _field(hit, "context_type")
    return RecallHit(
        uri=str(_field(hit, "uri", "") or ""),
        level=_as_level(_field(hit, "level")),
        score=_as_score(_field(hit, "score")),
        abstract=str(_field(hit, "abstract", "") or ""),
        context_type=None if context_type is None else str(context_type),
        category=str(_field(hit, "category", "") or ""),
    )


def candidate_limit(recall_limit: int) -> int:
    """How many hits to ask each search for: ranking needs more than it keeps."""
    return max(recall_limit * 4, 20)


def clamp_score(score: float) -> float:
    return min(max(score, 0.0), 1.0)


def recall_category(hit: RecallHit) -> str:
    """The hit's memory category: OV's own when given, else the path segment
    after the last ``memories`` in the URI (``profile.md`` -> ``profile``),
    ``resource`` for resources, else ``memory``."""
    if hit.category.strip():
        return hit.category.strip()
    path = hit.uri.split("://", 1)[-1]
    segments = [s for s in path.split("/") if s]
    if segments and segments[0] == "resources":
        return "resource"
    for i in range(len(segments) - 1, -1, -1):
        if segments[i] == "memories" and i + 1 < len(segments):
            name = segments[i + 1].rsplit(".", 1)[0].lower()
            return name if name in MEMORY_CATEGORIES else DEFAULT_CATEGORY
    return DEFAULT_CATEGORY


# --- ranking ---------------------------------------------------------------------

_QUERY_TOKEN = re.compile(r"[a-z0-9]{2,}")
_STOPWORDS = frozenset(
    [
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "did",
        "does",
        "is",
        "are",
        "was",
        "were",
        "the",
        "and",
        "for",
        "with",
        "from",
        "that",
        "this",
        "your",
        "you",
    ]
)
_WANTS_PREFERENCE = re.compile(r"prefer|preference|favorite|favourite|like|偏好|喜欢|爱好|更倾向", re.I)
_WANTS_TIME = re.compile(
    r"when|what time|date|day|month|year|yesterday|today|tomorrow|last|next|"
    r"什么时候|何时|哪天|几月|几年|昨天|今天|明天|上周|下周|上个月|下个月|去年|明年",
    re.I,
)


class _QueryProfile(msgspec.Struct, frozen=True):
    tokens: tuple[str, ...]
    wants_preference: bool
    wants_time: bool


def _profile(query: str | None) -> _QueryProfile:
    text = (query or "").strip()
    # Repeats are dropped so "redis redis foo" is two words to look for, not three.
    tokens = tuple(dict.fromkeys(t for t in _QUERY_TOKEN.findall(text.lower()) if t not in _STOPWORDS))
    return _QueryProfile(tokens, bool(_WANTS_PREFERENCE.search(text)), bool(_WANTS_TIME.search(text)))


def lexical_overlap_boost(tokens: Sequence[str], text: str) -> float:
    """Up to 0.2: the share of the first query words found in ``text``, full
    marks once four of them (or all, if fewer) are found."""
    if not tokens or not text:
        return 0.0
    haystack = text.lower()
    found = sum(1 for token in tokens[:_LEXICAL_TOKENS_CONSIDERED] if token in haystack)
    share = found / min(len(tokens), _LEXICAL_TOKENS_FOR_FULL_BOOST)
    return min(LEXICAL_OVERLAP_MAX_BOOST, share * LEXICAL_OVERLAP_MAX_BOOST)


def _is_leaf(hit: RecallHit) -> bool:
    return hit.level == LEAF_LEVEL


def _rank(hit: RecallHit, query: _QueryProfile) -> float:
    category = recall_category(hit)
    boost = LEAF_BOOST if _is_leaf(hit) else 0.0
    if query.wants_time and category == "events":
        boost += EVENT_BOOST
    if query.wants_preference and category == "preferences":
        boost += PREFERENCE_BOOST
    # The URI's path counts as text (file names are often telling), its scheme
    # does not: "viking://" would match query words like "in" for every hit.
    path = hit.uri.split("://", 1)[-1]
    boost += lexical_overlap_boost(query.tokens, f"{path} {hit.abstract.strip()}")
    return clamp_score(hit.score) + boost


def rank_score(hit: Any, query: str | None = None) -> float:
    """The score ``select_recall_hits`` orders by: clamped search score plus boosts."""
    return _rank(to_hit(hit), _profile(query))


def _normalised(text: str) -> str:
    return " ".join(text.lower().split())


EACH_ITS_OWN = frozenset({"events", "cases"})
"""Categories where the same words are still two memories (two meetings, two cases)."""


def distinct_key(hit: RecallHit) -> str:
    """Hits with the same key are one memory to recall or forget: an event or a case by its
    URI; any other by its category and normalised abstract (its URI when it has none)."""
    category = recall_category(hit).lower()
    uri = hit.uri.lower()
    abstract = _normalised(hit.abstract)
    if not abstract or category in EACH_ITS_OWN or any(f"/{c}/" in uri for c in EACH_ITS_OWN):
        return f"uri:{hit.uri}"
    return f"abstract:{category}:{abstract}"


def select_recall_hits(
    hits: Iterable[Any],
    *,
    limit: int,
    score_threshold: float,
    query: str | None = None,
) -> list[RecallHit]:
    """The hits worth injecting, best first, at most ``limit``.

    Duplicates by URI keep their best score; only leaves (level 2) and hits
    without a level stay; scores (clamped to [0, 1]) below the threshold go;
    hits are ranked (score + 0.12 for a leaf + up to 0.2 word overlap with the
    query + event/preference boosts when the query asks for them); of hits
    with the same ``distinct_key`` (category and normalised abstract; an event
    or a case is its own) the best-ranked stays; leaves come before level-less
    hits, as in the reference.
    """
    if limit <= 0:
        return []
    best_by_uri: dict[str, RecallHit] = {}
    for raw in hits:
        hit = to_hit(raw)
        if not hit.uri:
            continue
        kept = best_by_uri.get(hit.uri)
        if kept is None or hit.score > kept.score:
            best_by_uri[hit.uri] = hit

    profile = _profile(query)
    ranked = sorted(
        (
            (_rank(hit, profile), hit)
            for hit in best_by_uri.values()
            if (hit.level is None or hit.level == LEAF_LEVEL) and clamp_score(hit.score) >= score_threshold
        ),
        # Ties fall back to the raw score, then the URI, so the order is stable.
        key=lambda pair: (-pair[0], -clamp_score(pair[1].score), pair[1].uri),
    )

    seen: set[str] = set()
    distinct: list[RecallHit] = []
    for _, hit in ranked:
        key = distinct_key(hit)
        if key in seen:
            continue
        seen.add(key)
        distinct.append(hit)

    leaves = [hit for hit in distinct if _is_leaf(hit)]
    others = [hit for hit in distinct if not _is_leaf(hit)]
    return (leaves + others)[:limit]


# --- the injected block -------------------------------------------------------------


def needs_full_read(hit: Any, prefer_abstract: bool) -> bool:
    """Whether the caller should read the memory's full text for the block:
    leaves are read unless the abstract is preferred and there is one."""
    h = to_hit(hit)
    if prefer_abstract and h.abstract.strip():
        return False
    return _is_leaf(h)


def fallback_content(hit: Any) -> str:
    """What stands in when no full text is read (or reading failed)."""
    h = to_hit(hit)
    return h.abstract.strip() or h.uri


def format_recall_line(hit: Any, content: str) -> str:
    """``- [category]\\n  <uri>URI</uri>\\n  content``, every content line indented."""
    h = to_hit(hit)
    body = content.strip() or fallback_content(h)
    indented = "\n".join(f"  {line}" for line in body.split("\n"))
    return f"- [{recall_category(h)}]\n  <uri>{h.uri}</uri>\n{indented}"


def memories_in_block(block: str) -> int:
    """How many memories a block of ``build_recall_block`` holds (one ``<uri>`` line each)."""
    return block.count("\n  <uri>")


def build_recall_block(items: Sequence[tuple[Any, str]], max_chars: int) -> str | None:
    """The ``<relevant-memories>`` block for ``(hit, content)`` pairs in order.

    The lines (with their newline separators) fit in ``max_chars``; a line
    that does not fit is skipped whole, never cut, and later, shorter lines
    may still fit. None when no line fits.
    """
    lines: list[str] = []
    used = 0
    for hit, content in items:
        if used >= max_chars:
            break
        line = format_recall_line(hit, content)
        projected = used + (1 if lines else 0) + len(line)
        if projected > max_chars:
            continue
        lines.append(line)
        used = projected
    if not lines:
        return None
    return "\n".join((*_BLOCK_HEADER, *lines, _BLOCK_FOOTER))


def _prepend_to_content(content: Any, block: str) -> Any:
    if isinstance(content, str):
        return f"{block}\n\n{content}"
    if isinstance(content, list):
        first = content[0] if content else None
        if isinstance(first, Mapping) and first.get("type") == "text" and isinstance(first.get("text"), str):
            return [{**first, "text": f"{block}\n\n{first['text']}"}, *content[1:]]
        return [{"type": "text", "text": block}, *content]
    return block


def prepend_recall_block(messages: Sequence[dict[str, Any]], block: str) -> list[dict[str, Any]]:
    """A new list in which the latest user message starts with ``block`` and a
    blank line; the input is not changed. Unchanged (but copied) when there is
    no user message or that message already carries a recall block."""
    result = list(messages)
    index = latest_user_index(result)
    if index is None or has_recall_marker(result[index]):
        return result
    latest = result[index]
    result[index] = {**latest, "content": _prepend_to_content(latest.get("content"), block)}
    return result
