"""compact, and the synchronous commit it shares with memory_store.

A commit goes through workers.commits.api (request_commit, then its outcome record
polled until final or compact_wait_s), so a commit already in flight for the
session (capture's threshold commit, a second /compact) is awaited rather
than run twice. The one exception is a caller whose API key the workers do
not hold (a passthrough key that is not in ``user_api_keys``): a worker would
commit with the wrong identity, so that commit runs here, inline, with the
caller's key.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from functools import partial
from typing import Any

import msgspec

from core.assemble_plan import FullContext, build_full_context, snapshot_base
from core.defaults import PHASE2_READ_BACKOFF_MAX_S
from core.events import CommitOutcome, CommitReason, CommitRequest, ContextSnapshot
from core.ov.client import OVError, OVUnavailable
from core.ov.tasks import judge_phase2_read, next_read_delay
from workers.commits.api import FINAL_STATUSES, CommitRecords, final_or_timeout, request_commit
from workers.rpc.context import Caller, RpcError, Services, rpc_error_for
from workers.rpc.models import CompactRequest
from workers.rpc.quotas import spend
from workers.store.applied import AppliedState
from workers.store.connection import REDIS_ERRORS
from workers.store.snapshots import read_snapshot, refresh_snapshot, snapshot_from

log = logging.getLogger(__name__)

KEEP_RECENT_ON_COMPACT = 0
"""compact and memory_store archive everything, as the reference does."""
OUTCOME_POLL_S = 0.05
"""How often a waiting compact reads the commit record (one HGET)."""


def memories_of(outcome: CommitOutcome) -> int:
    """Memories a finished commit extracted (0 when it reported none)."""
    return outcome.memories_extracted or 0


def workers_can_act_for(svc: Services, caller: Caller) -> bool:
    """Whether an RQ worker holds a key for the caller's tenant."""
    return caller.tenant is None or caller.tenant in svc.settings.user_api_keys


async def commit_and_wait(svc: Services, caller: Caller, ov_session_id: str, *, reason: CommitReason) -> CommitOutcome:
    """Commit the session (keeping nothing) and wait for phase 2, at most compact_wait_s (a
    429 first when the tenant is over its quota of commits: workers.rpc.quotas)."""
    settings = svc.settings
    await spend(svc, caller, "commits")
    if not workers_can_act_for(svc, caller):
        return await _inline_commit(svc, caller, ov_session_id, reason=reason)
    try:
        request = await asyncio.to_thread(
            request_commit,
            svc.commit_redis,
            settings,
            caller.address(ov_session_id),
            reason=reason,
            keep_recent_count=KEEP_RECENT_ON_COMPACT,
        )
        return await _await_outcome(svc, request)
    except REDIS_ERRORS as exc:
        log.warning("commit of %s: Redis unavailable: %s", ov_session_id, exc)
        raise RpcError(503, "redis_unavailable", "the commit queue (Redis) is unreachable") from None


async def _await_outcome(svc: Services, request: CommitRequest) -> CommitOutcome:
    """wait_commit_outcome, but sleeping on the event loop instead of in a thread:
    a compact may wait minutes, and a few of them would take every thread of the
    default executor (which /metrics and /healthz need too)."""
    deadline = time.monotonic() + svc.settings.compact_wait_s
    records = CommitRecords(svc.commit_redis, svc.settings)
    while True:
        outcome = await records.outcome_async(svc.redis, request)
        remaining = deadline - time.monotonic()
        if (outcome is not None and outcome.status in FINAL_STATUSES) or remaining <= 0:
            return final_or_timeout(request, outcome, svc.settings.compact_wait_s)
        await asyncio.sleep(min(OUTCOME_POLL_S, remaining))


