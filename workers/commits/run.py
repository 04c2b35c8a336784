"""A commit's RQ job ``commit_session`` and its phase-2 reads (``read_phase2``, made by each
worker's poller: workers.commits.poller; ``poll_phase2``, the job an earlier release scheduled
per read, still runs), and the timeout's ``recheck_phase2``.

Each is idempotent against its record in ``Keys.commits``: a job run again
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
from typing import Any, TypeVar

import redis as redis_lib
from rq import get_current_job

from core.backoff import Backoff
from core.config import Settings
from core.events import CommitOutcome, CommitRequest, CommitStatus, decode
from core.ov.client import OVError, OVUnavailable
from core.ov.envelope import is_passing
from core.ov.models import CommitAccepted
from core.ov.tasks import judge_phase2_read, task_verdict
from workers import logs
from workers.commits import ov_steps
from workers.commits.context import JobContext, context_for
from workers.commits.phase2_due import PollState
from workers.commits.queue import now
from workers.commits.records import FINAL_STATUSES, CommitRecords, outcome_of, reached
from workers.commits.schedule import first_read, follow_up, schedule_poll, schedule_recheck
from workers.store.connection import REDIS_ERRORS, redis_went_away

log = logging.getLogger(__name__)

T = TypeVar("T")

REDIS_PATIENCE_S = 120.0
"""How long a commit OV accepted waits for Redis to record it before its job gives up."""
REDIS_PATIENCE_BACKOFF = Backoff(0.2, 1.0)
"""The waits between its tries (core.backoff)."""


def commit_session(request_json: str, key_prefix: str, attempt: int = 0) -> str:
    """RQ job: commit the session in OV and schedule the phase-2 poll. Returns the status.

    ``attempt`` is unused: jobs enqueued by earlier versions carry it.
    """
    job = get_current_job()
    request = decode(request_json, CommitRequest)
    with _logged_as(request):
        ctx = context_for(key_prefix)
        return patiently(
            request,
            lambda: run_commit(ctx.store, ctx, request, may_retry=bool(job and job.retries_left)),
        ).status


def poll_phase2(request_json: str, key_prefix: str, deadline_at: float, failed_reads: int, attempt: int) -> str:
    """RQ job: read the phase-2 task once; record a final outcome or schedule the next read."""
    request = decode(request_json, CommitRequest)
    with _logged_as(request):
        ctx = context_for(key_prefix)
        return patiently(
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
        return patiently(request, lambda: run_recheck(ctx.store, ctx, request, round_=round_)).status


def _logged_as(request: CommitRequest) -> AbstractContextManager[None]:
    """Every line a job logs names its commit and session (workers.logs)."""
    return logs.fields(session=request.ov_session_id, commit_id=request.commit_id)


def run_commit(
    redis: redis_lib.Redis, ctx: JobContext, request: CommitRequest, *, may_retry: bool = False
) -> CommitOutcome:
    """Phase 1 of a commit (OV archives the messages); then the first poll is scheduled.

    Commits of one OV user run side by side: OV 0.5.2 itself merges the phase 2s of one user
    that overlap (docs/OV-NOTES.md), and an extraction lost anyway is found and repaired
    (workers.commits.repair).
    ``may_retry``: OV's passing trouble (away, a server error, its own file read mid-write:
    ``is_passing``) re-raises so RQ retries the job (the next try adopts a commit OV took:
    ``ov_commits_before``); otherwise it is recorded as failed.
    """
    settings = ctx.settings
    outcome = CommitRecords(redis, settings).outcome_as_job_starts(request)
    if outcome is not None and outcome.status in FINAL_STATUSES:
        return outcome
    if outcome is not None and outcome.task_id:  # run again after OV took the commit: poll only
        schedule_poll(redis, settings, request, first_read(settings, outcome.task_id))
        return outcome
    ov = ctx.ov_sync(request.address)
    sending = False
    try:
        before = ov_steps.commit_count(ov, request)
        sent_at = outcome.ov_commits_before if outcome is not None else None
        if outcome is not None and outcome.phase1_sent_at and before == sent_at:
            # sent, unanswered as far as the record says: that send may still land
            before = ov_steps.count_after_earlier_send(
                ov, request, before, outcome.phase1_sent_at, settings.ov_timeout_s
            )
        if sent_at is not None and before > sent_at:
            # run again after a crash between OV's answer and its record: OV took it, adopt it
            accepted = ov_steps.adopt(ov, request, sent_at)
        else:
            running = outcome_of(request, "running", ov_commits_before=before, phase1_sent_at=now())
            record_outcome(redis, settings, request, running)
            sending = True
            accepted = ov_steps.commit(ov, request)
    except OVError as exc:
        if sending and not exc.in_flight:  # OV answered, or was never reached: the send is over
            with contextlib.suppress(*REDIS_ERRORS):  # left said: a next try waits out its deadline
                record_outcome(redis, settings, request, outcome_of(request, "running", ov_commits_before=before))
        if may_retry and is_passing(exc):  # away, a server error, OV's own file read mid-write
            log.warning(
                "commit %s: OV %s; RQ tries it again (OV's commit count says if it took it)", request.commit_id, exc
            )
            raise
        said = f"OV unavailable: {exc}" if isinstance(exc, OVUnavailable) else str(exc)
        return finish_commit(redis, settings, request, "failed", error=said)
    # OV took the commit. Nothing may make RQ run this job again now: a second OV commit would
    # archive the next messages too. So Redis trouble is waited out here, not raised.
    outcome = patiently(request, lambda: _accepted(redis, settings, request, accepted))
    if accepted.status != "skipped":  # phase 1 moved messages into an archive
        ov_steps.refresh_quietly(ctx, ov, request)
    return outcome


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
    records = CommitRecords(redis, settings)

    def record(pipe: Any) -> Any:  # sent with its first read's state: one round trip
        return records.queue_record(pipe, request, running)

    schedule_poll(redis, settings, request, first_read(settings, accepted.task_id), with_slot=record)
    return running


def patiently(request: CommitRequest, step: Callable[[], T]) -> T:
    """``step()`` again while Redis is unreachable (each part of it is idempotent against the
    commit's record), for up to ``REDIS_PATIENCE_S``; a Redis restart takes seconds. A job
    body runs this way too: with the commit queue on a Redis of its own (``queueRedisUrl``),
    RQ would otherwise record the job as failed while only the store is away, and the sweep
    would take that for a crash and fail the commit."""
    deadline, failures = time.monotonic() + REDIS_PATIENCE_S, 0
    while True:
        try:
            return step()
        except Exception as exc:
            if not redis_went_away(exc) or time.monotonic() > deadline:
                raise
            failures += 1
            delay = REDIS_PATIENCE_BACKOFF.delay(failures)
            log.log(
                logging.WARNING if failures == 1 else logging.DEBUG,  # one line per outage
                "commit %s: Redis away (%s); trying again every %.1fs or so until it answers",
                request.commit_id,
                exc,
                delay,
            )
            time.sleep(delay)


def run_poll(
    redis: redis_lib.Redis,
    ctx: JobContext,
    request: CommitRequest,
    *,
    deadline_at: float,
    failed_reads: int,
    attempt: int = 0,
) -> CommitOutcome:
    """One read of the phase-2 task (the RQ job ``poll_phase2`` an earlier release scheduled;
    ``attempt`` was its number): record the final outcome, or put the next read."""
    settings = ctx.settings
    outcome = CommitRecords(redis, settings).outcome(request)
    if outcome is None or not outcome.task_id:
        return outcome or outcome_of(request, "pending")
    if outcome.status in FINAL_STATUSES:
        # Run again (``patiently``: Redis went away after the record was made, before what
        # follows it was scheduled), or a poll left over: schedule what follows, once by its id.
        follow_up(redis, settings, request, outcome)
        return outcome
    state = PollState(deadline_at, failed_reads, outcome.task_id)
    return read_phase2(redis, ctx, request, state, outcome, in_slot=False) or outcome


def read_phase2(
    redis: redis_lib.Redis,
    ctx: JobContext,
    request: CommitRequest,
    state: PollState,
    outcome: CommitOutcome | None = None,
    *,
    in_slot: bool = True,
    later: dict[str, float] | None = None,
) -> CommitOutcome | None:
    """Read the task ``state`` names once: the final outcome it recorded (with what follows
    it), or None when the next read was put (workers.commits.phase2_due; into ``later`` when
    given, for its batch to write). The commit's record (``outcome``) is read only for a final
    one: a read from the due set needs nothing else.
    ``in_slot``: the slot holds ``state`` (a read from the due set); not so for a read an
    earlier release's poll job carried, whose next read is written into the slot whole."""
    settings, task_id = ctx.settings, state.task_id
    task, error = None, None
    try:
        task = ov_steps.read_task(ctx, request, task_id)
    except OVError as exc:
        error = exc
        log.info("commit %s: task read %d failed (%s)", request.commit_id, state.failed_reads + 1, exc)
    read = judge_phase2_read(
        task,
        error,
        failed_reads=state.failed_reads,
        deadline_passed=now() >= state.deadline_at,
        deadline_s=settings.phase2_deadline_s,
    )
    if read.status is None:
        after = PollState(state.deadline_at, read.failed_reads, task_id)
        schedule_poll(redis, settings, request, after, put=state if in_slot else None, later=later)
        return None
    base = outcome or CommitRecords(redis, settings).outcome(request)
    final = finish_commit(redis, settings, request, read.status, base, **read.fields)
    follow_up(redis, settings, request, final)
    return final


def run_recheck(redis: redis_lib.Redis, ctx: JobContext, request: CommitRequest, *, round_: int) -> CommitOutcome:
    """A timed-out commit's task read again: a final state OV reports replaces the timeout,
    so the record ends matching OV; otherwise the next recheck is scheduled."""
    records = CommitRecords(redis, ctx.settings)
    outcome = records.outcome(request)
    if outcome is None or outcome.status != "timeout" or not outcome.task_id:
        return outcome or outcome_of(request, "pending")
    task_id = outcome.task_id
    try:
        verdict = task_verdict(ov_steps.read_task(ctx, request, task_id))
    except OVError as exc:
        log.info("commit %s: recheck %d could not read the task: %s", request.commit_id, round_, exc)
        verdict = None
    if verdict is not None:
        status, fields = verdict
        corrected = outcome_of(request, status, finished_at=now(), **{**reached(outcome), **fields})
        records.correct_timeout(request, corrected)
        final = records.outcome(request) or corrected
        follow_up(redis, ctx.settings, request, final)  # a phase 2 that ended late is checked too
        return final
    if not schedule_recheck(redis, ctx.settings, request, round_=round_ + 1):
        log.warning("commit %s: phase 2 still unfinished after every recheck; it stays timeout", request.commit_id)
    return outcome


# --- the commit's record ------------------------------------------------------------------


def record_outcome(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, outcome: CommitOutcome) -> bool:
    """Record ``outcome`` (``CommitRecords.record``)."""
    return CommitRecords(redis, settings).record(request, outcome)


def finish_commit(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    status: CommitStatus,
    base: CommitOutcome | None = None,
    **fields: Any,
) -> CommitOutcome:
    carried = {} if base is None else reached(base)
    outcome = outcome_of(request, status, finished_at=now(), **{**carried, **fields})
    if record_outcome(redis, settings, request, outcome):
        return outcome
    return CommitRecords(redis, settings).outcome(request) or outcome  # the final stored before it
