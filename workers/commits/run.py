"""The two RQ jobs of a commit: ``commit_session`` and ``poll_phase2``.

Both are idempotent against their record in ``Keys.commits``: a job run again
(RQ retry, a re-enqueued lost job) looks at the recorded outcome first and
does only what is left. ``run_commit`` / ``run_poll`` are the bodies, callable
without a worker (tests drive them with a fake clock, see ``commit_queue.set_clock``).
Each job finds its process's ``JobContext`` (settings, event loop, OV pool) by
the ``key_prefix`` it carries.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import redis as redis_lib
from rq import get_current_job

from core.config import Settings
from core.events import CommitOutcome, CommitRequest, decode
from core.ov.client import OVClient, OVError, OVUnavailable
from core.ov.models import CommitAccepted
from core.ov.tasks import judge_phase2_read, task_verdict
from workers import logs
from workers.commits.context import JobContext, context_for
from workers.store import commit_queue as jobs
from workers.store import tenant_lock as jobs_tenant
from workers.store.commit_queue import finish_commit, record_outcome
from workers.store.commit_records import FINAL_STATUSES, CommitRecords, outcome_of
from workers.store.connection import REDIS_ERRORS, redis_went_away
from workers.store.snapshots import refresh_snapshot, snapshot_key

log = logging.getLogger(__name__)

REDIS_PATIENCE_S = 120.0
"""How long a commit OV accepted waits for Redis to record it before its job gives up."""


def commit_session(request_json: str, key_prefix: str, attempt: int = 0) -> str:
    """RQ job: commit the session in OV and schedule the phase-2 poll. Returns the status.

    ``attempt`` counts the times it found its tenant's lock held and scheduled itself again.
    """
    job = get_current_job()
    request = decode(request_json, CommitRequest)
    with _logged_as(request):
        ctx = context_for(key_prefix)
        return _patiently(
            request,
            lambda: run_commit(ctx.store, ctx, request, may_retry=bool(job and job.retries_left), attempt=attempt),
        ).status


def poll_phase2(request_json: str, key_prefix: str, deadline_at: float, failed_reads: int, attempt: int) -> str:
    """RQ job: read the phase-2 task once; record a final outcome or schedule the next read."""
    request = decode(request_json, CommitRequest)
    with _logged_as(request):
        ctx = context_for(key_prefix)
        return _patiently(
            request,
            lambda: run_poll(
                ctx.store, ctx, request, deadline_at=deadline_at, failed_reads=failed_reads, attempt=attempt
            ),
        ).status


def recheck_phase2(request_json: str, key_prefix: str, round_: int) -> str:
    """RQ job: read a timed-out commit's task once more; correct the record when OV says it ended."""
    request = decode(request_json, CommitRequest)
    with _logged_as(request):
        ctx = context_for(key_prefix)
        return _patiently(request, lambda: run_recheck(ctx.store, ctx, request, round_=round_)).status


def _logged_as(request: CommitRequest) -> AbstractContextManager[None]:
    """Every line a job logs names its commit and session (workers.logs)."""
    return logs.fields(session=request.ov_session_id, commit_id=request.commit_id)


