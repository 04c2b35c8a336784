"""Commits on RQ: ``commit_session`` then ``poll_phase2`` until phase 2 ends.

A commit is asked for with ``request_commit`` (capture at the threshold,
compact, memory_store). Each session has at most one commit in flight: its
request sits in ``Keys.commit_inflight`` until an outcome is final, and asking
again returns it. Every request takes the next number of the session's
``Keys.commit_generation``; the RQ job id is ``commit_<hash of scope and
session>_<generation>``, so a finished commit never blocks the next one.

``commit_session`` first takes its OV tenant's lock (workers.store.tenant_lock: OV
0.5.2 loses the memories of one user's overlapping phase 2s), scheduling
itself again after ``commit_tenant_wait_s`` while another commit holds it;
then it calls OV's commit (phase 1, archiving) and schedules
``poll_phase2`` with ``queue.enqueue_in``; each poll reads the task once and
schedules the next (the wait doubling while reads fail: an OV restart must not
fail a commit OV completes) until OV reports a final state or
``phase2_deadline_s`` passes. The outcome (completed / failed / timeout /
skipped) is written to ``Keys.commits`` — the record of truth, the first final
outcome wins, except that a ``timeout`` is read again later
(``PHASE2_RECHECK_DELAYS_S``) and replaced by the state OV reports then — and
appended to ``Keys.commit_outcomes()``; recording it releases the tenant's lock.

The jobs are named by their RQ function path (``COMMIT_JOB``, ``POLL_JOB``;
bodies in ``workers.commits.run``), so capture and the RPC ask for commits
through this store without importing the commit workers. Jobs carry the request
and the deployment's ``key_prefix``; the worker process supplies the settings
(``workers.commits.context``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import redis as redis_lib
from rq import Queue, Retry
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus

from core.config import Settings
from core.defaults import COMMIT_RETRY_INTERVALS_S, PHASE2_READ_BACKOFF_MAX_S, PHASE2_RECHECK_DELAYS_S
from core.events import CommitOutcome, CommitRequest, CommitStatus, decode, encode
from core.ov.tasks import next_read_delay
from core.session import SessionAddress
from workers.store import tenant_lock
from workers.store.commit_records import FINAL_STATUSES, CommitRecords, final_or_timeout, load_outcome, outcome_of
from workers.store.connection import optional_text, queue_client
from workers.store.keys import Keys, session_keys

log = logging.getLogger(__name__)

COMMIT_RETRY = Retry(max=len(COMMIT_RETRY_INTERVALS_S), interval=list(COMMIT_RETRY_INTERVALS_S))
"""RQ retries of a commit whose OV call found OV down (``core.defaults.COMMIT_RETRY_INTERVALS_S``)."""
COMMIT_JOB = "workers.commits.run.commit_session"
POLL_JOB = "workers.commits.run.poll_phase2"
RECHECK_JOB = "workers.commits.run.recheck_phase2"
"""RQ function paths of the jobs (by name, so this module needs not import them)."""
_LIVE_JOB_STATUSES = frozenset(
    {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.SCHEDULED, JobStatus.DEFERRED, JobStatus.CREATED}
)

_clock: Callable[[], float] = time.time


def set_clock(clock: Callable[[], float] | None) -> None:
    """Replace the clock phase-2 deadlines are judged by (tests); None restores ``time.time``."""
    global _clock
    _clock = clock or time.time


def now() -> float:
    """The time phase-2 deadlines and outcome stamps use (``set_clock`` replaces it)."""
    return _clock()


# --- records ---------------------------------------------------------------------------


def commit_job_id(key_prefix: str, scope: str, ov_session_id: str, generation: int) -> str:
    """RQ job id of a session's commit (RQ allows only ``[A-Za-z0-9_-]``). RQ's job keys are
    global to the Redis, so the deployment's ``key_prefix`` is part of the id."""
    digest = hashlib.sha256(f"{key_prefix}\x00{scope}\x00{ov_session_id}".encode()).hexdigest()[:24]
    return f"commit_{digest}_{generation}"


def _poll_job_id(request: CommitRequest, attempt: int) -> str:
    return f"{request.commit_id}_poll{attempt}"


def commit_queue(redis: redis_lib.Redis, settings: Settings) -> Queue:
    """The RQ commit queue, bound to the queue's Redis (``queue_client`` of the store ``redis``)."""
    return Queue(settings.commit_queue_name, connection=queue_client(redis, settings))


def _inflight_key(settings: Settings, request: CommitRequest) -> str:
    return session_keys(settings, request.address).commit_inflight


def record_outcome(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, outcome: CommitOutcome) -> bool:
    """Record ``outcome`` (``CommitRecords.record``); a final one releases the tenant's lock."""
    stored = CommitRecords(redis, settings).record(request, outcome)
    if stored and outcome.status in FINAL_STATUSES:
        tenant_lock.release(redis, settings, request)  # the tenant's next phase 2 may start
    return stored


