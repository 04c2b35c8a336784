"""Memory tools: memory_recall, memory_store, memory_forget, memory_search."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

from core.ids import ov_session_id
from core.ov.layout import USER_MEMORIES_URI, agent_memories_uri
from core.ov.messages import text_message
from core.recall.hits import (
    LEAF_LEVEL,
    candidate_limit,
    clamp_score,
    format_recall_line,
    select_recall_hits,
)
from core.redaction import Placeholders, redact_text
from core.uris import is_memory_uri
from workers.rpc.compact import commit_and_wait, memories_of
from workers.rpc.context import Caller, Services
from workers.rpc.models import (
    MemoryForgetParams,
    MemoryRecallParams,
    MemorySearchParams,
    MemoryStoreParams,
)
from workers.rpc.recall import hits_of, read_contents, search_targets
from workers.rpc.tools.base import Tool, ToolResult, text_result

log = logging.getLogger(__name__)

RESOURCES_URI = "viking://resources"
AGENT_SKILLS_URI = "viking://agent/skills"
FORGET_AUTO_DELETE_SCORE = 0.85
"""A query-matched memory is deleted without asking only when it is the one
candidate and scores at least this."""
FORGET_DEFAULT_LIMIT = 5
SEARCH_DEFAULT_LIMIT = 10


def _lines_within(items: Sequence[tuple[Any, str]], max_chars: int) -> list[str]:
    """Formatted memory lines totalling at most max_chars; a line that does not fit
    is skipped whole (a later, shorter one may still fit)."""
    lines: list[str] = []
    used = 0
    for hit, content in items:
        line = format_recall_line(hit, content)
        projected = used + (1 if lines else 0) + len(line)
        if projected <= max_chars:
            lines.append(line)
            used = projected
    return lines


async def memory_recall(svc: Services, caller: Caller, p: MemoryRecallParams) -> ToolResult:
    settings = svc.settings
    limit = p.limit or settings.recall_limit
    threshold = p.scoreThreshold if p.scoreThreshold is not None else settings.recall_score_threshold
    if p.targetUri:
        targets = [p.targetUri]
    else:
        targets = [USER_MEMORIES_URI, agent_memories_uri(caller.agent_id)]
        if settings.recall_resources or p.includeResources:
            targets.append(RESOURCES_URI)
    ov = svc.ov_for(caller)
    results = await search_targets(ov, p.query, targets, candidate_limit(limit))
    selected = select_recall_hits(hits_of(results), limit=limit, score_threshold=threshold, query=p.query)
    if not selected:
        return text_result("No relevant OpenViking memories found.", count=0, scoreThreshold=threshold)
    contents = await read_contents(ov, selected, prefer_abstract=False)
    lines = _lines_within(list(zip(selected, contents)), settings.recall_max_injected_chars)
    found = [{"uri": h.uri, "score": h.score, "level": h.level, "abstract": h.abstract} for h in selected]
    if not lines:
        return text_result(
            f"No complete OpenViking memory fits recallMaxInjectedChars={settings.recall_max_injected_chars}.",
            count=0,
            memories=found,
            scoreThreshold=threshold,
        )
    return text_result(
        f"Found {len(lines)} memories:\n\n" + "\n".join(lines),
        count=len(lines),
        memories=found,
        scoreThreshold=threshold,
        targets=targets,
    )


def temp_session_id() -> str:
    """A fresh OV session for one memory_store: the write must not land in
    (and later be archived with) the conversation it came from."""
    return f"memory-store-{int(time.time() * 1000)}-{secrets.token_hex(3)}"


async def memory_store(svc: Services, caller: Caller, p: MemoryStoreParams) -> ToolResult:
    target = ov_session_id(p.sessionId, None) if p.sessionId else temp_session_id()
    policy = svc.settings.redaction_for(caller.agent_id)  # a secret is no memory: as in a turn
    text, kinds = (p.text, {}) if policy.mode == "off" else redact_text(p.text, policy.rules, Placeholders())
    if kinds and policy.mode == "drop":
        held = ", ".join(sorted(kinds))
        return text_result(
            f"Not stored: the text held {held} (redaction drop).", action="withheld", kinds=sorted(kinds)
        )
    message = text_message(p.role, text)
    if p.role == "assistant":
        message.peer_id = caller.agent_id
    await svc.ov_for(caller).add_message(target, message)
    outcome = await commit_and_wait(svc, caller, target, reason="memory_store")
    details = {
        "sessionId": target,
        "usedTempSession": not p.sessionId,
        "status": outcome.status,
        "commitId": outcome.commit_id,
    }
    if outcome.status == "failed":
        return text_result(
            f"Memory extraction failed for session {target}: {outcome.error or 'unknown'}",
            action="failed",
            error=outcome.error,
            **details,
        )
    if outcome.status not in ("completed", "skipped"):
        return text_result(
            f"Memory extraction for session {target} is still running; it may finish in the background.",
            action="timeout",
            **details,
        )
    count = memories_of(outcome)
    if count == 0:
        log.warning("memory_store: committed session %s but no memory was extracted", target)
    return text_result(
        f"Stored in OpenViking session {target}; {count} memories extracted.",
        action="stored",
        memoriesCount=count,
        archived=outcome.archived,
        **details,
    )


def _own_user(svc: Services, caller: Caller) -> str | None:
    """The one user whose spelled-out memories the caller may forget: in dev mode (no
    key at all) the configured ``user``; with a key, OV knows whose it is (None)."""
    return svc.settings.user if caller.api_key is None and svc.settings.api_key is None else None


async def _forget(svc: Services, caller: Caller, uri: str, **details: Any) -> ToolResult:
    """Delete one memory and say what OV removed: its count, never a guess."""
    answer = await svc.ov_for(caller).rm(uri)
    deleted = answer.get("estimated_deleted_count") if isinstance(answer, dict) else None
    if not isinstance(deleted, int) or isinstance(deleted, bool):
        return text_result(
            f"Asked OpenViking to delete {uri}; it did not say what it removed.",
            action="unconfirmed",
            uri=uri,
            **details,
        )
    if deleted == 0:
        return text_result(f"Nothing to forget: no memory at {uri}.", action="not_found", uri=uri, deleted=0, **details)
    return text_result(f"Forgotten: {uri}", action="deleted", uri=uri, deleted=deleted, **details)


async def memory_forget(svc: Services, caller: Caller, p: MemoryForgetParams) -> ToolResult:
    ov = svc.ov_for(caller)
    if p.uri:  # canonical already (models.VikingUri): the check sees what OV would delete
        if not is_memory_uri(p.uri, user=_own_user(svc, caller)):
            refusal = f"Refusing to delete a URI that is not your memory: {p.uri}"
            return text_result(refusal, action="rejected", uri=p.uri)
        return await _forget(svc, caller, p.uri)
    limit = p.limit or FORGET_DEFAULT_LIMIT
    threshold = p.scoreThreshold if p.scoreThreshold is not None else svc.settings.recall_score_threshold
    targets = [p.targetUri] if p.targetUri else [USER_MEMORIES_URI, agent_memories_uri(caller.agent_id)]
    results = await search_targets(ov, p.query or "", targets, candidate_limit(limit))
    hits = [h for r in results for h in r.memories]
    candidates = [
        h
        for h in select_recall_hits(hits, limit=limit, score_threshold=threshold)
        if h.level == LEAF_LEVEL and is_memory_uri(h.uri, user=_own_user(svc, caller))
    ]
    if not candidates:
        return text_result(
            "No matching memory found. Try a more specific query.", action="none", scoreThreshold=threshold
        )
    top = candidates[0]
    if len(candidates) == 1 and clamp_score(top.score) >= FORGET_AUTO_DELETE_SCORE:
        return await _forget(svc, caller, top.uri, score=top.score)
    listing = "\n".join(f"- {h.uri} ({clamp_score(h.score) * 100:.0f}%)" for h in candidates)
    return text_result(
        f"Found {len(candidates)} candidates; call again with the uri to delete:\n{listing}",
        action="candidates",
        scoreThreshold=threshold,
        candidates=[{"uri": h.uri, "score": h.score, "abstract": h.abstract} for h in candidates],
    )


async def memory_search(svc: Services, caller: Caller, p: MemorySearchParams) -> ToolResult:
    limit = p.limit or SEARCH_DEFAULT_LIMIT
    targets = [p.uri] if p.uri else [RESOURCES_URI, AGENT_SKILLS_URI]
    results = await search_targets(svc.ov_for(caller), p.query, targets, limit)
    rows: dict[str, dict[str, Any]] = {}
    for result in results:
        for kind, group in (("memory", result.memories), ("resource", result.resources), ("skill", result.skills)):
            for hit in group:
                if hit.uri not in rows or hit.score > rows[hit.uri]["score"]:
                    rows[hit.uri] = {
                        "type": kind,
                        "uri": hit.uri,
                        "level": hit.level,
                        "score": hit.score,
                        "abstract": hit.abstract,
                    }
    ordered = sorted(rows.values(), key=lambda r: -r["score"])
    scope = f" under {p.uri}" if p.uri else ""
    if not ordered:
        return text_result(f'No OpenViking resources or skills found for "{p.query}"{scope}.', count=0, results=[])
    lines = [f'Found {len(ordered)} results for "{p.query}"{scope}:']
    for row in ordered:
        summary = " ".join(row["abstract"].split())[:220] or "(no summary)"
        lines.append(f"- [{row['type']}] {row['uri']} ({clamp_score(row['score']) * 100:.0f}%)\n  {summary}")
    return text_result("\n".join(lines), count=len(ordered), results=ordered)


TOOLS = [
    Tool("memory_recall", MemoryRecallParams, memory_recall, "Search the user's and this agent's long-term memories."),
    Tool(
        "memory_store",
        MemoryStoreParams,
        memory_store,
        "Store a fact, preference or decision now and extract memories from it.",
    ),
    Tool(
        "memory_forget",
        MemoryForgetParams,
        memory_forget,
        "Delete a memory by URI, or by a query with one confident match.",
    ),
    Tool("memory_search", MemorySearchParams, memory_search, "Search imported resources and agent skills."),
]
