"""assemble: the IO around core.assemble_plan (Redis snapshot, OV, caches, metrics).

Main call, snapshot hit: one Redis round trip reads the snapshot's version
(stream id, fetch time, size); the converted session and even the finished
answer are cached in process per version, so a hit that is not behind the
caller costs a dictionary lookup plus encoding. Only a version we have not
seen reads and decodes the snapshot itself. A miss reads OV /context once and
stores it (workers.rpc.assemble_snapshot), later calls hit.

Assemble never fails the caller over OV or Redis, and never takes longer than
``assembleTimeoutS``. Redis away: the main call reads OV directly. OV away,
failing or slow: the caller's own messages come back (passthrough), logged and
counted, and for a few seconds after OV was found unreachable assemble does not
try it at all (Services.ov_breaker).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, cast

import msgspec

from core.assemble_plan import (
    Overlay,
    Passthrough,
    build_full_context,
    build_session_base,
    passthrough_with,
    plan_overlay,
    recall_query,
)
from core.defaults import RECALL_QUERY_MIN_CHARS
from core.messages.model import MessageFormatError, parse_messages
from core.messages.tokens import estimate_message_tokens
from core.ov.client import OVError, OVUnavailable
from core.recall.hits import memories_in_block, prepend_recall_block
from core.recall.text import prepare_recall_query
from core.turns import PendingTurn
from workers.rpc.answers import Answered, Recalled, budget_of, keep_trace
from workers.rpc.assemble_snapshot import NO_SNAPSHOT, Snap, cached_snap, ov_unavailable, refresh, remember
from workers.rpc.assemble_turn import pending_turns, recall_key, redis_block, remembered_block, settle_turn_block
from workers.rpc.bounded import bounded
from workers.rpc.context import Caller, Services
from workers.rpc.models import AssembleRequest
from workers.rpc.recall import recall_block
from workers.rpc.subagents import fork_snap
from workers.store.connection import redis_failed
from workers.store.snapshots import ZERO_ID
from workers.store.usage import TALLY

log = logging.getLogger(__name__)


def _passthrough(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"messages": messages, "estimatedTokens": estimate_message_tokens(messages)}


async def assemble(svc: Services, req: AssembleRequest, caller: Caller) -> dict[str, Any] | msgspec.Raw:
    """The answer body ``{messages, estimatedTokens, systemPromptAddition?}`` (already encoded
    for an assembled context)."""
    started = time.perf_counter()
    outcome: Passthrough | Answered | Recalled
    path = "bypass" if caller.bypassed else "full" if req.is_main_call() else "recall"
    if caller.bypassed:
        outcome = Passthrough("session_bypassed")
    else:
        call = _full_path(svc, req, caller) if path == "full" else _recall_path(svc, req, caller)
        try:  # not wait_for (a task per call), not asyncio.timeout (a timer per call): a hit never waits
            outcome = await bounded(call, svc.settings.assemble_timeout_s)
        except TimeoutError:  # OV (or Redis) too slow: the caller's turn goes on without us
            log.warning(
                "assemble %s session=%s: no answer within assembleTimeoutS=%.1fs, passing through",
                path,
                caller.ov_session_id,
                svc.settings.assemble_timeout_s,
            )
            outcome = Passthrough("assemble_timeout")

    body: dict[str, Any] | msgspec.Raw
    if isinstance(outcome, Passthrough):
        body, reason = _passthrough(req.messages), outcome.reason
    elif isinstance(outcome, Answered):
        body, reason = outcome.body, "lag_overlay" if outcome.context.tail_count else "assembled"
    else:
        body, reason = outcome.body, "recalled"
    svc.metrics.assembled(path, reason, time.perf_counter() - started)
    _count_usage(caller, outcome)
    if (sid := caller.ov_session_id) is not None and svc.traces.enabled:
        keep_trace(svc, req, caller, sid, path, reason, outcome)
    if isinstance(outcome, Passthrough):
        level = logging.DEBUG if reason in _QUIET_PASSTHROUGHS else logging.INFO
        log.log(
            level,
            "assemble %s session=%s agent=%s: passthrough (%s)",
            path,
            caller.ov_session_id,
            caller.agent_id,
            reason,
        )
    return body


def _count_usage(caller: Caller, outcome: Passthrough | Answered | Recalled) -> None:
    """The call in its tenant's usage (workers.store.usage: a tally, flushed by the RPC's beat)."""
    TALLY.add(caller.tenant, "assembles")
    if isinstance(outcome, Answered):
        TALLY.add(caller.tenant, "tokens_assembled", outcome.context.estimated_tokens)
    elif isinstance(outcome, Recalled):
        TALLY.add(caller.tenant, "memories_recalled", memories_in_block(outcome.block))


# Passthroughs that are normal traffic, not news: logged at debug level only.
_QUIET_PASSTHROUGHS = frozenset(
    {
        "latest_not_user",
        "recall_already_injected",
        "recall_query_too_short",
        "no_recall_hits",
        "auto_recall_disabled",
        "session_bypassed",
        "session_not_found",
        "no_ov_data",
    }
)


# --- transform-context call: auto-recall ------------------------------------------------


async def _recall_path(svc: Services, req: AssembleRequest, caller: Caller) -> Passthrough | Recalled:
    query = recall_query(req.messages, auto_recall=svc.settings.auto_recall)
    if isinstance(query, Passthrough):
        return query
    block = await _search(svc, caller, query)
    if isinstance(block, Passthrough):
        return block
    messages = prepend_recall_block(req.messages, block)
    return Recalled({"messages": messages, "estimatedTokens": estimate_message_tokens(messages)}, block)


async def _search(svc: Services, caller: Caller, query: str) -> str | Passthrough:
    """The recall block for ``query``, or why there is none (timeout, OV away, no hits)."""
    settings = svc.settings
    if not svc.ov_breaker.allows():
        return ov_unavailable(svc, "recall", caller, None)
    try:
        async with asyncio.timeout(settings.recall_timeout_s):
            found = await recall_block(svc.ov_for(caller), settings, query, caller.agent_id)
    except TimeoutError:
        svc.metrics.recall_timeouts.inc()
        log.warning("auto-recall for session=%s gave up after %.1fs", caller.ov_session_id, settings.recall_timeout_s)
        return Passthrough("recall_timeout")
    except OVUnavailable as exc:
        return ov_unavailable(svc, "recall", caller, exc)
    except OVError as exc:
        log.warning("auto-recall failed: %s", exc)
        return Passthrough("recall_failed")
    svc.ov_breaker.reset()
    if found is None:
        return Passthrough("no_recall_hits")
    if caller.ov_session_id is not None:
        svc.traces.recalled(caller.address(), query, found.hits)
    return found.block


async def _turn_recall(
    svc: Services, caller: Caller, req: AssembleRequest, reflected_event_ids: list[str], pending: list[PendingTurn]
) -> str | None:
    """The current user turn's recall block, for the system prompt addition.

    The 2026.9 host sends the user's text as ``prompt`` on every assemble and
    keeps it out of ``messages``, so the query comes from ``prompt``. One
    search per turn: its block (or its absence) is kept for the turn, so each
    model request of the tool loop carries the same block, once.
    """
    prompt = req.prompt
    if not isinstance(prompt, str) or not svc.settings.auto_recall:
        return None
    key = recall_key(svc, caller, req, prompt, reflected_event_ids, pending)
    # A block this process settled for the turn: the prompt was searchable then (the key
    # names the prompt), so the tool loop's later requests skip preparing the query.
    cached = remembered_block(svc, key)
    if cached is None:
        query = prepare_recall_query(prompt)
        if len(query) < RECALL_QUERY_MIN_CHARS:
            return None
        cached = await redis_block(svc, key)
    if cached is not None:
        svc.metrics.recall_turn(kept=True)
        return cached or None
    svc.metrics.recall_turn(kept=False)
    found = await _search(svc, caller, query)
    block = found if isinstance(found, str) else None
    return await settle_turn_block(svc, key, block)  # a failed search too: the turn's requests stay alike


# --- main call: full context ----------------------------------------------------------------


_NEW_SESSION = frozenset({"session_not_found", "no_ov_data"})
"""Passthrough reasons of a session OV does not have yet (its turns may be in flight)."""


async def _full_path(svc: Services, req: AssembleRequest, caller: Caller) -> Passthrough | Answered:
    if svc.direct:
        return await _direct_full_path(svc, req, caller)
    try:
        if req.forked and (fork := await fork_snap(svc, req, caller)) is not None:
            return await _answer(svc, req, caller, fork)
        snap, last_turn = await cached_snap(svc, caller)
    except Exception as exc:
        if not redis_failed(exc):
            raise
        log.warning("assemble: Redis unavailable, reading OV directly: %s", exc)
        return await _direct_full_path(svc, req, caller)
    if snap is None:
        svc.metrics.snapshot_miss()
        snapshot = await refresh(svc, caller)
        if isinstance(snapshot, Passthrough):
            if not (req.overlay_by_identity() and snapshot.reason in _NEW_SESSION):
                return snapshot
            snap = NO_SNAPSHOT  # OV has nothing yet; the session may still have turns in flight
        else:
            snap = remember(svc, None, snapshot)
    else:
        svc.metrics.snapshot_hit()
    return await _answer(svc, req, caller, snap, last_turn=last_turn)


async def _direct_full_path(svc: Services, req: AssembleRequest, caller: Caller) -> Passthrough | Answered:
    """The reference plugin's way: OV /context on every call, converted every time.
    With Redis away only the turns the plugin still holds can be added to it."""
    if not svc.ov_breaker.allows():
        return ov_unavailable(svc, "assemble", caller, None)
    try:
        ctx = await svc.ov_for(caller).get_context(caller.require_session(), token_budget=budget_of(req))
        base = build_session_base(
            ctx.latest_archive_overview, ctx.pre_archive_abstracts, ctx.messages, ctx.stats.total_archives
        )
    except OVUnavailable as exc:
        return ov_unavailable(svc, "assemble", caller, exc)
    except OVError as exc:
        if exc.code != "NOT_FOUND" or not req.overlay_by_identity():
            return Passthrough("session_not_found" if exc.code == "NOT_FOUND" else "ov_error")
        base = NO_SNAPSHOT.base
    return await _answer(svc, req, caller, Snap(None, base, 0, ZERO_ID, [], []), direct=True)


async def _lag_tail(
    svc: Services, req: AssembleRequest, caller: Caller, snap: Snap, *, last_turn: str | None, direct: bool
) -> tuple[list[dict[str, Any]], list[PendingTurn]] | Passthrough:
    """The messages to append to the snapshot: the turns it lacks, by event identity
    when the plugin sends its turns, else by count of the caller's transcript."""
    if not req.overlay_by_identity():
        plan = plan_overlay(
            snap.base,
            captured_through=snap.captured_through,
            capture_known=snap.capture_known and not direct,
            input_count=len(req.messages),
        )
        if isinstance(plan, Passthrough):
            return plan
        return (req.messages[plan.tail_start :] if isinstance(plan, Overlay) else []), []
    pending = await pending_turns(
        svc,
        caller,
        req,
        after_id=snap.applied_id,
        reflected_event_ids=snap.event_ids,
        reflected_advancements=snap.advancements,
        # with Redis away capture's record is out of reach: OV holding the session makes it known
        # (an import the plugin still holds would repeat what is there), as capture's record would
        session_known=snap.capture_known or (direct and not snap.base.empty),
        last_turn=last_turn,
        redis_away=direct,
    )
    if snap.base.empty and not pending:
        return Passthrough("no_ov_data")
    return [m for turn in pending for m in turn.messages], pending