def finish_commit(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    status: CommitStatus,
    base: CommitOutcome | None = None,
    **fields: Any,
) -> CommitOutcome:
    carried = (
        {} if base is None else {"task_id": base.task_id, "archive_uri": base.archive_uri, "archived": base.archived}
    )
    outcome = outcome_of(request, status, finished_at=now(), **{**carried, **fields})
    record_outcome(redis, settings, request, outcome)
    return CommitRecords(redis, settings).outcome(request) or outcome


# --- the public API -----------------------------------------------------------------------


def job_state(redis: redis_lib.Redis, settings: Settings, job_id: str | None) -> tuple[str, Job | None]:
    """ "live", "crashed" (the job raised), "lost" (gone, ended without an outcome, or started
    by a worker that is dead: ``Keys.commit_worker``) or "stranded": queued but on no queue
    (dequeued by a worker that died before starting it) or scheduled but in no schedule. A
    job is stranded for a moment on its way too, so only a second look (workers.store.
    commit_sweep) takes a stranded job for lost."""
    if not job_id:
        return "lost", None
    queue = commit_queue(redis, settings)
    try:
        job = Job.fetch(job_id, connection=queue.connection)
    except NoSuchJobError:
        return "lost", None
    status = job.get_status(refresh=False)
    if status not in _LIVE_JOB_STATUSES:
        return ("crashed" if status == JobStatus.FAILED else "lost"), job
    if status == JobStatus.QUEUED and queue.connection.lpos(queue.key, job_id) is None:
        return "stranded", job
    if status == JobStatus.SCHEDULED and queue.connection.zscore(queue.scheduled_job_registry.key, job_id) is None:
        return "stranded", job
    if status == JobStatus.STARTED and job.worker_name and not _beating(redis, settings, job.worker_name):
        return "lost", job
    return "live", job


def _beating(redis: redis_lib.Redis, settings: Settings, worker_name: str) -> bool:
    return bool(redis.exists(Keys(settings.key_prefix).commit_worker(worker_name)))


def fail_crashed(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, outcome: CommitOutcome | None, job: Job | None
) -> CommitOutcome:
    """Record the commit whose job raised (``job_state`` "crashed") as failed, with the error."""
    return finish_commit(redis, settings, request, "failed", outcome, error=f"job crashed: {_job_error(job)}")


def resume(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, outcome: CommitOutcome | None) -> None:
    """Put a lost in-flight commit back on the queue at the step it had reached (under a new
    job id: the lost job's may still exist)."""
    if outcome is not None and outcome.task_id:
        log.warning("commit %s lost its poll job; scheduling a new poll", request.commit_id)
        schedule_poll(
            redis,
            settings,
            request,
            deadline_at=now() + settings.phase2_deadline_s,
            failed_reads=0,
            attempt=int(now() * 1000),
        )
    else:
        log.warning("commit %s lost its job; enqueueing it again", request.commit_id)
        job_id = f"{request.commit_id}_again{int(now() * 1000)}"
        redis.hset(_inflight_key(settings, request), "job", job_id)
        _enqueue_commit(redis, settings, request, job_id=job_id)


def request_commit(
    redis: redis_lib.Redis, settings: Settings, address: SessionAddress, *, reason: str, keep_recent_count: int
) -> CommitRequest:
    """Enqueue a commit of the session, or return the one already in flight."""
    ks = session_keys(settings, address)
    with redis.pipeline(transaction=True) as pipe:  # WATCH: the cluster client asks for it by name
        while True:
            try:
                pipe.watch(ks.commit_inflight, ks.commit_generation)
                raw_req, job_id = pipe.hmget(ks.commit_inflight, "req", "job")
                if raw_req is not None:
                    current = decode(raw_req, CommitRequest)
                    outcome = load_outcome(pipe, ks.commits, current.commit_id)
                    if outcome is None or outcome.status not in FINAL_STATUSES:
                        pipe.reset()
                        state, job = job_state(redis, settings, optional_text(job_id))
                        if state in ("live", "stranded"):  # a stranded one is the sweep's
                            return current
                        if state == "lost":
                            resume(redis, settings, current, outcome)
                            return current
                        fail_crashed(redis, settings, current, outcome, job)
                        continue
                generation = int(pipe.get(ks.commit_generation) or 0) + 1
                request = CommitRequest(
                    commit_id=commit_job_id(settings.key_prefix, ks.scope, address.ov_session_id, generation),
                    ov_session_id=address.ov_session_id,
                    agent_id=address.agent_id,
                    user=address.tenant,
                    reason=reason,  # type: ignore[arg-type]
                    keep_recent_count=keep_recent_count,
                    generation=generation,
                    requested_at=now(),
                )
                # indexed first (another slot, so not in this MULTI): a sweep finds it if its job dies
                redis.zadd(Keys(settings.key_prefix).commits_in_flight(), {ks.commit_inflight: now()})
                pipe.multi()
                pipe.set(ks.commit_generation, generation)
                pipe.hset(ks.commit_inflight, mapping={"req": encode(request), "job": request.commit_id})
                pipe.hset(ks.commits, request.commit_id, encode(outcome_of(request, "pending")))
                pipe.execute()
                break
            except redis_lib.WatchError:
                continue
    _enqueue_commit(redis, settings, request)
    log.info(
        "commit %s of session %s requested (%s, keep %d)",
        request.commit_id,
        address.ov_session_id,
        reason,
        keep_recent_count,
    )
    return request


