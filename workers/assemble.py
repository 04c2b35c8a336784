"""assemble: the IO around core.assemble_plan (Redis snapshot, OV, caches, metrics).

Main call, snapshot hit: one Redis round trip reads the snapshot's version
(stream id, fetch time, size); the converted session and even the finished
answer are cached in process per version, so a hit that is not behind the
caller costs a dictionary lookup plus encoding. Only a version we have not
seen reads and decodes the snapshot itself. A miss reads OV /context once and
stores it (workers.snapshot), later calls hit.

Assemble never fails the caller over OV or Redis. Redis away: the main call
reads OV directly. OV away (or failing): the caller's own messages come back
(passthrough), logged and counted, and for a few seconds after OV was found
unreachable assemble does not try it at all (Services.ov_breaker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import redis

from core.assemble_plan import (
    FullContext, Overlay, Passthrough, SessionBase, build_full_context, build_session_base,
    plan_overlay, recall_query,
)
from core.defaults import DEFAULT_TOKEN_BUDGET
from core.events import ContextSnapshot
from core.messages import MessageFormatError, parse_messages
from core.ov_client import OVClient, OVError, OVUnavailable
from core.recall import (
    build_recall_block, candidate_limit, fallback_content, needs_full_read, prepend_recall_block,
    select_recall_hits,
)
from core.tokens import estimate_message_tokens
from workers.rpc_context import Caller, Services
from workers.rpc_models import AssembleRequest
from workers.snapshot import ZERO_ID, read_snapshot, refresh_snapshot

log = logging.getLogger(__name__)

USER_MEMORIES_URI = "viking://~/memories"


def agent_memories_uri(agent_id: str) -> str:
    """The agent's (peer's) memories of the calling user, OV 0.5.2 layout."""
    return f"viking://~/peers/{agent_id}/memories"


def _passthrough(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"messages": messages, "estimatedTokens": estimate_message_tokens(messages)}


async def assemble(svc: Services, req: AssembleRequest, caller: Caller) -> dict[str, Any]:
    """The answer body ``{messages, estimatedTokens, systemPromptAddition?}``."""
    started = time.perf_counter()
    if caller.bypassed:
        path, outcome = "bypass", Passthrough("session_bypassed")
    elif not req.is_main_call():
        path, outcome = "recall", await _recall_path(svc, req, caller)
    else:
        path, outcome = "full", await _full_path(svc, req, caller)

    if isinstance(outcome, Passthrough):
        body, reason = _passthrough(req.messages), outcome.reason
    elif isinstance(outcome, FullContext):
        body = {"messages": outcome.messages, "estimatedTokens": outcome.estimated_tokens}
        if outcome.system_prompt_addition:
            body["systemPromptAddition"] = outcome.system_prompt_addition
        reason = "lag_overlay" if outcome.tail_count else "assembled"
    else:
        body, reason = outcome, "recalled"
    svc.metrics.assemble_seconds.labels(path).observe(time.perf_counter() - started)
    svc.metrics.assemble_results.labels(path, reason).inc()
    if isinstance(outcome, Passthrough):
        level = logging.DEBUG if reason in _QUIET_PASSTHROUGHS else logging.INFO
        log.log(level, "assemble %s session=%s agent=%s: passthrough (%s)", path, caller.ov_session_id,
                caller.agent_id, reason)
    return body


# Passthroughs that are normal traffic, not news: logged at debug level only.
_QUIET_PASSTHROUGHS = frozenset(
    {"latest_not_user", "recall_already_injected", "recall_query_too_short", "no_recall_hits",
     "auto_recall_disabled", "session_bypassed", "session_not_found", "no_ov_data"}
)


# --- transform-context call: auto-recall ------------------------------------------------


async def _recall_path(svc: Services, req: AssembleRequest, caller: Caller) -> Passthrough | dict[str, Any]:
    settings = svc.settings
    query = recall_query(req.messages, auto_recall=settings.auto_recall)
    if isinstance(query, Passthrough):
        return query
    if not svc.ov_breaker.allows():
        return _ov_unavailable(svc, "recall", caller, None)
    try:
        block = await asyncio.wait_for(
            recall_block(svc.ov_for(caller), settings, query, caller.agent_id),
            timeout=settings.recall_timeout_s,
        )
    except TimeoutError:
        svc.metrics.recall_timeouts.inc()
        log.warning("auto-recall for session=%s gave up after %.1fs", caller.ov_session_id,
                    settings.recall_timeout_s)
        return Passthrough("recall_timeout")
    except OVUnavailable as exc:
        return _ov_unavailable(svc, "recall", caller, exc)
    except OVError as exc:
        log.warning("auto-recall failed: %s", exc)
        return Passthrough("recall_failed")
    svc.ov_breaker.reset()
    if block is None:
        return Passthrough("no_recall_hits")
    messages = prepend_recall_block(req.messages, block)
    return {"messages": messages, "estimatedTokens": estimate_message_tokens(messages)}


def _ov_unavailable(svc: Services, op: str, caller: Caller, exc: OVUnavailable | None) -> Passthrough:
    """Count and log an unreachable OV; a fresh failure keeps assemble off OV for a while."""
    svc.metrics.ov_unavailable.labels(op).inc()
    if exc is not None:
        svc.ov_breaker.trip()
        log.warning("assemble (%s): OV unavailable for session=%s, passing through for the next %.0fs: %s",
                    op, caller.ov_session_id, svc.ov_breaker.cooldown_s, exc)
    return Passthrough("ov_unavailable")


async def recall_block(ov: OVClient, settings: Any, query: str, agent_id: str) -> str | None:
    """Search the user's and the agent's memories in parallel, keep the best,
    read their full text (unless abstracts are preferred) and build the block."""
    limit = candidate_limit(settings.recall_limit)
    searches = await asyncio.gather(
        ov.find(query, target_uri=USER_MEMORIES_URI, limit=limit, score_threshold=0),
        ov.find(query, target_uri=agent_memories_uri(agent_id), limit=limit, score_threshold=0),
        return_exceptions=True,
    )
    hits: list[Any] = []
    failures = [s for s in searches if isinstance(s, BaseException)]
    for result in searches:
        if not isinstance(result, BaseException):
            hits += [*result.memories, *result.resources]
    if len(failures) == len(searches):
        raise failures[0]  # nothing answered: the caller decides (passthrough)
    for failure in failures:
        log.warning("auto-recall: one memory search failed, using the other: %s", failure)
    selected = select_recall_hits(
        hits, limit=settings.recall_limit, score_threshold=settings.recall_score_threshold, query=query
    )
    if not selected:
        return None
    contents = await read_contents(ov, selected, prefer_abstract=settings.recall_prefer_abstract)
    return build_recall_block(list(zip(selected, contents)), settings.recall_max_injected_chars)


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


# --- main call: full context ----------------------------------------------------------------


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


async def _full_path(svc: Services, req: AssembleRequest, caller: Caller) -> Passthrough | FullContext:
    if svc.direct:
        return await _direct_full_path(svc, req, caller)
    try:
        entry = _cached_base(svc, caller)
    except redis.RedisError as exc:
        log.warning("assemble: Redis unavailable, reading OV directly: %s", exc)
        return await _direct_full_path(svc, req, caller)
    if entry is None:
        svc.metrics.snapshot_miss()
        snapshot = await _refresh(svc, caller)
        if isinstance(snapshot, Passthrough):
            return snapshot
        entry = _remember(svc, None, snapshot)
    else:
        svc.metrics.snapshot_hit()
    version, base, captured_through, capture_known = entry
    return _answer(svc, req, base, version, captured_through=captured_through,
                   capture_known=capture_known)


def _cached_base(svc: Services, caller: Caller) -> tuple[Any, SessionBase, int, bool] | None:
    """The converted snapshot of the caller's session, from the cache when its
    version is known, else read from Redis; None when there is no snapshot."""
    key = svc.snapshot_key(caller)
    pipe = svc.redis.pipeline(transaction=False)
    pipe.hmget(key, "id", "fetched_ms")
    pipe.hstrlen(key, "data")
    (stream_id, fetched_ms), size = pipe.execute()
    if not size:
        return None
    # (key, stream id, fetch time, size) names one stored snapshot: the write
    # script sets all of them at once.
    version = (key, stream_id, _int(fetched_ms), size)
    cached = svc.bases.get(version)
    if cached is not None:
        return cached
    snapshot = read_snapshot(svc.redis, svc.settings, ov_session_id=caller.require_session(),
                             agent_id=caller.agent_id, user=caller.user)
    if snapshot is None:
        return None
    return _remember(svc, version, snapshot)


def _remember(svc: Services, version: Any, snapshot: ContextSnapshot) -> tuple[Any, SessionBase, int, bool]:
    base = build_session_base(snapshot.latest_archive_overview, snapshot.pre_archive_abstracts,
                              snapshot.messages, snapshot.total_archives)
    entry = (version, base, snapshot.captured_through, snapshot.applied_stream_id != ZERO_ID)
    if version is not None:
        svc.bases.put(version, entry)
    return entry


async def _refresh(svc: Services, caller: Caller) -> ContextSnapshot | Passthrough:
    """Fetch OV /context for a session with no snapshot and store it."""
    if not svc.ov_breaker.allows():
        return _ov_unavailable(svc, "assemble", caller, None)
    try:
        snapshot = await refresh_snapshot(svc.redis, svc.ov_for(caller), svc.settings,
                                          ov_session_id=caller.require_session(),
                                          agent_id=caller.agent_id, user=caller.user)
        svc.ov_breaker.reset()
        return snapshot
    except OVUnavailable as exc:
        return _ov_unavailable(svc, "assemble", caller, exc)
    except OVError as exc:
        if exc.code == "NOT_FOUND":
            return Passthrough("session_not_found")
        log.warning("assemble: OV /context failed for session=%s: %s", caller.ov_session_id, exc)
        return Passthrough("ov_error")
    except redis.RedisError as exc:
        log.warning("assemble: snapshot not stored, Redis unavailable: %s", exc)
        return Passthrough("redis_unavailable")


async def _direct_full_path(svc: Services, req: AssembleRequest, caller: Caller) -> Passthrough | FullContext:
    """The reference plugin's way: OV /context on every call, converted every time."""
    if not svc.ov_breaker.allows():
        return _ov_unavailable(svc, "assemble", caller, None)
    try:
        ctx = await svc.ov_for(caller).get_context(caller.require_session(),
                                                   token_budget=_budget(req))
    except OVUnavailable as exc:
        return _ov_unavailable(svc, "assemble", caller, exc)
    except OVError as exc:
        return Passthrough("session_not_found" if exc.code == "NOT_FOUND" else "ov_error")
    base = build_session_base(ctx.latest_archive_overview, ctx.pre_archive_abstracts, ctx.messages,
                              ctx.stats.total_archives)
    return _answer(svc, req, base, None, captured_through=0, capture_known=False)


