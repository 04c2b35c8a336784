"""Lost memory extractions: suspected, re-run alone, and counted when the re-run shows the
loss (core.repair).

A commit whose phase 2 completed with no memories has its archive looked at by the job
``check_extraction`` (scheduled by the poller, workers.commits.run). When its phase 2
overlapped another of its OV user (``core.repair.overlapped``: only then does OV merge
extractions) and the archive held substantive user text, the extraction may have been lost
to the merge, or there was nothing worth remembering: the archive's user messages go to a
repair session of the same user and agent, committed alone (an ordinary commit, reason
``manual``, listed in ``Keys.extraction_repairs``: ``ovstream status``, the console), said at
INFO. The repair's own commit decides: memories written alone mean the merge lost them (counted
once in ``Keys.extractions_lost``, ``ovstream_extractions_lost_total``, its alert, and a
WARNING); none written means nothing was lost (INFO). So a user who says nothing memorable in
two sessions at once raises no alarm.

Once per archive: a claim (``Keys.extraction_repair``, a string with the session state's
lifetime) names the repair commit, and a job run again finds it. Repairs of one tenant run
one at a time (``Keys.extraction_repair_turn``): a repair overlapping another extraction of
its user could be merged away again by the same model; a repair finding another of its tenant
unfinished looks again after ``REPAIR_WAIT_S``. A repair's own commit is never repaired in turn.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import msgspec
import redis as redis_lib

from core.config import Settings
from core.events import EVENT_VERSION, CommitOutcome, CommitRequest, EventDecodeError, decode, encode
from core.ov.client import OVError
from core.ov.messages import OVMessage
from core.repair import (
    is_repair_session,
    lost_extraction,
    overlapped,
    repair_messages,
    repair_session_id,
    user_text,
)
from core.session import SessionAddress
from workers import logs
from workers.commits.context import JobContext, context_for
from workers.commits.records import FINAL_STATUSES, OUTCOME_FIELD, CommitRecords, decoded, in_flight_requests
from workers.commits.request import request_commit
from workers.commits.run import patiently, schedule_extraction_check
from workers.store.connection import optional_text, stream_entries
from workers.store.keys import Keys

log = logging.getLogger(__name__)

REPAIR_WAIT_S = 5.0
"""How long a repair waits before looking again while another repair of its tenant runs."""
REPAIRS_LISTED = 1000
"""Approximate length of the list of lost extractions (``Keys.extraction_repairs``)."""


class RepairEntry(msgspec.Struct, kw_only=True):
    """One lost extraction, as listed: the commit, its archive, and the commit repairing it."""

    v: int = EVENT_VERSION
    commit_id: str
    ov_session_id: str
    agent_id: str
    user: str | None = None
    archive_uri: str
    repair: CommitRequest
    at: float


def check_extraction(request_json: str, key_prefix: str) -> str:
    """RQ job: was ``request``'s extraction lost? If so, repair it (once). Returns what it did."""
    request = decode(request_json, CommitRequest)
    with logs.fields(session=request.ov_session_id, commit_id=request.commit_id):
        ctx = context_for(key_prefix)
        return patiently(request, lambda: run_check(ctx.store, ctx, request))  # a Redis blip: waited out


def run_check(redis: redis_lib.Redis, ctx: JobContext, request: CommitRequest) -> str:
    settings, keys = ctx.settings, Keys(ctx.settings.key_prefix)
    if is_repair_session(request.ov_session_id):
        return _verdict(redis, settings, request)
    if redis.exists(keys.extraction_repair(request.commit_id)):
        return "already repaired"
    outcome = CommitRecords(redis, settings).outcome(request)
    if outcome is None or not outcome.archive_uri:
        return "no archive"
    if not overlapped((outcome.requested_at, outcome.finished_at or time.time()), _others(redis, settings, request)):
        return "alone: nothing a merge could lose"
    ov, sid = ctx.ov(request.address), request.ov_session_id
    archive_id = outcome.archive_uri.rstrip("/").rsplit("/", 1)[-1]
    try:
        archive = ctx.run(lambda: ov.get_archive(sid, archive_id))
    except OVError as exc:
        log.warning(
            "commit %s: could not read archive %s to check its extraction: %s", request.commit_id, archive_id, exc
        )
        return "archive unreadable"
    if not lost_extraction(outcome.status, outcome.memories_extracted, archive.messages):
        return "nothing lost"
    if not _my_turn(redis, settings, request):
        schedule_extraction_check(redis, settings, request, REPAIR_WAIT_S)
        return "waits for its tenant's repair"
    repair_sid = repair_session_id(request.commit_id)
    try:
        ctx.run(lambda: _write_repair_session(ctx, request, repair_sid, archive.messages))
    except OVError as exc:
        log.warning("commit %s: could not write its repair session: %s; trying again later", request.commit_id, exc)
        schedule_extraction_check(redis, settings, request, REPAIR_WAIT_S)
        return "repair session not written"
    repair = request_commit(
        redis,
        settings,
        SessionAddress(repair_sid, request.agent_id, request.user),
        reason="manual",
        keep_recent_count=0,
    )
    _claim(redis, settings, request, outcome.archive_uri, repair)
    log.info(
        "commit %s of session %s: phase 2 wrote no memories beside another commit of its user (OV merges "
        "those: lost, or nothing to remember?); its archive %s holds %d characters the user said, "
        "extracted again alone in session %s (commit %s)",
        request.commit_id,
        sid,
        archive_id,
        len(user_text(archive.messages)),
        repair_sid,
        repair.commit_id,
    )
    return "repairing"