def wait_commit_outcome(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, timeout_s: float, *, poll_s: float = 0.05
) -> CommitOutcome:
    """The final outcome of ``request``; a (not recorded) timeout outcome if none within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    records = CommitRecords(redis, settings)
    while True:
        outcome = records.outcome(request)
        remaining = deadline - time.monotonic()
        if (outcome is not None and outcome.status in FINAL_STATUSES) or remaining <= 0:
            return final_or_timeout(request, outcome, timeout_s)
        time.sleep(min(poll_s, remaining))


# --- enqueueing ---------------------------------------------------------------------------------


def _enqueue_commit(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, *, job_id: str | None = None
) -> None:
    try:
        commit_queue(redis, settings).enqueue(
            COMMIT_JOB,
            encode(request).decode(),
            settings.key_prefix,
            job_id=job_id or request.commit_id,
            unique=True,
            retry=COMMIT_RETRY,
            description=f"commit {request.ov_session_id} ({request.reason})",
        )
    except DuplicateJobError:
        log.debug("commit job %s already exists", request.commit_id)


def _schedule(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    job_id: str,
    delay_s: float,
    func: str,
    *args: Any,
    in_flight: bool = True,
    **options: Any,
) -> None:
    """Enqueue ``func(request, key_prefix, *args)`` after ``delay_s``.

    For a commit in flight the slot names the job before it exists, so a reader
    never sees a finished job there while the chain is alive; a missing one is
    re-created. A recheck of a finished commit (``in_flight=False``) leaves the
    slot alone: it may belong to the session's next commit by then.
    """
    if in_flight:
        redis.hset(_inflight_key(settings, request), "job", job_id)
    try:
        commit_queue(redis, settings).enqueue_in(
            timedelta(seconds=delay_s),
            func,
            encode(request).decode(),
            settings.key_prefix,
            *args,
            job_id=job_id,
            unique=True,
            **options,
        )
    except DuplicateJobError:
        log.debug("job %s already exists", job_id)


def schedule_poll(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    *,
    deadline_at: float,
    failed_reads: int,
    attempt: int,
) -> None:
    """Read the phase-2 task again: after ``phase2_poll_interval_s``, doubled per failed read."""
    _schedule(
        redis,
        settings,
        request,
        _poll_job_id(request, attempt),
        next_read_delay(
            settings.phase2_poll_interval_s, failed_reads, settings.phase2_read_retries, PHASE2_READ_BACKOFF_MAX_S
        ),
        POLL_JOB,
        deadline_at,
        failed_reads,
        attempt,
        description=f"poll phase 2 of {request.commit_id}",
    )


def schedule_commit_retry(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, *, attempt: int) -> None:
    """Run ``commit_session`` again after ``commit_tenant_wait_s`` (its tenant's lock was held)."""
    _schedule(
        redis,
        settings,
        request,
        f"{request.commit_id}_wait{attempt}",
        settings.commit_tenant_wait_s,
        COMMIT_JOB,
        attempt,
        retry=COMMIT_RETRY,
        description=f"commit {request.ov_session_id} ({request.reason}), waiting for its tenant",
    )


def _job_error(job: Job | None) -> str:
    """The last line of the exception a failed job raised ("unknown" when none is kept)."""
    if job is None:
        return "unknown"
    try:
        result = job.latest_result()
        text = (result.exc_string or "").strip() if result is not None else ""
    except Exception:  # an unreadable result must not hide the failure itself
        text = ""
    return text.splitlines()[-1] if text else "unknown"


def schedule_recheck(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, *, round_: int) -> bool:
    """Read a timed-out commit's task again after ``PHASE2_RECHECK_DELAYS_S[round_]``;
    False when every recheck was spent."""
    if round_ >= len(PHASE2_RECHECK_DELAYS_S):
        return False
    _schedule(
        redis,
        settings,
        request,
        f"{request.commit_id}_recheck{round_}",
        PHASE2_RECHECK_DELAYS_S[round_],
        RECHECK_JOB,
        round_,
        in_flight=False,
        description=f"recheck phase 2 of {request.commit_id} (timed out)",
    )
    return True
