"""The commit chain's next jobs: scheduled after a delay (a timeout's recheck, an extraction
check, a repair) or enqueued now (the commit), each once by its id; and the next phase-2 read
(an entry of the due set: workers.commits.phase2_due).

Each job is named by its dotted path (``workers.commits.run``, ``workers.commits.repair``,
``workers.commits.repair_pool``): those modules build on this one, and the path is the name
RQ stores (tests/unit/stored_names.txt).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import redis as redis_lib
from rq.exceptions import DuplicateJobError

from core.config import Settings
from core.defaults import PHASE2_READ_BACKOFF_MAX_S, PHASE2_RECHECK_DELAYS_S
from core.events import CommitOutcome, CommitRequest, encode
from core.ov.tasks import next_read_delay
from core.repair import is_repair_session
from workers.commits.lines import LINE_META, background_line, line_of_request
from workers.commits.phase2_due import PollState, put_poll
from workers.commits.queue import COMMIT_RETRY, FOLLOW_UP_RETRY, commit_lines, commit_queue, now, queue_of

log = logging.getLogger(__name__)


def follow_up(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, final: CommitOutcome) -> None:
    """What follows a final record: a timeout's first recheck (OV may still finish it), an
    extraction check of a commit that completed with no memory (lost, or nothing to extract)
    or of a repair's own commit (its verdict). Each job's id is fixed: scheduled again, it is
    not made twice."""
    if final.status == "timeout":
        schedule_recheck(redis, settings, request, round_=0)
    if (
        final.status == "completed"
        and final.archive_uri
        and (final.memories_extracted == 0 or is_repair_session(request.ov_session_id))
    ):
        schedule_extraction_check(redis, settings, request)


def schedule_job(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    job_id: str,
    delay_s: float,
    func: str,
    *args: Any,
    **options: Any,
) -> None:
    """Enqueue ``func(request, key_prefix, *args)`` after ``delay_s``: a look after the commit
    (a recheck, an extraction check, a repair). It leaves the in-flight slot alone: the slot
    may belong to the session's next commit by then."""
    try:
        commit_queue(redis, settings, queue_of(settings, request.address)).enqueue_in(
            timedelta(seconds=delay_s),
            func,  # its dotted path
            encode(request).decode(),
            settings.key_prefix,
            *args,
            job_id=job_id,
            unique=True,
            retry=FOLLOW_UP_RETRY,  # each is idempotent against the commit's record
            meta={LINE_META: background_line(request.user)},  # due, it goes on its tenant's background line
            **options,
        )
    except DuplicateJobError:
        log.debug("job %s already exists", job_id)


def first_read(settings: Settings, task_id: str) -> PollState:
    """The state of a phase 2's first read: its deadline ``phase2_deadline_s`` from now."""
    return PollState(now() + settings.phase2_deadline_s, 0, task_id)


def schedule_poll(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    state: PollState,
    *,
    put: PollState | None = None,
    later: dict[str, float] | None = None,
    with_slot: Callable[[Any], Any] | None = None,
) -> None:
    """Read the phase-2 task again: after ``phase2_poll_interval_s``, doubled per failed read.
    An entry of the due set, not an RQ job (workers.commits.phase2_due: why); ``put``: the
    state the slot holds already (the read made from it); ``later``: the batch's entries;
    ``with_slot``: a write sent with the slot's (``put_poll``)."""
    delay = next_read_delay(
        settings.phase2_poll_interval_s, state.failed_reads, settings.phase2_read_retries, PHASE2_READ_BACKOFF_MAX_S
    )
    due_at = time.time() + delay
    put_poll(redis, settings, request, due_at=due_at, state=state, written=put, later=later, with_slot=with_slot)


def schedule_recheck(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, *, round_: int) -> bool:
    """Read a timed-out commit's task again after ``PHASE2_RECHECK_DELAYS_S[round_]``;
    False when every recheck was spent."""
    if round_ >= len(PHASE2_RECHECK_DELAYS_S):
        return False
    schedule_job(
        redis,
        settings,
        request,
        f"{request.commit_id}_recheck{round_}",
        PHASE2_RECHECK_DELAYS_S[round_],
        "workers.commits.run.recheck_phase2",
        round_,
        description=f"recheck phase 2 of {request.commit_id} (timed out)",
    )
    return True


def schedule_extraction_check(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, delay_s: float = 0.0
) -> None:
    """Have ``workers.commits.repair.check_extraction`` look at a commit that completed with no
    memory, or a repair's commit, after ``delay_s`` (named by path: that module builds on this one)."""
    schedule_job(
        redis,
        settings,
        request,
        # a look again (delay_s > 0) is a job of its own: the one scheduling it still runs
        f"{request.commit_id}_extraction" + (f"{int(now() * 1000)}" if delay_s else ""),
        delay_s,
        "workers.commits.repair.check_extraction",
        description=f"check the extraction of {request.commit_id}",
    )


def enqueue_commit(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, *, job_id: str | None = None
) -> None:
    """Enqueue ``request``'s ``commit_session`` job (under ``job_id``, else its commit id) on its
    line (its tenant's, urgent or not: core.fairness) of its session's queue (``queue_of``)."""
    try:
        commit_lines(redis, settings, queue_of(settings, request.address)).enqueue(
            line_of_request(request),
            "workers.commits.run.commit_session",
            encode(request).decode(),
            settings.key_prefix,
            job_id=job_id or request.commit_id,
            unique=True,
            retry=COMMIT_RETRY,
            description=f"commit {request.ov_session_id} ({request.reason})",
        )
    except DuplicateJobError:
        log.debug("commit job %s already exists", request.commit_id)
