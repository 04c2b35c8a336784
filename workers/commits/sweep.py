"""In-flight commits whose job died are put back on the queue by any worker, within seconds.

A commit's chain of jobs (commit, polls) lives in RQ, and RQ recovers a job
lost with its worker only slowly, and as a failure: a job a SIGKILLed worker was running
stays "started" until RQ's maintenance notices (minutes), a job it had just dequeued sits in
RQ's intermediate list for a minute, and both then count as *failed* jobs, which would
record a commit as failed that OV may well have completed. Nobody asks for that session's
commit again unless the session crosses the threshold again.

So every commit in flight is indexed (``Keys.commits_in_flight``) and every worker's
due-job thread sweeps the index (each commit as often as workers.commits.looks says: every
``SWEEP_INTERVAL_S`` while its job runs, seldom while it waits): a commit whose job is gone, or
started by a worker whose heartbeat (``Keys.commit_worker``) lapsed, is resumed at the step
it had reached (``workers.commits.request.resume``); one whose job is stranded on its way (queued on
no queue, scheduled in no schedule) is resumed when it is still stranded at the next look;
one that ended owing another commit (``records.FOLLOW_REASON``) has that commit requested.
A script hands each entry to one sweeping worker at a time (``CLAIM_STALE``).
"""

from __future__ import annotations

import logging
import time
from typing import cast

import redis as redis_lib
from rq.job import JobStatus

from core.config import Settings
from core.events import CommitReason, CommitRequest, decode
from workers.commits.looks import POLLING_LOOK_S, SWEEP_INTERVAL_S, WAITING_LOOK_S, look_in
from workers.commits.phase2_due import POLLING
from workers.commits.records import FINAL_STATUSES, FOLLOW_KEEP, FOLLOW_REASON, load_outcome
from workers.commits.request import commit_state, fail_crashed, request_commit, resume
from workers.store.connection import optional_text, text
from workers.store.keys import Keys, session_keys
from workers.store.scripts import CLAIM_STALE

log = logging.getLogger(__name__)

SWEEP_BATCH = 200
"""Most in-flight commits one sweep looks at (the rest on the next)."""
WORKER_BEAT_TTL_S = 5
"""A commit worker not heard of for this long is dead: the job it ran is resumed."""
_WAITING = frozenset({JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED})
"""A job's RQ statuses while it waits to start."""
STRANDED = "stranded"
"""In-flight hash field: the job id a sweep found stranded (resumed if it still is next time)."""


def beat(redis: redis_lib.Redis, settings: Settings, worker_name: str) -> None:
    """Say that the commit worker ``worker_name`` is alive (its due-job thread, every ``HEALTH_BEAT_S``)."""
    redis.set(Keys(settings.key_prefix).commit_worker(worker_name), "1", ex=WORKER_BEAT_TTL_S)


def sweep(redis: redis_lib.Redis, settings: Settings) -> int:
    """Look at the in-flight commits due for a look; returns how many were resumed or followed."""
    index = Keys(settings.key_prefix).commits_in_flight()
    now = time.time()
    due = CLAIM_STALE(redis, [index], [now - SWEEP_INTERVAL_S, now, SWEEP_BATCH])
    return sum(_look(redis, settings, index, text(key)) for key in due)


def _look(redis: redis_lib.Redis, settings: Settings, index: str, inflight_key: str) -> bool:
    raw_request, job_id, stranded, follow_reason, follow_keep = redis.hmget(
        inflight_key, "req", "job", STRANDED, FOLLOW_REASON, FOLLOW_KEEP
    )
    if raw_request is None:  # finished (the record cleared it), or never written
        redis.zrem(index, inflight_key)
        return False
    request = decode(raw_request, CommitRequest)
    outcome = load_outcome(redis, session_keys(settings, request.address).commits, request.commit_id)
    if outcome is not None and outcome.status in FINAL_STATUSES:
        if follow_reason is None:
            redis.zrem(index, inflight_key)
            return False
        # it ended owing a commit (records.FOLLOW_REASON, written from a request's reason): start it;
        # its request re-indexes the slot
        followed = request_commit(
            redis,
            settings,
            request.address,
            reason=cast(CommitReason, text(follow_reason)),
            keep_recent_count=int(follow_keep or 0),
        )
        log.info("commit %s ended; %s follows it (%s)", request.commit_id, followed.commit_id, text(follow_reason))
        return True
    job = optional_text(job_id)
    state, found = commit_state(redis, settings, request, job)
    if state == "stranded" and optional_text(stranded) != job:
        redis.hset(inflight_key, STRANDED, job or "")  # maybe on its way: look again next time
        return False
    if state == "crashed":  # the job raised: the commit failed (as request_commit records it)
        fail_crashed(redis, settings, request, outcome, found)
        return False
    if state == "live":
        if job == POLLING:  # its reads mend themselves (a lapsed claim is due again): look seldom
            look_in(redis, settings, inflight_key, POLLING_LOOK_S)
        elif found is not None and found.get_status(refresh=False) in _WAITING:
            # waiting its turn: looked at seldom (workers.commits.looks); its start makes it due
            # sooner. A start between this look's read and this write is looked at late, not lost.
            look_in(redis, settings, inflight_key, WAITING_LOOK_S)
        return False
    resume(redis, settings, request, outcome, state=state, job=job)  # one line says why
    return True
