"""The OV calls of the commit jobs: phase 1, adopting a commit OV took before a crash, the
phase-2 task read, and the snapshot refresh after an archive. Sync: each runs on the thread
of its job or of the poller's read (``JobContext.ov_sync``), its snapshot written through
the jobs' sync store client."""

from __future__ import annotations

import contextlib
import logging
import time
from functools import partial

from core.events import CommitRequest
from core.ov.client import OVError
from core.ov.layout import archive_id
from core.ov.models import CommitAccepted, TaskState
from core.ov.sync_client import OVSyncClient
from workers.commits.context import JobContext
from workers.store.connection import REDIS_ERRORS
from workers.store.snapshots import refresh_snapshot_on_thread, snapshot_key

log = logging.getLogger(__name__)


def commit_count(ov: OVSyncClient, request: CommitRequest) -> int:
    try:
        return ov.get_session(request.ov_session_id).commit_count
    except OVError as exc:
        if exc.status == 404:  # not in OV yet: its commit will say so
            return 0
        raise


EARLIER_SEND_GRACE_S = 2.0
"""Past an earlier send's own timeout (``ov_timeout_s``), how long it may still take to land."""
EARLIER_SEND_LOOK_S = 1.0
"""How often OV's count is read while an earlier send may still land."""


def count_after_earlier_send(
    ov: OVSyncClient, request: CommitRequest, count: int, sent_at: float, timeout_s: float
) -> int:
    """OV's commit count once the send this commit's record says is unanswered (made at
    ``sent_at``, wall clock) has landed or can no longer: a worker taken for dead (its beat
    lapsed on a starved machine) may be alive and waiting on OV, and OV's commit has no
    idempotency key, so sending again before then could commit twice (the second archive would
    be no record's). Reads the count every ``EARLIER_SEND_LOOK_S`` until it moves past ``count``
    or the send's deadline passes."""
    deadline = sent_at + timeout_s + EARLIER_SEND_GRACE_S
    if time.time() >= deadline:
        return count
    log.info(
        "commit %s: sent to OV %.1f s ago with no answer recorded and OV's count not moved;"
        " waiting up to %.1f s for that send to land before sending again",
        request.commit_id,
        time.time() - sent_at,
        deadline - time.time(),
    )
    while (left := deadline - time.time()) > 0:
        time.sleep(min(EARLIER_SEND_LOOK_S, left))
        now = commit_count(ov, request)
        if now > count:
            return now
    return count


def adopt(ov: OVSyncClient, request: CommitRequest, before: int) -> CommitAccepted:
    """What OV's answer to this commit was: its archive is the one after ``before``, its
    phase 2 the session's newest commit task (one commit per session is in flight)."""
    state = ov.get_session(request.ov_session_id)
    tasks = ov.session_commit_tasks(request.ov_session_id, limit=5)
    log.info(  # the crash was said (WARNING) where the commit was resumed; this is its mend
        "commit %s: OV took an earlier send of it (%d -> %d commits); adopting task %s",
        request.commit_id,
        before,
        state.commit_count,
        tasks[0].task_id if tasks else None,
    )
    archive = f"{state.uri}/history/{archive_id(before + 1)}" if state.uri else None
    return CommitAccepted(task_id=tasks[0].task_id if tasks else None, archive_uri=archive, archived=True)


def commit(ov: OVSyncClient, request: CommitRequest) -> CommitAccepted:
    keep = request.keep_recent_count
    return ov.commit(request.ov_session_id, keep_recent_count=keep, enable_working_memory=True)


SNAPSHOT_READ_AGAIN_S = 0.5
"""Wait before the one second read of a snapshot OV failed to give after a commit. OV 0.5.2
under load answered such a read ``400 Expecting value`` (its own file read mid-write) while
phase 2 ran; read again, it answers."""


def refresh_quietly(ctx: JobContext, ov: OVSyncClient, request: CommitRequest) -> None:
    read = partial(ov.get_context, request.ov_session_id, token_budget=ctx.settings.snapshot_token_budget)
    try:
        try:
            refresh_snapshot_on_thread(ctx.store, ctx.settings, request.address, read)
        except OVError as first:
            log.info("snapshot of %s after commit: OV answered %s; reading it again", request.ov_session_id, first)
            time.sleep(SNAPSHOT_READ_AGAIN_S)
            refresh_snapshot_on_thread(ctx.store, ctx.settings, request.address, read)
    except OVError as exc:
        # The commit stands. The stored snapshot predates it, and capture must not grow it
        # (core.snapshot_growth trusts it): drop it, so the next read goes to OV.
        log.warning("snapshot of %s not refreshed after commit (%s); dropped", request.ov_session_id, exc)
        with contextlib.suppress(*REDIS_ERRORS):  # Redis away too: the count check is left
            ctx.store.delete(snapshot_key(ctx.settings, request.address))
    except REDIS_ERRORS as exc:  # nothing stored, nothing stale: the next batch reads OV
        log.warning("snapshot of %s not refreshed after commit: %s", request.ov_session_id, exc)


def read_task(ctx: JobContext, request: CommitRequest, task_id: str) -> TaskState:
    ov = ctx.ov_sync(request.address)
    task = ov.get_task(task_id)
    if task.status == "completed":  # the archive overview exists now
        refresh_quietly(ctx, ov, request)
    return task
