"""Memory search shared by auto-recall (assemble) and the memory tools.

One fan-out: a find per target URI in parallel, a failing target logged and
skipped unless every target fails; then the seed's hit selection
(core.recall.hits) and the full read of each chosen memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

from core.config import Settings
from core.ov.client import OVClient, OVError
from core.ov.layout import USER_MEMORIES_URI, agent_memories_uri
from core.ov.models import FindResult
from core.recall.hits import (
    build_recall_block,
    candidate_limit,
    fallback_content,
    needs_full_read,
    select_recall_hits,
)

log = logging.getLogger(__name__)


async def search_targets(ov: OVClient, query: str, targets: Sequence[str], limit: int) -> list[FindResult]:
    """One find per target in parallel; a failing target is logged and skipped,
    unless all fail (then the first error is raised)."""
    answers = await asyncio.gather(
        *(ov.find(query, target_uri=t, limit=limit, score_threshold=0) for t in targets),
        return_exceptions=True,
    )
    ok = [a for a in answers if isinstance(a, FindResult)]
    failed = [a for a in answers if isinstance(a, BaseException)]
    if failed and not ok:
        raise failed[0]
    for target, answer in zip(targets, answers):
        if isinstance(answer, BaseException):
            log.warning("search of %s failed, using the other scopes: %s", target, answer)
    return ok


def hits_of(results: Sequence[FindResult]) -> list[Any]:
    """Memory and resource hits of several finds, in order."""
    return [h for r in results for h in (*r.memories, *r.resources)]


class RecallFound(NamedTuple):
    block: str
    """The ``<relevant-memories>`` block."""
    hits: list[Any]
    """The memories chosen for it, best first (each with its URI and score)."""


async def recall_block(ov: OVClient, settings: Settings, query: str, agent_id: str) -> RecallFound | None:
    """Search the user's and the agent's memories in parallel, keep the best,
    read their full text (unless abstracts are preferred) and build the block."""
    results = await search_targets(
        ov, query, [USER_MEMORIES_URI, agent_memories_uri(agent_id)], candidate_limit(settings.recall_limit)
    )
    selected = select_recall_hits(
        hits_of(results), limit=settings.recall_limit, score_threshold=settings.recall_score_threshold, query=query
    )
    if not selected:
        return None
    contents = await read_contents(ov, selected, prefer_abstract=settings.recall_prefer_abstract)
    block = build_recall_block(list(zip(selected, contents)), settings.recall_max_injected_chars)
    return None if block is None else RecallFound(block, list(selected))


async def read_contents(ov: OVClient, hits: Sequence[Any], *, prefer_abstract: bool) -> list[str]:
    """Each hit's text to inject: its full memory, or the abstract when that is
    preferred or the read fails (a failed read never loses the hit)."""

    async def one(hit: Any) -> str:
        if not needs_full_read(hit, prefer_abstract):
            return fallback_content(hit)
        try:
            text = await ov.read(hit.uri)
        except OVError as exc:
            log.info("recall: reading %s failed, using its abstract: %s", hit.uri, exc)
            return fallback_content(hit)
        return text.strip() or fallback_content(hit)

    return list(await asyncio.gather(*(one(h) for h in hits)))