def _verdict(redis: redis_lib.Redis, settings: Settings, repair: CommitRequest) -> str:
    """What a repair's own commit shows: memories written alone, so the first extraction was
    lost (counted once, said at WARNING), or none, so nothing was."""
    outcome = CommitRecords(redis, settings).outcome(repair)
    if outcome is None or outcome.status != "completed":
        return "repair unfinished"
    if not outcome.memories_extracted:
        log.info(
            "repair commit %s (session %s) wrote no memories alone either: nothing had been lost",
            repair.commit_id,
            repair.ov_session_id,
        )
        return "nothing was lost"
    keys = Keys(settings.key_prefix)
    if not redis.set(keys.extraction_loss(repair.commit_id), 1, nx=True, ex=settings.session_state_ttl_s):
        return "loss counted already"
    redis.incr(keys.extractions_lost())
    log.warning(
        "repair commit %s (session %s) wrote %d memories from what the user said, which the first "
        "phase 2, merged with another of its user, had lost (an extraction lost, now repaired)",
        repair.commit_id,
        repair.ov_session_id,
        outcome.memories_extracted,
    )
    return "lost, repaired"


async def _write_repair_session(
    ctx: JobContext, request: CommitRequest, repair_sid: str, archive: list[OVMessage]
) -> None:
    """The archive's user messages into the repair session, unless a run before wrote them."""
    ov = ctx.ov(request.address)
    try:
        state = await ov.get_session(repair_sid)
        written = state.message_count + state.commit_count
    except OVError as exc:
        if exc.code != "NOT_FOUND":
            raise
        written = 0
    if not written:
        await ov.add_messages(repair_sid, repair_messages(archive))


OTHERS_READ = 500
"""Most recent final outcomes, and in-flight commits, read for one that overlapped."""


def _others(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> list[tuple[float, float | None]]:
    """(asked for, final or None) of the other commits of ``request``'s OV user lately: the
    newest final outcomes of the deployment and the commits in flight."""
    entries = stream_entries(redis.xrevrange(Keys(settings.key_prefix).commit_outcomes(), count=OTHERS_READ))
    outcomes = [decoded(fields.get(OUTCOME_FIELD.encode()), CommitOutcome) for _, fields in entries]
    requests = in_flight_requests(redis, settings, OTHERS_READ)
    return [
        (other.requested_at, other.finished_at if isinstance(other, CommitOutcome) else None)
        for other in (*outcomes, *requests)
        if other is not None and other.user == request.user and other.commit_id != request.commit_id
    ]


def _tenant(request: CommitRequest) -> str:
    return request.user or "-"


def _my_turn(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> bool:
    """Whether no other repair of ``request``'s tenant is unfinished (then this one may go)."""
    held = redis.get(Keys(settings.key_prefix).extraction_repair_turn(_tenant(request)))
    if held is None:
        return True
    try:
        other = decode(held, CommitRequest)
    except EventDecodeError:
        return True
    outcome = CommitRecords(redis, settings).outcome(other)
    return outcome is None or outcome.status in FINAL_STATUSES


def _claim(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest, archive_uri: str, repair: CommitRequest
) -> None:
    """Record the repair: the claim (once per archive), the tenant's turn and the list (the
    count waits for the repair's verdict)."""
    keys, ttl = Keys(settings.key_prefix), settings.session_state_ttl_s
    if not redis.set(keys.extraction_repair(request.commit_id), repair.commit_id, nx=True, ex=ttl):
        return
    redis.set(keys.extraction_repair_turn(_tenant(request)), encode(repair), ex=int(settings.phase2_deadline_s) + 60)
    entry = RepairEntry(
        commit_id=request.commit_id,
        ov_session_id=request.ov_session_id,
        agent_id=request.agent_id,
        user=request.user,
        archive_uri=archive_uri,
        repair=repair,
        at=repair.requested_at,
    )
    redis.xadd(keys.extraction_repairs(), {"e": encode(entry)}, maxlen=REPAIRS_LISTED, approximate=True)


@dataclass(frozen=True, slots=True)
class LostExtractions:
    """What ``ovstream status``, ``/metrics`` and the console say of lost extractions."""

    lost_total: int
    """Extractions lost since the deployment began, as their repairs showed (the counter)."""
    repairs: dict[str, int]
    """The listed repairs by their commit's state (pending, running, completed, failed, ...)."""
    newest: list[tuple[RepairEntry, str, int | None]]
    """The newest few: the entry, its repair's state and the memories it wrote."""


def read_lost_extractions(redis: redis_lib.Redis, settings: Settings, *, newest: int = 5) -> LostExtractions:
    keys, records = Keys(settings.key_prefix), CommitRecords(redis, settings)
    total = int(optional_text(redis.get(keys.extractions_lost())) or 0)
    by_state: dict[str, int] = {}
    shown: list[tuple[RepairEntry, str, int | None]] = []
    for _, fields in reversed(stream_entries(redis.xrevrange(keys.extraction_repairs(), count=200))):
        entry = decoded(fields.get(b"e"), RepairEntry)
        if entry is None:
            continue
        outcome = records.outcome(entry.repair)
        state = outcome.status if outcome is not None else "unknown"
        by_state[state] = by_state.get(state, 0) + 1
        shown.append((entry, state, outcome.memories_extracted if outcome is not None else None))
    return LostExtractions(total, dict(sorted(by_state.items())), list(reversed(shown))[:newest])