async def _answer(
    svc: Services,
    req: AssembleRequest,
    caller: Caller,
    snap: Snap,
    *,
    last_turn: str | None = None,
    direct: bool = False,
) -> Passthrough | Answered:
    """``last_turn``: the session's newest published turn; ``direct``: OV read without Redis."""
    lag = await _lag_tail(svc, req, caller, snap, last_turn=last_turn, direct=direct)
    if isinstance(lag, Passthrough):
        # Nothing of ours to assemble (a new session, say), but the turn still gets its memories.
        recall = await _turn_recall(svc, caller, req, snap.event_ids, [])
        return lag if recall is None else Answered.of(passthrough_with(req.messages, recall))
    tail_raw, pending = lag
    recall = await _turn_recall(svc, caller, req, snap.event_ids, pending)
    budget = budget_of(req)
    version = snap.version
    cache_key = (version, budget, recall or "") if version is not None and not tail_raw else None
    if cache_key is not None and (cached := svc.results.get(cache_key)) is not None:
        return cast(Answered, cached)
    try:
        tail = parse_messages(tail_raw) if tail_raw else []
    except MessageFormatError:  # the request model only admits objects; defensive
        tail = []
    if tail_raw:
        svc.metrics.lag_overlays.inc()
        log.info(
            "assemble: snapshot of session=%s lacks %d message(s) (%d turn(s)); appending them",
            caller.ov_session_id,
            len(tail_raw),
            len(pending),
        )
    result = build_full_context(snap.base, tail, budget, recall_block=recall)
    if isinstance(result, Passthrough):
        return result
    answered = Answered.of(
        result,
        snapshot_id=snap.applied_id if snap.capture_known else None,
        overlay_turns=tuple(turn.event_id for turn in pending),
    )
    if cache_key is not None:
        with contextlib.suppress(ValueError):  # larger than the whole cache: answered, not kept
            svc.results[cache_key] = answered
    return answered