async def _inline_commit(svc: Services, caller: Caller, ov_session_id: str, *, reason: CommitReason) -> CommitOutcome:
    settings = svc.settings
    ov = svc.ov_for(caller)
    # Working memory on, as the queued commits do: it is what writes the archive overview.
    accepted = await ov.commit(ov_session_id, keep_recent_count=KEEP_RECENT_ON_COMPACT, enable_working_memory=True)
    outcome = CommitOutcome(
        commit_id=f"inline_{secrets.token_hex(8)}",
        ov_session_id=ov_session_id,
        agent_id=caller.agent_id,
        user=caller.tenant,
        reason=reason,
        status="running",
        task_id=accepted.task_id,
        archive_uri=accepted.archive_uri,
        archived=accepted.archived,
        requested_at=time.time(),
    )
    log.info("commit of %s runs inline (the workers hold no key for tenant %s)", ov_session_id, caller.tenant)
    if accepted.status == "skipped" or not accepted.task_id:
        return msgspec.structs.replace(outcome, status="skipped", finished_at=time.time())
    deadline = time.monotonic() + settings.compact_wait_s
    failed_reads = 0
    while True:
        wait_s = next_read_delay(
            settings.phase2_poll_interval_s, failed_reads, settings.phase2_read_retries, PHASE2_READ_BACKOFF_MAX_S
        )
        await asyncio.sleep(min(wait_s, max(deadline - time.monotonic(), 0)))
        task, error = None, None
        try:
            task = await ov.get_task(accepted.task_id)
        except OVError as exc:
            error = exc
        read = judge_phase2_read(
            task,
            error,
            failed_reads=failed_reads,
            deadline_passed=time.monotonic() >= deadline,
            deadline_s=settings.compact_wait_s,
        )
        if read.status is not None:
            return msgspec.structs.replace(outcome, status=read.status, finished_at=time.time(), **read.fields)
        failed_reads = read.failed_reads


def _valid_count(value: float | None) -> int | None:
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return int(value)


def assembled_tokens(snapshot: ContextSnapshot, budget: int) -> int:
    """What assemble would send for this snapshot, estimated the way assemble does,
    so tokensBefore and tokensAfter measure the same thing."""
    base = snapshot_base(snapshot)
    if base.empty:
        return 0
    result = build_full_context(base, [], budget)
    return result.estimated_tokens if isinstance(result, FullContext) else snapshot.estimated_tokens


async def _context_estimate(svc: Services, caller: Caller, ov_session_id: str, budget: int) -> int:
    """The session's assembled token estimate: from the snapshot, else from OV; -1 when neither answers."""
    try:
        snapshot = await read_snapshot(svc.redis, svc.settings, caller.address(ov_session_id))
        if snapshot is not None:
            return assembled_tokens(snapshot, budget)
    except REDIS_ERRORS as exc:
        log.info("compact: no snapshot estimate (Redis: %s)", exc)
    try:
        budget_of_snapshot = svc.settings.snapshot_token_budget
        context = await svc.ov_for(caller).get_context(ov_session_id, token_budget=budget_of_snapshot)
        return assembled_tokens(snapshot_from(context, caller.address(ov_session_id), AppliedState()), budget)
    except OVError as exc:
        log.info("compact: no context estimate for %s: %s", ov_session_id, exc)
        return -1


def _outcome_details(outcome: CommitOutcome, host_tokens: int | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"commit": msgspec.to_builtins(outcome)}
    if host_tokens is not None:
        details["hostTokensBefore"] = host_tokens  # the host's count, for its own comparisons
    return details


def _failure(reason: str, tokens_before: int, outcome: CommitOutcome, host_tokens: int | None) -> dict[str, Any]:
    return {
        "ok": False,
        "compacted": False,
        "reason": reason,
        "result": {
            "summary": "",
            "firstKeptEntryId": "",
            "tokensBefore": tokens_before,
            "details": _outcome_details(outcome, host_tokens),
        },
    }


async def compact(svc: Services, req: CompactRequest, caller: Caller) -> dict[str, Any]:
    body = await _compact(svc, req, caller)
    svc.metrics.compact_results.labels(body.get("reason") or "none").inc()
    log.info(
        "compact session=%s agent=%s: ok=%s compacted=%s reason=%s",
        caller.ov_session_id,
        caller.agent_id,
        body["ok"],
        body["compacted"],
        body.get("reason"),
    )
    return body