def run_commit(
    redis: redis_lib.Redis, ctx: JobContext, request: CommitRequest, *, may_retry: bool = False, attempt: int = 0
) -> CommitOutcome:
    """Phase 1 of a commit (OV archives the messages); then the first poll is scheduled.

    Only one commit per OV tenant runs at a time (workers.store.tenant_lock): with the
    tenant's lock held by another, this schedules itself again and returns the
    pending outcome. ``may_retry``: OV being unavailable re-raises so RQ
    retries the job (the commit never reached OV); otherwise it is recorded as failed.
    """
    settings = ctx.settings
    outcome = CommitRecords(redis, settings).outcome(request)
    if outcome is not None and outcome.status in FINAL_STATUSES:
        return outcome
    if outcome is not None and outcome.task_id:  # run again after OV took the commit: poll only
        jobs_tenant.hold(redis, settings, request)  # renewed when still ours (its phase 2 runs)
        jobs.schedule_poll(
            redis, settings, request, deadline_at=jobs.now() + settings.phase2_deadline_s, failed_reads=0, attempt=1
        )
        return outcome
    if not jobs_tenant.hold(redis, settings, request):
        log.info(
            "commit %s waits: tenant %s has a phase 2 running (%s)",
            request.commit_id,
            jobs_tenant.tenant_of(settings, request.user),
            jobs_tenant.holder(redis, settings, request),
        )
        jobs.schedule_commit_retry(redis, settings, request, attempt=attempt + 1)
        return outcome or outcome_of(request, "pending")
    ov = ctx.ov(request.address)
    try:
        before = ctx.run(lambda: _commit_count(ov, request))
        sent_at = outcome.ov_commits_before if outcome is not None else None
        if sent_at is not None and before > sent_at:
            # run again after a crash between OV's answer and its record: OV took it, adopt it
            accepted = ctx.run(lambda: _adopt(ov, request, sent_at))
        else:
            record_outcome(redis, settings, request, outcome_of(request, "running", ov_commits_before=before))
            accepted = ctx.run(lambda: _commit(ov, request))
    except OVUnavailable as exc:
        if may_retry:
            log.warning("commit %s: OV unavailable (%s); RQ retries it", request.commit_id, exc)
            jobs_tenant.release(redis, settings, request)  # OV never took it: others may go meanwhile
            raise
        return finish_commit(redis, settings, request, "failed", error=f"OV unavailable: {exc}")
    except OVError as exc:
        return finish_commit(redis, settings, request, "failed", error=str(exc))
    except Exception:
        jobs_tenant.release(redis, settings, request)  # the job fails; its tenant must not wait on it
        raise
    # OV took the commit. Nothing may make RQ run this job again now: a second OV commit would
    # archive the next messages too. So Redis trouble is waited out here, not raised.
    outcome = _patiently(request, lambda: _accepted(redis, settings, request, accepted))
    if accepted.status != "skipped":  # phase 1 moved messages into an archive
        ctx.run(lambda: _refresh_quietly(ctx, ov, request))
    return outcome


async def _commit_count(ov: OVClient, request: CommitRequest) -> int:
    try:
        return (await ov.get_session(request.ov_session_id)).commit_count
    except OVError as exc:
        if exc.status == 404:  # not in OV yet: its commit will say so
            return 0
        raise


async def _adopt(ov: OVClient, request: CommitRequest, before: int) -> CommitAccepted:
    """What OV's answer to this commit was: its archive is the one after ``before``, its
    phase 2 the session's newest commit task (one commit per session is in flight)."""
    state = await ov.get_session(request.ov_session_id)
    tasks = await ov.session_commit_tasks(request.ov_session_id, limit=5)
    log.warning(
        "commit %s: OV took it before the crash (%d -> %d commits); adopting task %s",
        request.commit_id,
        before,
        state.commit_count,
        tasks[0].task_id if tasks else None,
    )
    archive = f"{state.uri}/history/archive_{before + 1:03d}" if state.uri else None
    return CommitAccepted(task_id=tasks[0].task_id if tasks else None, archive_uri=archive, archived=True)


async def _commit(ov: OVClient, request: CommitRequest) -> CommitAccepted:
    keep = request.keep_recent_count
    return await ov.commit(request.ov_session_id, keep_recent_count=keep, enable_working_memory=True)


def _accepted(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, accepted: CommitAccepted
) -> CommitOutcome:
    """Record what OV's commit answer says; schedule the first poll when phase 2 runs."""
    if accepted.status == "skipped":
        return finish_commit(
            redis, settings, request, "skipped", error=f"skipped: {accepted.reason or 'no reason given'}"
        )
    fields: dict[str, Any] = {
        "task_id": accepted.task_id,
        "archive_uri": accepted.archive_uri,
        "archived": accepted.archived,
    }
    if not accepted.task_id:  # nothing runs in phase 2
        return finish_commit(redis, settings, request, "completed", **fields)
    running = outcome_of(request, "running", **fields)
    record_outcome(redis, settings, request, running)
    jobs_tenant.hold(redis, settings, request)  # renewed: phase 2's deadline starts now
    jobs.schedule_poll(
        redis, settings, request, deadline_at=jobs.now() + settings.phase2_deadline_s, failed_reads=0, attempt=1
    )
    return running