def _budget(req: AssembleRequest) -> int:
    """The request's budget; missing or not positive: the default, as in the reference."""
    budget = req.tokenBudget
    return int(budget) if budget is not None and budget >= 1 else DEFAULT_TOKEN_BUDGET


def _answer(svc: Services, req: AssembleRequest, base: SessionBase, version: Any, *,
            captured_through: int, capture_known: bool) -> Passthrough | FullContext:
    plan = plan_overlay(base, captured_through=captured_through, capture_known=capture_known,
                        input_count=len(req.messages))
    if isinstance(plan, Passthrough):
        return plan
    budget = _budget(req)
    tail_raw = req.messages[plan.tail_start:] if isinstance(plan, Overlay) else []
    cache_key = (version, budget) if version is not None and not tail_raw else None
    if cache_key is not None and (cached := svc.results.get(cache_key)) is not None:
        return cached
    try:
        tail = parse_messages(tail_raw) if tail_raw else []
    except MessageFormatError:  # the request model only admits objects; defensive
        tail = []
    if tail_raw:
        svc.metrics.lag_overlays.inc()
        log.info("assemble: snapshot of session=%s is %d message(s) behind; appending them",
                 req.sessionId, len(tail_raw))
    result = build_full_context(base, tail, budget)
    if cache_key is not None and isinstance(result, FullContext):
        svc.results.put(cache_key, result)
    return result