async def _compact(svc: Services, req: CompactRequest, caller: Caller) -> dict[str, Any]:
    if caller.bypassed:
        return {"ok": True, "compacted": False, "reason": "session_bypassed"}
    ov_sid = caller.require_session()
    budget = _valid_count(req.tokenBudget) or svc.settings.snapshot_token_budget
    ov = svc.ov_for(caller)
    try:
        await ov.get_session(ov_sid)
    except OVUnavailable as exc:
        svc.metrics.ov_unavailable.labels("compact").inc()
        raise rpc_error_for(exc) from None
    except OVError as exc:
        if exc.code == "NOT_FOUND":
            return {"ok": True, "compacted": False, "reason": "session_not_found"}
        raise rpc_error_for(exc) from None

    # tokensBefore and tokensAfter both count what assemble sends (messages and the system
    # prompt addition, estimated as assemble estimates): the host's own count covers more (its
    # system prompt, the tools) and comparing it with ours said compaction grew the context.
    host_tokens = _valid_count(req.currentTokenCount)
    tokens_before = await _context_estimate(svc, caller, ov_sid, budget)
    if tokens_before < 0 and host_tokens is not None:
        tokens_before = host_tokens
    try:
        outcome = await commit_and_wait(svc, caller, ov_sid, reason="compact")
    except OVUnavailable as exc:  # inline commit only; queued commits report through the outcome
        svc.metrics.ov_unavailable.labels("compact").inc()
        raise rpc_error_for(exc) from None
    except OVError as exc:
        if exc.code == "NOT_FOUND":
            return {"ok": True, "compacted": False, "reason": "session_not_found"}
        return _failure(
            "commit_failed",
            tokens_before,
            CommitOutcome(
                commit_id="inline", ov_session_id=ov_sid, agent_id=caller.agent_id, status="failed", error=str(exc)
            ),
            host_tokens,
        )

    if outcome.status == "failed":
        return _failure("commit_failed", tokens_before, outcome, host_tokens)
    # Still running at our bound (below the host's compaction timeout): the archive
    # is made, only memory extraction goes on, and its poller records the outcome.
    finished = outcome.status in ("completed", "skipped")
    phase2_pending = not finished and outcome.archived
    if not finished and not phase2_pending:
        return _failure("commit_timeout", tokens_before, outcome, host_tokens)
    if outcome.status == "skipped" or not outcome.archived:
        return {
            "ok": True,
            "compacted": False,
            "reason": "commit_no_archive",
            "result": {
                "summary": "",
                "firstKeptEntryId": "",
                "tokensBefore": tokens_before,
                "tokensAfter": tokens_before if tokens_before >= 0 else None,
                "details": _outcome_details(outcome, host_tokens),
            },
        }

    details = _outcome_details(outcome, host_tokens)
    summary, tokens_after = "", None
    try:
        read = partial(ov.get_context, ov_sid, token_budget=svc.settings.snapshot_token_budget)
        snapshot = await refresh_snapshot(svc.redis, svc.settings, caller.address(ov_sid), read)
        summary, tokens_after = snapshot.latest_archive_overview.strip(), assembled_tokens(snapshot, budget)
    except (OVError, *REDIS_ERRORS) as exc:
        log.warning("compact: session %s committed, but its context could not be re-read: %s", ov_sid, exc)
        details["contextError"] = str(exc)
    first_kept = (outcome.archive_uri or "").rstrip("/").rsplit("/", 1)[-1]
    if phase2_pending:
        details["phase2"] = (
            f"still running after {svc.settings.compact_wait_s:g}s; the commit completes "
            f"in the background and is recorded (ovstream commits)"
        )
    return {
        "ok": True,
        "compacted": True,
        "reason": "phase2_pending" if phase2_pending else "commit_completed",
        "result": {
            "summary": summary,
            "firstKeptEntryId": first_kept,
            "tokensBefore": tokens_before,
            "tokensAfter": tokens_after,
            "details": details,
        },
    }