def _patiently(request: CommitRequest, step: Callable[[], CommitOutcome]) -> CommitOutcome:
    """``step()`` again while Redis is unreachable (each part of it is idempotent against the
    commit's record), for up to ``REDIS_PATIENCE_S``; a Redis restart takes seconds. A job
    body runs this way too: with the commit queue on a Redis of its own (``queueRedisUrl``),
    RQ would otherwise record the job as failed while only the store is away, and the sweep
    would take that for a crash and fail the commit."""
    deadline, delay = time.monotonic() + REDIS_PATIENCE_S, 0.2
    while True:
        try:
            return step()
        except Exception as exc:
            if not redis_went_away(exc) or time.monotonic() > deadline:
                raise
            log.warning("commit %s: Redis away (%s); going on in %.1fs", request.commit_id, exc, delay)
            time.sleep(delay)
            delay = min(5.0, delay * 2)


async def _refresh_quietly(ctx: JobContext, ov: OVClient, request: CommitRequest) -> None:
    try:
        await refresh_snapshot(ctx.redis, ov, ctx.settings, request.address)
    except OVError as exc:
        # The commit stands. The stored snapshot predates it, and capture must not grow it
        # (core.snapshot_growth trusts it): drop it, so the next read goes to OV.
        log.warning("snapshot of %s not refreshed after commit (%s); dropped", request.ov_session_id, exc)
        with contextlib.suppress(*REDIS_ERRORS):  # Redis away too: the count check is left
            await ctx.redis.delete(snapshot_key(ctx.settings, request.address))
    except REDIS_ERRORS as exc:  # nothing stored, nothing stale: the next batch reads OV
        log.warning("snapshot of %s not refreshed after commit: %s", request.ov_session_id, exc)


def run_poll(
    redis: redis_lib.Redis,
    ctx: JobContext,
    request: CommitRequest,
    *,
    deadline_at: float,
    failed_reads: int,
    attempt: int,
) -> CommitOutcome:
    """One read of the phase-2 task: record the final outcome, or schedule the next read."""
    settings = ctx.settings
    outcome = CommitRecords(redis, settings).outcome(request)
    if outcome is None or outcome.status in FINAL_STATUSES or not outcome.task_id:
        return outcome or outcome_of(request, "pending")
    task_id, task, error = outcome.task_id, None, None
    try:
        task = ctx.run(lambda: _read_task(ctx, request, task_id))
    except OVError as exc:
        error = exc
        log.info("commit %s: task read %d failed (%s)", request.commit_id, failed_reads + 1, exc)
    read = judge_phase2_read(
        task,
        error,
        failed_reads=failed_reads,
        deadline_passed=jobs.now() >= deadline_at,
        deadline_s=settings.phase2_deadline_s,
    )
    if read.status is not None:
        final = finish_commit(redis, settings, request, read.status, outcome, **read.fields)
        if final.status == "timeout":  # OV may still finish it: look again later
            jobs.schedule_recheck(redis, settings, request, round_=0)
        return final
    failed_reads = read.failed_reads
    jobs.schedule_poll(
        redis, settings, request, deadline_at=deadline_at, failed_reads=failed_reads, attempt=attempt + 1
    )
    return outcome


def run_recheck(redis: redis_lib.Redis, ctx: JobContext, request: CommitRequest, *, round_: int) -> CommitOutcome:
    """A timed-out commit's task read again: a final state OV reports replaces the timeout,
    so the record ends matching OV; otherwise the next recheck is scheduled."""
    records = CommitRecords(redis, ctx.settings)
    outcome = records.outcome(request)
    if outcome is None or outcome.status != "timeout" or not outcome.task_id:
        return outcome or outcome_of(request, "pending")
    task_id = outcome.task_id
    try:
        verdict = task_verdict(ctx.run(lambda: _read_task(ctx, request, task_id)))
    except OVError as exc:
        log.info("commit %s: recheck %d could not read the task: %s", request.commit_id, round_, exc)
        verdict = None
    if verdict is not None:
        status, fields = verdict
        carried = {"task_id": task_id, "archive_uri": outcome.archive_uri, "archived": outcome.archived}
        corrected = outcome_of(request, status, finished_at=jobs.now(), **{**carried, **fields})
        records.correct_timeout(request, corrected)
        return records.outcome(request) or corrected
    if not jobs.schedule_recheck(redis, ctx.settings, request, round_=round_ + 1):
        log.warning("commit %s: phase 2 still unfinished after every recheck; it stays timeout", request.commit_id)
    return outcome


async def _read_task(ctx: JobContext, request: CommitRequest, task_id: str) -> Any:
    ov = ctx.ov(request.address)
    task = await ov.get_task(task_id)
    if task.status == "completed":  # the archive overview exists now
        await _refresh_quietly(ctx, ov, request)
    return task
