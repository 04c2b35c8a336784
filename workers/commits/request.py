"""Asking for a commit, and waiting for its outcome: the commit chain's entry.

A commit is asked for with ``request_commit`` (capture at the threshold, compact,
memory_store). Each session has at most one commit in flight: its request sits in
``Keys.commit_inflight`` until an outcome is final, and asking again returns it (or
resumes it, when its job was lost; or records it failed, when its job raised; or, when the
reason needs the newest messages and that commit already asked OV, owes one more after it). The
first job of the chain is ``workers.commits.run.commit_session``, enqueued by reference at
once: commits of one OV user run side by side (OV merges their phase 2s).
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

import redis as redis_lib
from rq.job import Job

from core.config import Settings
from core.events import CommitOutcome, CommitReason, CommitRequest, decode, encode
from core.session import SessionAddress
from workers.commits.looks import WAITING_LOOK_S, look_in
from workers.commits.phase2_due import POLLING, is_due_read
from workers.commits.queue import (
    commit_job_id,
    inflight_key,
    job_error,
    job_state,
    now,
    queue_of,
)
from workers.commits.records import (
    FINAL_STATUSES,
    FOLLOW_KEEP,
    FOLLOW_REASON,
    CommitRecords,
    final_or_timeout,
    load_outcome,
    outcome_of,
)
from workers.commits.run import finish_commit
from workers.commits.schedule import enqueue_commit, first_read, schedule_poll
from workers.store.connection import optional_text
from workers.store.in_order import InOrder
from workers.store.keys import SessionKeys, session_keys
from workers.store.scripts import CLAIM_LOST_JOB, CREATE_COMMIT_IF_FREE

log = logging.getLogger(__name__)


def next_generation(stored: bytes | str | None) -> int:
    """The number of a session's next commit: one past the stored counter. With none stored
    (a new session, or one whose state expired: ``sessionStateTtlS``) it starts at the clock's
    millisecond, so a job id never repeats one an earlier life of the session used (RQ keeps
    a failed job's id for a year); commits count up by one, far slower than the clock."""
    return int(stored) + 1 if stored is not None else int(now() * 1000)


LEGACY_IN_LINE = "in-tenant-line"
"""What an in-flight slot named instead of a job while its commit waited in its tenant's line
(releases before commits of one user ran side by side). Such a commit has no job: it is
enqueued as any commit whose job is gone, and said so quietly (it was not lost)."""


def commit_state(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, job_id: str | None
) -> tuple[str, Job | None]:
    """``queue.job_state`` of the commit's job; "waiting" for a commit an earlier release left
    waiting in its tenant's line (``LEGACY_IN_LINE``): it is resumed as a lost one is. A commit
    whose phase 2 is read from the due set (``POLLING``) is live while its read is there
    (a claimed one too: its claim lapses by itself), stranded when not."""
    if job_id == LEGACY_IN_LINE:
        return "waiting", None
    if job_id == POLLING:
        return ("live" if is_due_read(redis, settings, inflight_key(settings, request)) else "stranded"), None
    return job_state(redis, settings, job_id, queue_of(settings, request.address))


def fail_crashed(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, outcome: CommitOutcome | None, job: Job | None
) -> CommitOutcome:
    """Record the commit whose job raised (``job_state`` "crashed") as failed, with the error."""
    return finish_commit(redis, settings, request, "failed", outcome, error=f"job crashed: {job_error(job)}")


def resume(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    outcome: CommitOutcome | None,
    *,
    state: str = "lost",
    job: str | None = None,
) -> None:
    """Put a lost in-flight commit back on the queue at the step it had reached (under a new
    job id: the lost job's may still exist), said in one line. At INFO when nothing was lost:
    ``state`` "waiting" (one an earlier release left in its tenant's line) or "stranded" (its
    job on no queue and in no schedule at two looks: a worker stopping, for an upgrade say,
    took it off the queue and did not run it); a job lost with a dead worker is a WARNING."""
    again = f"{request.commit_id}_again{int(now() * 1000)}"
    if not CLAIM_LOST_JOB(redis, [inflight_key(settings, request)], [job or "", again]):
        return  # another process found it lost too, and resumed it
    level = logging.INFO if state in ("waiting", "stranded") else logging.WARNING
    if outcome is not None and outcome.task_id:
        log.log(level, "commit %s: its phase-2 read (%s) is %s; reading it again", request.commit_id, job, state)
        schedule_poll(redis, settings, request, first_read(settings, outcome.task_id))
    else:
        if state == "waiting":  # an earlier release's line: nothing was lost
            log.info("commit %s waited in its tenant's line (an earlier release); enqueueing it", request.commit_id)
        else:
            log.log(level, "commit %s: its job %s is %s; enqueueing it again", request.commit_id, job, state)
        enqueue_commit(redis, settings, request, job_id=again)


FOLLOWED_UP_REASONS = frozenset({"session_end", "compact", "memory_store", "manual"})
"""Reasons that must take every message written before they were asked: joining a commit whose
phase 1 already began would leave the newest out, so one more commit follows it. A threshold
commit needs none (the next threshold takes what it left)."""


def owes_follow_up(reason: str, keep_recent_count: int, joined: CommitRequest, recorded: CommitOutcome | None) -> bool:
    """Whether a request for ``reason`` (keeping ``keep_recent_count``) that joins the commit
    ``joined`` (recorded as ``recorded``) needs a commit after it: the joined one's phase 1
    began (recorded "running") and may have taken OV's messages before the newest were
    written, or it keeps more of the newest than asked (a threshold commit's keep window,
    which an end would archive). A pending one keeping as few has not asked OV yet: it takes
    them all."""
    if reason not in FOLLOWED_UP_REASONS:
        return False
    began = recorded is not None and recorded.status != "pending"
    return began or joined.keep_recent_count > keep_recent_count


def request_commit(
    redis: redis_lib.Redis, settings: Settings, address: SessionAddress, *, reason: CommitReason, keep_recent_count: int
) -> CommitRequest:
    """Enqueue a commit of the session, or return the one already in flight (marking that one
    to be followed by another when it cannot take what ``reason`` needs: ``owes_follow_up``)."""
    ask = _Ask(address, session_keys(settings, address), reason, keep_recent_count)
    request = _request_if_free(redis, settings, ask)
    if request is None:  # a commit in flight, or one owed after the last, or a race: decided under WATCH
        request, new = _request_watched(redis, settings, ask)
        if not new:
            return request
    enqueue_commit(redis, settings, request)
    log.info(
        "commit %s of session %s requested (%s, keep %d)",
        request.commit_id,
        address.ov_session_id,
        reason,
        keep_recent_count,
    )
    return request


class _Ask(NamedTuple):
    """What ``request_commit`` was asked for: the session, its keys, the reason, the newest
    messages to keep."""

    address: SessionAddress
    keys: SessionKeys
    reason: CommitReason
    keep: int


def _new_request(settings: Settings, ask: _Ask, generation: int) -> CommitRequest:
    address = ask.address
    return CommitRequest(
        commit_id=commit_job_id(settings.key_prefix, ask.keys.scope, address.ov_session_id, generation),
        ov_session_id=address.ov_session_id,
        agent_id=address.agent_id,
        user=address.tenant,
        reason=ask.reason,
        keep_recent_count=ask.keep,
        generation=generation,
        requested_at=now(),
    )


def _index(client: Any, settings: Settings, ks: SessionKeys) -> Any:
    """A new commit's entry in the sweep's index, written before its slot (another slot, so in
    none of its writes): a sweep finds it if its job is lost; while it waits its turn, seldom
    (workers.commits.looks)."""
    return look_in(client, settings, ks.commit_inflight, WAITING_LOOK_S, new=True)


def _request_if_free(redis: redis_lib.Redis, settings: Settings, ask: _Ask) -> CommitRequest | None:
    """The common case, no commit in flight, in two round trips (three on a cluster): the slot
    and the counter read together, then the new commit indexed and made by a script that makes
    it only while the slot is still free and the counter unchanged (``CREATE_COMMIT_IF_FREE``;
    the watched way took five). None: the slot holds a commit, or did by the time the script
    ran (then the watched way decides; the index entry written is the slot's anyway)."""
    ks = ask.keys
    with redis.pipeline(transaction=False) as pipe:  # the session's slot: one round trip
        pipe.hmget(ks.commit_inflight, "req", FOLLOW_REASON, FOLLOW_KEEP)
        pipe.get(ks.commit_generation)
        (held, *owed), stored = pipe.execute()
    if held is not None:
        return None
    request = _new_request(settings, ask, next_generation(stored))
    args: list[Any] = [
        optional_text(stored) or "",
        request.generation,
        encode(request),
        encode(outcome_of(request, "pending")),
        settings.session_state_ttl_s,
        int(any(v is not None for v in owed)),  # any new commit is the one owed
        FOLLOW_REASON,
        FOLLOW_KEEP,
    ]
    keys = [ks.commit_inflight, ks.commit_generation, ks.commits]
    steps = InOrder(redis).add(lambda client: _index(client, settings, ks))
    steps.add(lambda client: CREATE_COMMIT_IF_FREE(client, keys, [request.commit_id, *args]))
    return request if steps.run()[-1] else None


def _request_watched(redis: redis_lib.Redis, settings: Settings, ask: _Ask) -> tuple[CommitRequest, bool]:
    """``request_commit`` under WATCH of the slot and the counter: the commit in flight joined
    (False), or a new one made (True)."""
    ks, reason, keep_recent_count = ask.keys, ask.reason, ask.keep
    with redis.pipeline(transaction=True) as pipe:  # WATCH: the cluster client asks for it by name
        while True:
            try:
                pipe.watch(ks.commit_inflight, ks.commit_generation)
                raw_req, job_id, *owed = pipe.hmget(ks.commit_inflight, "req", "job", FOLLOW_REASON, FOLLOW_KEEP)
                if raw_req is not None:
                    current = decode(raw_req, CommitRequest)
                    outcome = load_outcome(pipe, ks.commits, current.commit_id)
                    if outcome is None or outcome.status not in FINAL_STATUSES:
                        state, job = commit_state(redis, settings, current, optional_text(job_id))
                        if state == "crashed":
                            pipe.reset()
                            fail_crashed(redis, settings, current, outcome, job)
                            continue
                        if owes_follow_up(reason, keep_recent_count, current, outcome):
                            pipe.multi()  # the slot unchanged since read, or WatchError: look again
                            pipe.hset(ks.commit_inflight, FOLLOW_REASON, reason)
                            pipe.hset(ks.commit_inflight, FOLLOW_KEEP, keep_recent_count)
                            pipe.execute()
                            log.info("commit %s: its phase 1 began; a %s commit follows it", current.commit_id, reason)
                        else:
                            pipe.reset()
                        if state in ("lost", "waiting"):
                            resume(redis, settings, current, outcome, state=state, job=optional_text(job_id))
                        return current, False  # a live one, or a stranded one (the sweep's)
                generation = next_generation(pipe.get(ks.commit_generation))
                request = _new_request(settings, ask, generation)
                _index(redis, settings, ks)
                pipe.multi()
                pipe.set(ks.commit_generation, generation, ex=settings.session_state_ttl_s)
                if any(v is not None for v in owed):  # as read: the WATCH fails the EXEC on any change
                    pipe.hdel(ks.commit_inflight, FOLLOW_REASON, FOLLOW_KEEP)  # any new commit is the one owed
                pipe.hset(ks.commit_inflight, mapping={"req": encode(request), "job": request.commit_id})
                pipe.hset(ks.commits, request.commit_id, encode(outcome_of(request, "pending")))
                pipe.expire(ks.commits, settings.session_state_ttl_s)
                pipe.execute()
                return request, True
            except redis_lib.WatchError:
                continue


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
