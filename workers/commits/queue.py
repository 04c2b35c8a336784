"""The commit queue on RQ: the queue, its job ids, the jobs' clock, and what a job's state means.

Every commit of a session takes the next number of the session's ``Keys.commit_generation``
(``request.next_generation``);
its RQ job id is ``commit_<hash of scope and session>_<generation>`` (``commit_job_id``), so
a finished commit never blocks the next one. RQ's job keys are global to the Redis, so the
deployment's ``key_prefix`` is part of the id.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import redis as redis_lib
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from core.config import Settings
from core.defaults import COMMIT_RETRY_INTERVALS_S, FOLLOW_UP_RETRY_INTERVALS_S
from core.events import CommitRequest
from core.queue_routing import queue_index
from core.session import SessionAddress
from workers.commits.lines import CommitLines, CommitQueue
from workers.commits.phase2_due import due_reads
from workers.store.connection import queue_client
from workers.store.keys import Keys, session_keys

COMMIT_RETRY = Retry(max=len(COMMIT_RETRY_INTERVALS_S), interval=list(COMMIT_RETRY_INTERVALS_S))
"""RQ retries of a commit whose OV call found OV down (``core.defaults.COMMIT_RETRY_INTERVALS_S``)."""
FOLLOW_UP_RETRY = Retry(max=len(FOLLOW_UP_RETRY_INTERVALS_S), interval=list(FOLLOW_UP_RETRY_INTERVALS_S))
"""RQ retries of the jobs scheduled after phase 1 (``core.defaults.FOLLOW_UP_RETRY_INTERVALS_S``)."""
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


def commit_job_id(key_prefix: str, scope: str, ov_session_id: str, generation: int) -> str:
    """RQ job id of a session's commit (RQ allows only ``[A-Za-z0-9_-]``). RQ's job keys are
    global to the Redis, so the deployment's ``key_prefix`` is part of the id."""
    digest = hashlib.sha256(f"{key_prefix}\x00{scope}\x00{ov_session_id}".encode()).hexdigest()[:24]
    return f"commit_{digest}_{generation}"


def commit_queue(redis: redis_lib.Redis, settings: Settings, index: int = 0) -> Queue:
    """The RQ commit queue ``index`` (of ``queue_redis_urls``), bound to its Redis
    (``queue_client`` of the store ``redis``): its registries, and its own list (the legacy
    line: workers.commits.lines)."""
    return CommitQueue(settings.commit_queue_name, connection=queue_client(redis, settings, index))


def commit_lines(redis: redis_lib.Redis, settings: Settings, index: int = 0) -> CommitLines:
    """The lines of commit queue ``index`` (workers.commits.lines), on its Redis."""
    return CommitLines(queue_client(redis, settings, index), settings)


def queue_of(settings: Settings, address: SessionAddress) -> int:
    """The commit queue of the session at ``address`` (core.queue_routing): its commit jobs,
    and every job that follows one of them, go there."""
    return queue_index(session_keys(settings, address).scope, address.ov_session_id, len(settings.queue_urls))


def job_counts(redis: redis_lib.Redis, settings: Settings) -> dict[str, int]:
    """The commit queues' jobs by state, every queue Redis together: queued (in every line),
    scheduled, running, failed (each given up after its RQ retries; kept in RQ's failed
    registry for an operator), and the phase-2 reads waiting in the due set (``polling``: no
    jobs, workers.commits.phase2_due)."""
    counts = {"queued": 0, "scheduled": 0, "running": 0, "failed": 0}
    for index in range(len(settings.queue_urls)):
        queue = commit_queue(redis, settings, index)
        counts["queued"] += commit_lines(redis, settings, index).queued()
        counts["scheduled"] += queue.scheduled_job_registry.count
        counts["running"] += queue.started_job_registry.count
        counts["failed"] += queue.failed_job_registry.count
    return {**counts, "polling": due_reads(redis, settings)}


def inflight_key(settings: Settings, request: CommitRequest) -> str:
    """The session's in-flight slot: the request of its commit in flight and the job it is at."""
    return session_keys(settings, request.address).commit_inflight


def job_state(redis: redis_lib.Redis, settings: Settings, job_id: str | None, index: int = 0) -> tuple[str, Job | None]:
    """ "live", "crashed" (the job raised), "lost" (gone, ended without an outcome, or started
    by a worker that is dead: ``Keys.commit_worker``) or "stranded": queued but on no line
    (dequeued by a worker that died before starting it; or on a line no worker reads:
    workers.commits.lines) or scheduled but in no schedule. A
    job is stranded for a moment on its way too, so only a second look (workers.commits.
    sweep) takes a stranded job for lost. ``index``: the queue the job's session's jobs go to
    (``queue_of``)."""
    if not job_id:
        return "lost", None
    found = _fetch(redis, settings, job_id, index)
    if found is None:
        return "lost", None
    job, index = found
    queue = commit_queue(redis, settings, index)
    status = job.get_status(refresh=False)
    if status not in _LIVE_JOB_STATUSES:
        return ("crashed" if status == JobStatus.FAILED else "lost"), job
    if status == JobStatus.QUEUED and not commit_lines(redis, settings, index).holds(job):
        return "stranded", job
    if status == JobStatus.SCHEDULED and queue.connection.zscore(queue.scheduled_job_registry.key, job_id) is None:
        return "stranded", job
    if status == JobStatus.STARTED and job.worker_name and not _beating(redis, settings, job.worker_name):
        return "lost", job
    return "live", job


def _fetch(redis: redis_lib.Redis, settings: Settings, job_id: str, index: int) -> tuple[Job, int] | None:
    """The job and the queue it is on: the session's queue first, then each other (a Redis
    appended to ``queue_redis_urls`` since the job was put on its queue takes the session's
    next commits, not the jobs it has)."""
    for i in [index, *(i for i in range(len(settings.queue_urls)) if i != index)]:
        try:
            return Job.fetch(job_id, connection=queue_client(redis, settings, i)), i
        except NoSuchJobError:
            continue
    return None


def _beating(redis: redis_lib.Redis, settings: Settings, worker_name: str) -> bool:
    return bool(redis.exists(Keys(settings.key_prefix).commit_worker(worker_name)))


def job_error(job: Job | None) -> str:
    """The last line of the exception a failed job raised ("unknown" when none is kept)."""
    if job is None:
        return "unknown"
    try:
        result = job.latest_result()
        text = (result.exc_string or "").strip() if result is not None else ""
    except Exception:  # an unreadable result must not hide the failure itself
        text = ""
    return text.splitlines()[-1] if text else "unknown"
